// The one-kernel 16-token forward (fused16.h has the roles and the hand-over).
#include <cuda_bf16.h>

#include <cstdint>

#include "chain16_step.cuh"
#include "device/ptx.cuh"
#include "device/wgmma.cuh"
#include "factors16.h"
#include "factors16_build.cuh"
#include "fused16.h"

namespace kda::lab::factors16 {
namespace {

using kda::detail::ptx::fence_proxy_async_shared;
using kda::detail::ptx::smem_u32;
namespace wg = kda::detail::wgmma;
using chain::kBuffer;
using chain::kOTile;

constexpr int kRing = 4;                                 // record buffers
// A builder's scratch: two input sets (the next sub-chunk's loads land in one while this one is
// built from the other) and the work region.
constexpr int kScratch = (2 * build::kInBytes + build::kWorkBytes + 127) & ~127;
// Shared memory of a CTA with `builders` builder warpgroups.
constexpr int scratch_offset() { return kRing * kBuffer; }
constexpr int o_offset(int builders) { return scratch_offset() + builders * kScratch; }
constexpr int full_offset(int builders) { return o_offset(builders) + 2 * kOTile; }
constexpr int empty_offset(int builders) { return full_offset(builders) + 8 * kRing; }
constexpr int smem_bytes(int builders) { return empty_offset(builders) + 8 * kRing + 1024; }
static_assert(smem_bytes(2) <= 227 * 1024, "one CTA per SM");
// Registers with two builders: 512 threads start at 128 each (65,536); the chain's warpgroups
// take 152 (the step needs ~136), the builders give theirs down to 104 (at 96 the build spills
// five values). With one builder, 384 threads start at 168: nothing to move.
constexpr int kChainRegisters = 152;
constexpr int kBuilderRegisters = 104;
static_assert(2 * 128 * kChainRegisters + 2 * 128 * kBuilderRegisters <= 65536,
              "the register file");

__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// A plain arrival (release at CTA scope: the arriving thread's earlier writes, and those it
// observed through a barrier, are visible to a thread whose wait sees the phase complete).
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// The stress mode's sleep: up to max_ns, pseudo-random in `salt`.
__device__ __forceinline__ void jitter(int max_ns, uint32_t salt) {
  if (max_ns > 0) {
    uint32_t x = salt * 2654435761u;
    x ^= x >> 15;
    __nanosleep(x % static_cast<uint32_t>(max_ns));
  }
}
template <int kRegisters>
__device__ __forceinline__ void registers_up() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void registers_down() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

template <int kBuilders>
__global__ void __launch_bounds__(chain::kThreads + kBuilders * kThreads, 1)
    fused16_kernel(const FusedArgs a) {
  constexpr int kSScratch = scratch_offset(), kSO = o_offset(kBuilders);
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // the swizzled tiles need 1024-byte alignment
  unsigned char* const smem = smem_raw + (base - raw);
  const int tid = threadIdx.x;
  const int heads = a.in.heads;
  const int s = static_cast<int>(blockIdx.x / heads), h = static_cast<int>(blockIdx.x % heads);
  const int64_t begin = a.in.cu != nullptr ? a.in.cu[s] : static_cast<int64_t>(s) * a.in.seq_len;
  const int64_t end = a.in.cu != nullptr ? a.in.cu[s + 1] : begin + a.in.seq_len;
  const int64_t chunks = (end - begin + kSub - 1) / kSub;
  const uint32_t full = base + full_offset(kBuilders), empty = base + empty_offset(kBuilders);
  if (tid == 0) {
    for (int b = 0; b < kRing; ++b) {
      wg::mbarrier_init(full + 8 * b, 1);
      wg::mbarrier_init(empty + 8 * b, 1);
    }
  }
  __syncthreads();
  // The warpgroup's role, in a register ptxas sees as warp-uniform (a wgmma under a branch it
  // cannot prove uniform serializes every wgmma of the kernel).
  const int group = __shfl_sync(0xffffffffu, tid / 128, 0);

  if (group < 2) {  // ---- the chain
    if constexpr (kBuilders == 2) registers_up<kChainRegisters>();
    const int64_t state_offset = (static_cast<int64_t>(s) * heads + h) * kDim * kDim;
    float st[16][4];
    chain::load_state(st, a.initial_state, state_offset, tid);
    for (int64_t c = 0; c < chunks; ++c) {
      named_sync(1, chain::kThreads);  // every chain warp is done with sub-chunk c - 1
      if (c > 0) {
        if (tid == 0) mbarrier_arrive(empty + 8 * static_cast<uint32_t>((c - 1) % kRing));
        chain::copy_out(smem + kSO + ((c - 1) & 1) * kOTile, a.out, a.out_stride, h,
                        begin + (c - 1) * kSub, end, tid);
      }
      const uint32_t b = static_cast<uint32_t>(c % kRing);
      wg::mbarrier_wait(full + 8 * b, static_cast<uint32_t>((c / kRing) & 1));
      jitter(a.jitter_ns, static_cast<uint32_t>(c) * 977u + tid);
      chain::step(st, base + b * kBuffer, smem + b * kBuffer, smem + kSO + (c & 1) * kOTile, tid);
    }
    named_sync(1, chain::kThreads);
    if (chunks > 0) {
      chain::copy_out(smem + kSO + ((chunks - 1) & 1) * kOTile, a.out, a.out_stride, h,
                      begin + (chunks - 1) * kSub, end, tid);
    }
    if (a.final_state != nullptr) chain::store_state(st, a.final_state, state_offset, tid);
  } else {  // ---- builder group - 2: sub-chunks group - 2, + kBuilders, ...
    if constexpr (kBuilders == 2) registers_down<kBuilderRegisters>();
    const int builder = group - 2, btid = tid & 127, bar = 2 + builder;
    unsigned char* const scratch = smem + kSScratch + builder * kScratch;
    unsigned char* const work = scratch + 2 * build::kInBytes;
    auto sub_chunk = [&](int64_t c) {
      build::SubChunk sc;
      sc.seq = s;
      sc.first_token = begin + c * kSub;
      sc.rows = static_cast<int>(end - sc.first_token < kSub ? end - sc.first_token : kSub);
      sc.at_chunk = (c & 3) == 0;
      return sc;
    };
    if (builder < chunks) build::issue_loads(a.in, sub_chunk(builder), h, btid, scratch);
    int set = 0;  // the input set sub-chunk c's loads went to
    for (int64_t c = builder; c < chunks; c += kBuilders, set ^= 1) {
      // The next sub-chunk's loads into the other set (its last reader, this builder's previous
      // build, has passed the barrier that ended it); an empty group when there is none, so that
      // this one's is always the second newest.
      if (c + kBuilders < chunks) {
        build::issue_loads(a.in, sub_chunk(c + kBuilders), h, btid,
                           scratch + (set ^ 1) * build::kInBytes);
      } else {
        kda::detail::ptx::cp_async_commit();
      }
      const uint32_t b = static_cast<uint32_t>(c % kRing);
      const int64_t round = c / kRing;
      if (round > 0) wg::mbarrier_wait(empty + 8 * b, static_cast<uint32_t>((round - 1) & 1));
      build::build_sub_chunk<1>(sub_chunk(c), a.in.fuse_q_l2norm, btid,
                                scratch + set * build::kInBytes, work, smem + b * kBuffer,
                                [bar] { named_sync(bar, kThreads); });
      jitter(a.jitter_ns, static_cast<uint32_t>(c) * 131u + btid);
      fence_proxy_async_shared();  // the record's ordinary stores, for the chain's wgmma reads
      named_sync(bar, kThreads);   // the whole record is written; the scratch is free again
      if (btid == 0) mbarrier_arrive(full + 8 * b);
    }
  }
}

template <int kBuilders>
cudaError_t launch_with(const FusedArgs& args, cudaStream_t stream) {
  const cudaError_t e = cudaFuncSetAttribute(
      fused16_kernel<kBuilders>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes(kBuilders));
  if (e != cudaSuccess) return e;
  fused16_kernel<kBuilders>
      <<<static_cast<unsigned>(args.in.num_seqs) * static_cast<unsigned>(args.in.heads),
         chain::kThreads + kBuilders * kThreads, smem_bytes(kBuilders), stream>>>(args);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_fused(const FusedArgs& args, int builders, cudaStream_t stream) {
  if (!build::row_offsets_fit(args.in)) return cudaErrorInvalidValue;
  if (builders == 1) return launch_with<1>(args, stream);
  if (builders == 2) return launch_with<2>(args, stream);
  return cudaErrorInvalidValue;
}

}  // namespace kda::lab::factors16
