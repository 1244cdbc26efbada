// The standalone 16-token factor builder: one CTA = one warpgroup = one (16-token sub-chunk, head),
// the phases of onepass/build16.cuh between CTA barriers (one input set, loaded first), the record
// to global memory. (Two slots per CTA, the second's rows asked into L2 first, measured 6 % slower:
// 6b11ea9.)
#include <cuda_bf16.h>

#include <cstdint>

#include "factors16.h"
#include "onepass/build16.cuh"

namespace kda::lab::factors16 {
namespace {

using build::kSBytes;
using build::SubChunk;

static_assert(6 * (kSBytes + 1024) <= 228 * 1024, "six CTAs per SM");
constexpr int kCtasPerSm = 6;

// Slot -> sub-chunk (factors16.h slot_capacity); false when no sequence owns the slot.
__device__ __forceinline__ bool find_sub_chunk(const Args& a, int64_t slot, SubChunk& out) {
  auto begin = [&](int s) {
    return a.cu != nullptr ? static_cast<int64_t>(a.cu[s]) : static_cast<int64_t>(s) * a.seq_len;
  };
  int lo = 0, hi = a.num_seqs - 1;  // the largest s with begin(s) / 16 + s <= slot
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (begin(mid) / kSub + mid <= slot) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const int64_t b = begin(lo), e = begin(lo + 1);
  const int64_t local = slot - (b / kSub + lo);
  if (local < 0 || local * kSub >= e - b) return false;
  out.first_token = b + local * kSub;
  const int64_t left = e - out.first_token;
  out.rows = left < kSub ? static_cast<int>(left) : kSub;
  out.at_chunk = (local & 3) == 0;
  return true;
}

// The SM this thread runs on (the on-chip timing mode's record).
__device__ __forceinline__ uint32_t sm_id() {
  uint32_t id;
  asm volatile("mov.u32 %0, %%smid;\n" : "=r"(id));
  return id;
}

__global__ void __launch_bounds__(kThreads, kCtasPerSm) factors16_kernel(const Args a) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int h = blockIdx.y, tid = static_cast<int>(threadIdx.x);
  SubChunk sc;
  if (!find_sub_chunk(a, blockIdx.x, sc)) return;  // uniform: no sequence owns the slot
  const int64_t own = static_cast<int64_t>(h) * a.capacity + blockIdx.x;
  const int64_t record =
      a.on_chip ? (int64_t{sm_id()} * 8 + (blockIdx.x & 7)) % (a.capacity * a.heads) : own;
  unsigned char* const rec = reinterpret_cast<unsigned char*>(a.records) + record * kRecordBytes;
  build::issue_loads(a, sc, h, tid, smem);
  build::build_sub_chunk<0>(sc, a.fuse_q_l2norm, tid, smem, smem + build::kInBytes,
                            build::OneRecord{rec}, [] { __syncthreads(); });
}

}  // namespace

cudaError_t launch(const Args& args, cudaStream_t stream) {
  if (!row_offsets_fit(args)) return cudaErrorInvalidValue;
  cudaError_t e = cudaFuncSetAttribute(factors16_kernel,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, kSBytes);
  if (e != cudaSuccess) return e;
  e = cudaFuncSetAttribute(factors16_kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                           cudaSharedmemCarveoutMaxShared);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(args.capacity), static_cast<unsigned>(args.heads));
  factors16_kernel<<<grid, kThreads, kSBytes, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace kda::lab::factors16
