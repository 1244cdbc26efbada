// The one-pass forward's kernel (onepass.h has the roles) in each configuration: the chain on
// kChainGroups warpgroups (2: chain16.cuh's step; 1: its step_one_group) beside kBuilders builder
// warpgroups. The library launches Config<1, 3> (onepass.cu); the lab times the others against it
// (lab/experiments/fused16.cu: one or two builders beside a two-warpgroup chain, each builder
// asking for its next sub-chunk's inputs before it builds this one).
//
// Sub-chunk c's record goes to ring buffer c % 4 (4 x 23 KB), so a builder may work ahead of the
// chain until the ring is full. A full / empty mbarrier pair per buffer hands it over; the builder
// fences its ordinary stores for the async proxy (the chain's wgmma reads the record's tiles)
// before it signals. Every configuration computes the same bits: the builds and the steps are the
// same code on the same sub-chunks, only who runs them and when differs.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "device/ptx.cuh"
#include "device/wgmma.cuh"
#include "onepass/build16.cuh"
#include "onepass/chain16.cuh"
#include "onepass/onepass.h"
#include "onepass/record16.h"

namespace kda::detail::onepass {

using ptx::fence_proxy_async_shared;
using ptx::smem_u32;
namespace wg = wgmma;
using chain::kBuffer;
using chain::kOTile;

inline constexpr int kRing = kRingBuffers;  // record buffers (onepass.h)

// A configuration: the chain on kChainGroups warpgroups (2: chain16.cuh's step; 1: its
// step_one_group), kBuilders builder warpgroups; each builder asks for its next sub-chunk's
// inputs before it builds this one: with at most two into a second input set, with three (one
// set each) in place, into the regions its build has left dead (build16.cuh load_ahead).
// Registers: every thread starts at 65,536 / threads; setmaxnreg moves them from the builders to
// the chain.
template <int kChainGroups, int kBuilders, bool kRaw = false,
          ChainOperands kOps = ChainOperands::bf16>
struct Config {
  static constexpr int kThreadsAll = 128 * (kChainGroups + kBuilders);
  static constexpr int kChainThreads = 128 * kChainGroups;
  static constexpr bool kPrefetch = kBuilders <= 2;
  static constexpr int kScratch =
      ((kPrefetch ? 2 : 1) * build::kInBytes + build::kWorkBytes + 127) & ~127;
  static constexpr int kSScratch = kRing * kBuffer;
  static constexpr int kSO = kSScratch + kBuilders * kScratch;
  static constexpr int kSFull = kSO + 2 * kOTile;      // kRing mbarriers: record c % kRing built
  static constexpr int kSEmpty = kSFull + 8 * kRing;   // and: the chain is done with it
  // Raw inputs: the gate's running sums from sub-chunk to sub-chunk and their mbarriers.
  static constexpr int kSCarry = kSEmpty + 8 * kRing;
  static constexpr int kSCarryBars = kSCarry + (kRaw ? build::kCarrySlots * kDim * 4 : 0);
  // The fp16 chain's state row maxima: 16 bytes a chain thread, stored before the A products'
  // wait only to keep them there (chain16.cuh step_one_group_f16); never read.
  static constexpr int kSAnchor = kSCarryBars + (kRaw ? 8 * build::kCarrySlots : 0);
  static constexpr int kSBytes =
      kSAnchor + (kOps == ChainOperands::f16_scaled ? kChainThreads * 16 : 0) +
      1024;  // + the base's alignment slack
  // Registers per thread after setmaxnreg (0: none); two chain warpgroups need ~136, one ~215,
  // a builder ~78 alone, more with the prefetch's loop state (at 104 it spills a value).
  // Beside the one-warpgroup chain every builder takes 96 and the chain 224 (the whole register
  // file; at 216 the chain spills; the operand pairs' chain at 232 has ptxas serialize its
  // wgmmas, C7512): the builders' phase 2 holds the next row's loads beside this row's work
  // (build16.cuh), which spilled 32 B of the contract builders at 88. The fp16 chain's builders
  // keep a row's loads to the row (their kF16Tiles build): at 96 they spill ~40 B of loop
  // state, the raw ones beside them ~170 B (a lab configuration).
  static constexpr int kChainRegisters =
      kBuilders == 1 ? 0 : kChainGroups == 2 ? 144 : 224;
  static constexpr int kBuilderRegisters =
      kBuilders == 1 ? 0 : kChainGroups == 2 ? 112 : 96;
  static_assert(kSBytes <= 227 * 1024, "one CTA per SM");
  static_assert(!kRaw || !kPrefetch,
                "raw inputs: one input set per builder (issue_raw_loads' beta)");
  static_assert(kChainThreads * kChainRegisters + 128 * kBuilders * kBuilderRegisters <= 65536,
                "the register file");
};

// The shared memory of a chain CTA beside the library's three builders (the few-chain kernels'
// chain CTAs: helpers.cuh, l2_helpers.cuh): a ring of kRing whole-record buffers (1024-byte
// aligned), each builder's scratch (input set, work region), the two O tiles, the ring's full
// mbarriers; what a kernel adds starts at kSEnd.
template <int kRing>
struct ChainCtaLayout {
  static constexpr int kBuilders = kLibraryBuilders;
  static constexpr int kBuffer = chain::kBuffer;  // a record (23,040 B), 1024-byte aligned
  static constexpr int kThreadsAll = 128 * (1 + kBuilders);
  static constexpr int kScratch = (build::kInBytes + build::kWorkBytes + 127) & ~127;
  static constexpr int kSScratch = kRing * kBuffer;
  static constexpr int kSO = kSScratch + kBuilders * kScratch;
  static constexpr int kSFull = kSO + 2 * kOTile;
  static constexpr int kSEnd = kSFull + 8 * kRing;
};

// The tokens of grid row `row`'s sequence (the row's rank in `order`, longest first, when the
// call is packed) and its 16-token sub-chunks.
struct ChainTokens {
  int seq;
  int64_t begin, end, chunks;
  __device__ __forceinline__ build::SubChunk sub_chunk(int64_t c) const {
    build::SubChunk sc;
    sc.first_token = begin + c * kSub;
    sc.rows = static_cast<int>(end - sc.first_token < kSub ? end - sc.first_token : kSub);
    sc.at_chunk = (c & 3) == 0;
    return sc;
  }
};
__device__ __forceinline__ ChainTokens chain_tokens(const OnepassArgs& a, int row) {
  ChainTokens t;
  t.seq = a.order != nullptr ? a.order[row] : row;
  t.begin = a.in.cu != nullptr ? a.in.cu[t.seq] : static_cast<int64_t>(t.seq) * a.in.seq_len;
  t.end = a.in.cu != nullptr ? a.in.cu[t.seq + 1] : t.begin + a.in.seq_len;
  t.chunks = (t.end - t.begin + kSub - 1) / kSub;
  return t;
}

__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
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

template <int kChainGroups, int kBuilders, bool kRaw, ChainOperands kOps = ChainOperands::bf16>
__global__ void
__launch_bounds__(Config<kChainGroups, kBuilders, kRaw, kOps>::kThreadsAll, 1)
    onepass_kernel(const OnepassArgs a) {
  static_assert(kOps == ChainOperands::bf16 || kChainGroups == 1,
                "operand pairs and fp16 scales: the one-warpgroup chain's step");
  constexpr bool kF16 = kOps == ChainOperands::f16_scaled;
  using C = Config<kChainGroups, kBuilders, kRaw, kOps>;
  constexpr int kSScratch = C::kSScratch, kSO = C::kSO, kScratch = C::kScratch;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // the swizzled tiles need 1024-byte alignment
  unsigned char* const smem = smem_raw + (base - raw);
  const int tid = threadIdx.x;
  const int heads = a.in.heads;
  const int rank = static_cast<int>(blockIdx.x / heads), h = static_cast<int>(blockIdx.x % heads);
  const ChainTokens tokens = chain_tokens(a, rank);
  const int s = tokens.seq;
  const int64_t begin = tokens.begin, end = tokens.end, chunks = tokens.chunks;
  const uint32_t full = base + C::kSFull, empty = base + C::kSEmpty;
  if (tid == 0) {
    for (int b = 0; b < kRing; ++b) {
      wg::mbarrier_init(full + 8 * b, 1);
      wg::mbarrier_init(empty + 8 * b, 1);
    }
    if constexpr (kRaw) {
      for (int b = 0; b < build::kCarrySlots; ++b) {
        wg::mbarrier_init(base + C::kSCarryBars + 8 * b, kWarpgroup);
      }
    }
  }
  __syncthreads();
  // The warpgroup's role, in a register ptxas sees as warp-uniform (a wgmma under a branch it
  // cannot prove uniform serializes every wgmma of the kernel).
  const int group = __shfl_sync(0xffffffffu, tid / 128, 0);

  if (group < kChainGroups) {  // ---- the chain
    if constexpr (C::kChainRegisters > 0) registers_up<C::kChainRegisters>();
    const int64_t state_offset = (static_cast<int64_t>(s) * heads + h) * kDim * kDim;
    // State and step of the two- or one-warpgroup chain; the 256 16-byte units of an O tile go
    // out by 256 / kChainThreads per thread.
    using State = std::conditional_t<kChainGroups == 2, float[16][4], float[2][16][4]>;
    State st;
    if constexpr (kChainGroups == 2) {
      chain::load_state(st, a.initial_state, state_offset, tid);
    } else {
      chain::load_state_one_group(st, a.initial_state, state_offset, tid);
    }
    [[maybe_unused]] chain::RowScales scales;
    if constexpr (kF16) chain::init_row_scales(st, scales);
    auto copy_out = [&](int64_t c) {
#pragma unroll
      for (int u = tid; u < 256; u += C::kChainThreads) {
        chain::copy_out(smem + kSO + (c & 1) * kOTile, a.out, a.out_stride, h,
                        begin + c * kSub, end, u);
      }
    };
    for (int64_t c = 0; c < chunks; ++c) {
      named_sync(1, C::kChainThreads);  // every chain warp is done with sub-chunk c - 1
      if (c > 0) {
        if (tid == 0) wg::mbarrier_arrive(empty + 8 * static_cast<uint32_t>((c - 1) % kRing));
        copy_out(c - 1);
      }
      const uint32_t b = static_cast<uint32_t>(c % kRing);
      wg::mbarrier_wait(full + 8 * b, static_cast<uint32_t>((c / kRing) & 1));
      jitter(a.jitter_ns, static_cast<uint32_t>(c) * 977u + tid);
      if constexpr (kChainGroups == 2) {
        chain::step(st, base + b * kBuffer, smem + b * kBuffer, smem + kSO + (c & 1) * kOTile,
                    tid);
      } else if constexpr (kF16) {
        chain::step_one_group_f16(st, scales, base + b * kBuffer, smem + b * kBuffer,
                                  smem + kSO + (c & 1) * kOTile,
                                  reinterpret_cast<float2*>(smem + C::kSAnchor), tid);
      } else {
        constexpr bool kStatePairs = kOps == ChainOperands::bf16_pairs;
        constexpr bool kVnewPairs = kStatePairs || kOps == ChainOperands::bf16_vnew_pairs;
        chain::step_one_group<kStatePairs, kVnewPairs>(
            st, base + b * kBuffer, smem + b * kBuffer, smem + kSO + (c & 1) * kOTile, tid);
      }
    }
    named_sync(1, C::kChainThreads);
    if (chunks > 0) copy_out(chunks - 1);
    if (a.final_state != nullptr) {
      if constexpr (kChainGroups == 2) {
        chain::store_state(st, a.final_state, state_offset, tid);
      } else if constexpr (kF16) {
        chain::store_state_scaled(st, scales, a.final_state, state_offset, tid);
      } else {
        chain::store_state_one_group(st, a.final_state, state_offset, tid);
      }
    }
  } else {  // ---- builder group - kChainGroups: sub-chunks builder, + kBuilders, ...
    if constexpr (C::kBuilderRegisters > 0) registers_down<C::kBuilderRegisters>();
    const int builder = group - kChainGroups, btid = tid & 127, bar = 2 + builder;
    unsigned char* const scratch = smem + kSScratch + builder * kScratch;
    unsigned char* const work = scratch + (C::kPrefetch ? 2 : 1) * build::kInBytes;
    auto sub_chunk = [&](int64_t c) { return tokens.sub_chunk(c); };
    // Raw inputs: this thread's gate channel (A_log[h], dt_bias[h, btid]) and the carry ring.
    [[maybe_unused]] kda::detail::GateChannel channel{};
    [[maybe_unused]] float gate_scale = 0.0f;
    [[maybe_unused]] const build::GateCarry carry{
        reinterpret_cast<float*>(smem + C::kSCarry), base + C::kSCarryBars};
    if constexpr (kRaw) {
      if (a.raw.raw_gate) {
        channel = kda::detail::gate_channel(a.raw.a_log[h], a.raw.dt_bias[h * kDim + btid]);
        gate_scale = kda::detail::gate_scale(a.raw.lower_bound);
      }
    }
    // Each builder asks for its next sub-chunk's inputs before it builds this one: with at most
    // two builders into a second input set (kPrefetch), with three in place (build_sub_chunk's
    // load_ahead: q, k, G or the raw gate tile, and beta once this build's grams are reduced; v
    // when the next build starts).
    [[maybe_unused]] float beta_ahead = 0.0f;  // raw inputs: beta of the loads ahead
    // In place: sub-chunk c's q, k, G (or the raw gate tile) and beta (to `slot`; raw beta to a
    // register, which the prologue stores) as one group.
    const auto issue_ahead = [&](int64_t c, int slot) {
      if constexpr (kRaw) {
        beta_ahead = build::issue_raw_ahead(a.in, a.raw, sub_chunk(c), h, btid, scratch);
      } else {
        build::issue_ahead(a.in, sub_chunk(c), h, btid, scratch, slot);
      }
    };
    if (builder < chunks) {
      if constexpr (C::kPrefetch) {
        build::issue_loads(a.in, sub_chunk(builder), h, btid, scratch);
      } else {
        issue_ahead(builder, 0);
      }
    }
    int set = 0;  // the input set (kPrefetch) or beta slot (in place) of sub-chunk c's loads
    for (int64_t c = builder; c < chunks; c += kBuilders) {
      if constexpr (C::kPrefetch) {
        // The next sub-chunk's loads into the other set (its last reader, this builder's previous
        // build, has passed the barrier that ended it); an empty group when there is none, so that
        // this one's is always the second newest.
        if (c + kBuilders < chunks) {
          build::issue_loads(a.in, sub_chunk(c + kBuilders), h, btid,
                             scratch + (set ^ 1) * build::kInBytes);
        } else {
          kda::detail::ptx::cp_async_commit();
        }
      } else {
        build::issue_v(a.in, sub_chunk(c), h, btid, scratch);
      }
      const uint32_t b = static_cast<uint32_t>(c % kRing);
      const int64_t round = c / kRing;
      if (round > 0) wg::mbarrier_wait(empty + 8 * b, static_cast<uint32_t>((round - 1) & 1));
      const auto sync = [bar] { named_sync(bar, kWarpgroup); };
      const build::OneRecord record{smem + b * kBuffer};
      // The next sub-chunk's loads (an empty group when there is none: the count stays uniform).
      const auto load_ahead = [&] {
        if (c + kBuilders < chunks) {
          issue_ahead(c + kBuilders, set ^ 1);
        } else {
          kda::detail::ptx::cp_async_commit();
        }
      };
      if constexpr (kRaw) {
        build::build_raw_sub_chunk<kF16>(a.in, a.raw, channel, gate_scale, c, sub_chunk(c),
                                         beta_ahead, carry, btid, scratch, work, record, sync,
                                         load_ahead);
      } else if constexpr (C::kPrefetch) {
        build::build_sub_chunk<1, kF16>(sub_chunk(c), a.in.fuse_q_l2norm, btid,
                                        scratch + set * build::kInBytes, work, record, sync);
      } else {
        build::build_sub_chunk<1, kF16>(sub_chunk(c), a.in.fuse_q_l2norm, btid, scratch, work,
                                        record, sync, false, build::NoPrologue{}, load_ahead, set);
      }
      jitter(a.jitter_ns, static_cast<uint32_t>(c) * 131u + btid);
      fence_proxy_async_shared();  // the record's ordinary stores, for the chain's wgmma reads
      named_sync(bar, kWarpgroup);   // the whole record is written; the scratch is free again
      if (btid == 0) wg::mbarrier_arrive(full + 8 * b);
      set ^= 1;
    }
  }
}

// Launches configuration (kChainGroups, kBuilders), the raw-input kernel when kRaw, the chain's
// chain's operands as kOps says (record16.h ChainOperands), on `args` (row_offsets_fit checked by
// the caller);
// returns the launch's error.
template <int kChainGroups, int kBuilders, bool kRaw = false,
          ChainOperands kOps = ChainOperands::bf16>
cudaError_t launch_config(const OnepassArgs& args, cudaStream_t stream) {
  using C = Config<kChainGroups, kBuilders, kRaw, kOps>;
  const cudaError_t e =
      cudaFuncSetAttribute(onepass_kernel<kChainGroups, kBuilders, kRaw, kOps>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSBytes);
  if (e != cudaSuccess) return e;
  onepass_kernel<kChainGroups, kBuilders, kRaw, kOps>
      <<<static_cast<unsigned>(args.in.num_seqs) * static_cast<unsigned>(args.in.heads),
         C::kThreadsAll, C::kSBytes, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace kda::detail::onepass
