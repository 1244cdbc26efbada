// The one-pass forward for few chains (onepass.h launch_value_halves): a thread-block cluster of
// two CTAs per chain. One CTA per chain is builder-bound (three builders make a sub-chunk every
// ~1.8 us however short the chain's step), so a fixed shape of 64 chains uses 64 SMs at that rate
// (docs/design.md "Few chains"). Here CTA `rank` of the pair holds the state's value rows
// 64 rank .. +63 (chain16.cuh step on one warpgroup, as warps 4 rank .. 4 rank + 3 of the
// two-warpgroup step: ~half the chain's step), and both CTAs' three builders build the chain's
// sub-chunks in turn (CTA rank, builder j: sub-chunks rank + 2 j, rank + 2 j + 6, ...), writing
// each record into both CTAs' rings (build16.cuh MirroredRecord: W, QP, KG, AQK and A to both,
// U^T's value halves to their CTAs; record16.h kHalfRecordBytes). Six builders per chain, six
// ring buffers per CTA: a sub-chunk every ~1 us.
//
// Hand-over: buffer c % 6 of both CTAs holds sub-chunk c. Every thread of its builder writes its
// part of both copies, fences it for the async proxy (the chains' wgmma reads) and arrives on the
// full mbarrier of both CTAs (cluster-scope release, 128 arrivals a phase); each chain arrives on
// the empty mbarrier of both CTAs (2 arrivals a phase) once it is done with the buffer, and a
// builder waits on its own CTA's empty mbarrier, which so says that neither copy is still read. The
// bits are the one pass's (kernel.cuh Config<1, 3>, bf16 chain): the same builds, and per value row
// the same products in the same order.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

#include "device/cluster.cuh"
#include "device/ptx.cuh"
#include "device/wgmma.cuh"
#include "onepass/build16.cuh"
#include "onepass/chain16.cuh"
#include "onepass/kernel.cuh"  // named_sync, jitter, registers_up / registers_down
#include "onepass/onepass.h"
#include "onepass/record16.h"

namespace kda::detail::onepass {

// kStaged (the lab's one_pass16_halves_staged): each build stages QP, KG, AQK and A in its
// scratch (build16.cuh StagedRecord) and takes a ring buffer only for phase 5 and the chain's
// step, so four buffers serve six builders; otherwise a buffer is held for a whole build and a
// step, and six buffers bound the step at ~(build + step) / 6.
template <bool kStaged>
struct HalvesConfig {
  static constexpr int kBuilders = kHalvesBuilders / 2;  // a CTA's (onepass.h)
  static constexpr int kRing = kStaged ? kHalvesStagedRingBuffers : kHalvesRingBuffers;
  static constexpr int kBuffer = 19 * 1024;  // a half record (18,944 B), 1024-byte aligned
  static_assert(kBuffer >= kHalfRecordBytes, "a half record fits a buffer");
  static constexpr int kChainBuilders = 2 * kBuilders;  // per chain: both CTAs'
  static constexpr int kThreadsAll = 128 * (1 + kBuilders);
  static constexpr int kStage = kStaged ? build::kStageBytes : 0;  // after the work region
  static constexpr int kScratch = (build::kInBytes + build::kWorkBytes + kStage + 127) & ~127;
  static constexpr int kSScratch = kRing * kBuffer;
  static constexpr int kSO = kSScratch + kBuilders * kScratch;
  static constexpr int kSFull = kSO + 2 * chain::kOTile;  // kRing mbarriers: record c % kRing built
  static constexpr int kSEmpty = kSFull + 8 * kRing;      // and: both chains are done with it
  // kStaged: instead of the empty mbarriers, how many sub-chunks each chain (rank 0, 1) has
  // finished. With six builders on four buffers a builder can be two of a buffer's phases behind,
  // which a phase parity cannot tell apart; a count can.
  static constexpr int kSDone = kSEmpty;
  static constexpr int kSBytes = kSEmpty + 8 * kRing + 1024;  // + the base's alignment slack
  // The chain holds 64 state registers (the two-warpgroup step's ~136 a thread); the builders
  // get the rest.
  static constexpr int kChainRegisters = 152;
  static constexpr int kBuilderRegisters = 120;
  static_assert(kSBytes <= 227 * 1024, "one CTA per SM");
  static_assert(128 * kChainRegisters + 128 * kBuilders * kBuilderRegisters <= 65536,
                "the register file");
};

template <bool kStaged>
__global__ void __launch_bounds__(HalvesConfig<kStaged>::kThreadsAll, 1)
    onepass_halves_kernel(const OnepassArgs a) {
  using C = HalvesConfig<kStaged>;
  constexpr int kRingSize = C::kRing;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw = ptx::smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // the swizzled tiles need 1024-byte alignment
  unsigned char* const smem = smem_raw + (base - raw);  // the same offset in both CTAs
  const int tid = threadIdx.x;
  const int rank = cluster::cta_rank(), peer = rank ^ 1;
  const int heads = a.in.heads;
  const int chain_index = static_cast<int>(blockIdx.x / 2);
  const int row = chain_index / heads, h = chain_index % heads;
  const ChainTokens tokens = chain_tokens(a, row);
  const int s = tokens.seq;
  const int64_t begin = tokens.begin, end = tokens.end, chunks = tokens.chunks;
  const uint32_t full = base + C::kSFull, empty = base + C::kSEmpty;
  if (tid == 0) {
    for (int b = 0; b < kRingSize; ++b) {
      wgmma::mbarrier_init(full + 8 * b, kWarpgroup);  // every thread of the builder
      if constexpr (!kStaged) wgmma::mbarrier_init(empty + 8 * b, 2);
    }
    if constexpr (kStaged) {  // the counts take the empty mbarriers' place (never initialized)
      *reinterpret_cast<uint32_t*>(smem + C::kSDone) = 0;
      *reinterpret_cast<uint32_t*>(smem + C::kSDone + 4) = 0;
    }
    wgmma::fence_mbarrier_init();
  }
  cluster::sync();  // both CTAs' mbarriers exist before either arrives on the other's
  const int group = __shfl_sync(0xffffffffu, tid / 128, 0);  // warp-uniform, for the wgmmas

  if (group == 0) {  // ---- the chain of value rows 64 rank .. +63
    registers_up<C::kChainRegisters>();
    const int ctid = tid + 128 * rank;  // the two-warpgroup step's thread
    const int64_t state_offset = (static_cast<int64_t>(s) * heads + h) * kDim * kDim;
    float st[16][4];
    chain::load_state(st, a.initial_state, state_offset, ctid);
    // This half's 128 16-byte units of an O tile: token u / 8, values 64 rank + 8 (u % 8) .. +7.
    const int unit = (tid >> 3) * 16 + 8 * rank + (tid & 7);
    auto copy_out = [&](int64_t c) {
      chain::copy_out(smem + C::kSO + (c & 1) * chain::kOTile, a.out, a.out_stride, h,
                      begin + c * kSub, end, unit);
    };
    const uint32_t peer_empty = cluster::peer_shared(empty, peer);
    const uint32_t done = base + C::kSDone + 4 * rank;  // kStaged: this chain's count, both CTAs
    const uint32_t peer_done = cluster::peer_shared(done, peer);
    for (int64_t c = 0; c < chunks; ++c) {
      named_sync(1, kWarpgroup);  // every chain warp is done with sub-chunk c - 1
      if (c > 0) {
        if (tid == 0) {
          if constexpr (kStaged) {  // c sub-chunks done, in both CTAs' counts
            cluster::store_release(done, static_cast<uint32_t>(c));
            cluster::store_release_remote(peer_done, static_cast<uint32_t>(c));
          } else {
            const uint32_t b = 8 * static_cast<uint32_t>((c - 1) % kRingSize);
            cluster::mbarrier_arrive(empty + b);
            cluster::mbarrier_arrive_remote(peer_empty + b);
          }
        }
        copy_out(c - 1);
      }
      const uint32_t b = static_cast<uint32_t>(c % kRingSize);
      cluster::mbarrier_wait(full + 8 * b, static_cast<uint32_t>((c / kRingSize) & 1));
      jitter(a.jitter_ns, static_cast<uint32_t>(c) * 977u + tid);
      chain::step<true>(st, base + b * C::kBuffer, smem + b * C::kBuffer,
                        smem + C::kSO + (c & 1) * chain::kOTile, ctid);
    }
    named_sync(1, kWarpgroup);
    if (chunks > 0) copy_out(chunks - 1);
    if (a.final_state != nullptr) chain::store_state(st, a.final_state, state_offset, ctid);
  } else {  // ---- builder j = group - 1: sub-chunks rank + 2 j, + 6, ...
    registers_down<C::kBuilderRegisters>();
    const int builder = group - 1, btid = tid & 127, bar = 2 + builder;
    unsigned char* const scratch = smem + C::kSScratch + builder * C::kScratch;
    unsigned char* const work = scratch + build::kInBytes;
    unsigned char* const stage = work + build::kWorkBytes;  // kStaged only
    unsigned char* const peer_smem = cluster::peer_pointer(smem, peer);
    const uint32_t peer_full = cluster::peer_shared(full, peer);
    auto sub_chunk = [&](int64_t c) { return tokens.sub_chunk(c); };
    // The loads ahead, in place, as kernel.cuh's three builders (build16.cuh load_ahead).
    const int64_t first = rank + 2 * builder;
    if (first < chunks) build::issue_ahead(a.in, sub_chunk(first), h, btid, scratch, 0);
    int set = 0;  // the beta slot of sub-chunk c's loads
    for (int64_t c = first; c < chunks; c += C::kChainBuilders) {
      build::issue_v(a.in, sub_chunk(c), h, btid, scratch);
      const uint32_t b = static_cast<uint32_t>(c % kRingSize);
      const int64_t round = c / kRingSize;
      // Buffer b of both CTAs free again (both chains are done with sub-chunk c - kRing).
      const auto wait_buffer = [&] {
        if (round == 0) return;
        if constexpr (kStaged) {
          const uint32_t need = static_cast<uint32_t>(c - kRingSize + 1);
          const uint32_t counts = base + C::kSDone;  // chain 0's, chain 1's
          while (cluster::load_acquire(counts) < need || cluster::load_acquire(counts + 4) < need) {
            __nanosleep(32);
          }
        } else {
          cluster::mbarrier_wait(empty + 8 * b, static_cast<uint32_t>((round - 1) & 1));
        }
      };
      if constexpr (!kStaged) wait_buffer();
      const auto sync = [bar] { named_sync(bar, kWarpgroup); };
      const build::MirroredRecord target{smem + b * C::kBuffer, peer_smem + b * C::kBuffer, rank};
      const auto load_ahead = [&] {
        if (c + C::kChainBuilders < chunks) {
          build::issue_ahead(a.in, sub_chunk(c + C::kChainBuilders), h, btid, scratch, set ^ 1);
        } else {
          ptx::cp_async_commit();
        }
      };
      if constexpr (kStaged) {
        const build::StagedRecord<build::MirroredRecord> record{stage, target};
        const auto acquire = [&] {
          wait_buffer();
          build::copy_staged(stage, target, btid);
        };
        build::build_sub_chunk<1, false>(sub_chunk(c), a.in.fuse_q_l2norm, btid, scratch, work,
                                         record, sync, false, build::NoPrologue{}, load_ahead, set,
                                         acquire);
      } else {
        build::build_sub_chunk<1, false>(sub_chunk(c), a.in.fuse_q_l2norm, btid, scratch, work,
                                         target, sync, false, build::NoPrologue{}, load_ahead, set);
      }
      jitter(a.jitter_ns, static_cast<uint32_t>(c) * 131u + btid);
      // Each thread releases its own stores of both copies (no cross-scope cumulativity to rely
      // on), fenced for the async proxy (the chains' wgmma reads).
      cluster::fence_proxy_async_all();
      cluster::mbarrier_arrive(full + 8 * b);
      cluster::mbarrier_arrive_remote(peer_full + 8 * b);
      named_sync(bar, kWarpgroup);  // the scratch is free again (phase 5's reads of v are done)
      set ^= 1;
    }
  }
  cluster::sync();  // neither CTA leaves while the other may still write its ring or barriers
}

// The kernel's launch configuration for `grid` CTAs in clusters of two (`attribute` holds the
// cluster dimension the configuration points at); returns the error of allowing its shared memory.
template <bool kStaged>
inline cudaError_t halves_launch_config(unsigned grid, cudaStream_t stream,
                                        cudaLaunchAttribute (&attribute)[1],
                                        cudaLaunchConfig_t& config) {
  using C = HalvesConfig<kStaged>;
  const cudaError_t e = cudaFuncSetAttribute(
      onepass_halves_kernel<kStaged>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSBytes);
  config = cudaLaunchConfig_t{};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(C::kThreadsAll);
  config.dynamicSmemBytes = C::kSBytes;
  config.stream = stream;
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = 2;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  return e;
}

// Launches the value-halves cluster on `args` (bf16 chain operands, the contract's inputs; the
// caller checks row_offsets_fit): grid 2 x num_seqs x heads in clusters of two; returns the
// launch's error.
template <bool kStaged>
inline cudaError_t launch_halves_config(const OnepassArgs& args, cudaStream_t stream) {
  cudaLaunchAttribute attribute[1];
  cudaLaunchConfig_t config;
  cudaError_t e = halves_launch_config<kStaged>(
      2u * static_cast<unsigned>(args.in.num_seqs) * static_cast<unsigned>(args.in.heads), stream,
      attribute, config);
  if (e != cudaSuccess) return e;
  e = cudaLaunchKernelEx(&config, onepass_halves_kernel<kStaged>, args);
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

}  // namespace kda::detail::onepass
