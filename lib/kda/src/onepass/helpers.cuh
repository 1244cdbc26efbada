// The one-pass forward for few chains (onepass.h launch_helpers): thread-block clusters of three
// chain CTAs and one helper CTA. A chain CTA is the library's (kernel.cuh Config<1, 3>: the chain
// on one warpgroup, three builders), so a fixed shape of 96 chains leaves 36 SMs without work and
// each chain builder-bound at ~1.6-1.8 us a sub-chunk (docs/design.md "Few chains"). The helper
// CTA has no chain: its three builders lend every chain of the cluster one build a round
// (onepass.h helper_builds: a chain's sub-chunks go in rounds of four, its own three builders
// build the first three of each, a helper builder the last), so each chain has four builders'
// worth of records: ~(build time) / 4 a sub-chunk. 96 chains are 32 clusters on 128 SMs.
//
// Hand-over. Sub-chunk c of a chain goes to its CTA's ring buffer c % kRing (five whole
// records). The chain CTA's builders write it in place and arrive on the buffer's full mbarrier
// (kernel.cuh's way). A helper builder builds into its own CTA: staged (build16.cuh StagedRecord:
// QP, KG, AQK and A in its stage, the record buffer needed only from phase 5 on), then one
// thread copies the whole record (23,040 B) into the chain CTA's buffer by bulk copy announced on
// that buffer's full mbarrier (cluster.cuh copy_to_peer). A bulk copy from shared::cta to
// shared::cluster completes only on the destination's mbarrier, so the helper learns that its
// record buffer has been read from the chain's progress: each chain stores how many sub-chunks
// it has finished (a relaxed count) into its own CTA and into the helper, and a helper builder
// takes its record buffer again (build_sub_chunk's acquire, before phase 5) once the chain it
// last served has finished that sub-chunk. Buffers are freed by the same counts (a builder waits
// until the chain has finished the buffer's previous record). tests/kda/test_onepass_handover.cpp
// simulates the schedule (no deadlock, no buffer written before it is free); at random build
// times it runs each chain at ~1.31 us a sub-chunk for 5.1-us builds (the ideal 1.275), and 1.63
// with the helper's builds unstaged, which is why they are staged.
// The bits are the one pass's (kernel.cuh Config<1, 3>, bf16 chain): the same builds, the same
// steps; only who builds which sub-chunk differs.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

#include "device/cluster.cuh"
#include "device/ptx.cuh"
#include "device/wgmma.cuh"
#include "onepass/build16.cuh"
#include "onepass/chain16.cuh"
#include "onepass/kernel.cuh"  // named_sync, jitter, registers_up / registers_down, ChainTokens
#include "onepass/onepass.h"
#include "onepass/record16.h"

namespace kda::detail::onepass {

// A chain CTA (ChainCtaLayout's, its builders a chain CTA's and the helper's: 3) and after the
// layout the count of sub-chunks its chain has finished.
struct HelpersConfig : ChainCtaLayout<kHelperRingBuffers> {
  static_assert(kBuilders == kHelperBuilders && kHelperRound == kBuilders + 1,
                "a round: the chain CTA's three builds and one of the helper's");
  static constexpr int kRing = kHelperRingBuffers;
  static constexpr int kSDone = kSEnd;
  static constexpr int kChainBytes = kSDone + 4;
  // The helper CTA: per builder its scratch (input set, work region), its stage and its record
  // (16-byte aligned: the bulk copy's source), then the chains' counts (one per chain CTA).
  static constexpr int kHStage = build::kInBytes + build::kWorkBytes;
  static constexpr int kHRecord = kHStage + build::kStageBytes;
  static constexpr int kHSlot = (kHRecord + static_cast<int>(kRecordBytes) + 127) & ~127;
  static constexpr int kSHelperDone = kBuilders * kHSlot;
  static constexpr int kHelperBytes = kSHelperDone + 4 * kHelperChains;
  static constexpr int kSBytes =
      (kChainBytes > kHelperBytes ? kChainBytes : kHelperBytes) + 1024;  // + alignment slack
  // The chain CTA's registers as the raw-input kernel's (kernel.cuh): its builders' counts and
  // ring index spill 100 B at the library's 88 (the hoisted addresses of the build), 40 B at 96;
  // the chain runs at 224 without serialized wgmmas. The helper's builders keep the kernel's 128
  // (its chain warpgroup idles), no spills.
  static constexpr int kChainRegisters = 224;
  static constexpr int kBuilderRegisters = 96;
  static_assert(kSBytes <= 227 * 1024, "one CTA per SM");
  static_assert(kHStage % 16 == 0 && kHRecord % 16 == 0 && kHSlot % 16 == 0,
                "the stage's uint4s and the bulk copy's source");
  static_assert(kRecordBytes % 16 == 0 && kBuffer % 1024 == 0, "the bulk copy's alignment");
  static_assert(128 * kChainRegisters + 128 * kBuilders * kBuilderRegisters <= 65536,
                "the register file");
};

// Chain `i` (0 .. kHelperChains - 1) of cluster `cluster`: its tokens and head; none (no
// sub-chunks, no state) where the grid's last cluster has fewer chains.
struct ClusterChain {
  ChainTokens tokens;
  int h;
  bool exists;
};
__device__ __forceinline__ ClusterChain cluster_chain(const OnepassArgs& a, int cluster, int i) {
  ClusterChain ch{};
  const int q = cluster * kHelperChains + i;
  ch.exists = q < a.in.num_seqs * a.in.heads;
  if (ch.exists) {
    ch.tokens = chain_tokens(a, q / a.in.heads);
    ch.h = q % a.in.heads;
  } else {
    ch.tokens.chunks = 0;
  }
  return ch;
}

__global__ void __launch_bounds__(HelpersConfig::kThreadsAll, 1)
    onepass_helpers_kernel(const OnepassArgs a) {
  using C = HelpersConfig;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw = ptx::smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // the swizzled tiles need 1024-byte alignment
  unsigned char* const smem = smem_raw + (base - raw);  // the same offset in every CTA
  const int tid = threadIdx.x;
  const int rank = cluster::cta_rank();
  const int cluster_index = static_cast<int>(blockIdx.x / kHelperClusterCtas);
  const bool helper = rank == kHelperRank;
  const uint32_t full = base + C::kSFull;
  if (tid == 0) {
    if (helper) {
      for (int i = 0; i < kHelperChains; ++i) {
        *reinterpret_cast<uint32_t*>(smem + C::kSHelperDone + 4 * i) = 0;
      }
    } else {
      for (int b = 0; b < C::kRing; ++b) {
        wgmma::mbarrier_init(full + 8 * b, 1);  // its builder's, or the helper's copy
      }
      *reinterpret_cast<uint32_t*>(smem + C::kSDone) = 0;
    }
    wgmma::fence_mbarrier_init();
  }
  cluster::sync();  // every mbarrier and count exists before any CTA touches another's
  const int group = __shfl_sync(0xffffffffu, tid / 128, 0);  // warp-uniform, for the wgmmas

  if (!helper) {
    const ClusterChain mine = cluster_chain(a, cluster_index, rank);
    const ChainTokens& tokens = mine.tokens;
    const int h = mine.h;
    const int64_t chunks = tokens.chunks;
    const uint32_t done = base + C::kSDone;
    if (group == 0) {  // ---- the chain (kernel.cuh's one-warpgroup chain)
      registers_up<C::kChainRegisters>();
      const int64_t state_offset =
          (static_cast<int64_t>(tokens.seq) * a.in.heads + h) * kDim * kDim;
      float st[2][16][4];
      // An empty sequence's chain still passes its initial state (or zeros) to its final state.
      if (mine.exists) chain::load_state_one_group(st, a.initial_state, state_offset, tid);
      auto copy_out = [&](int64_t c) {
#pragma unroll
        for (int u = tid; u < 256; u += kWarpgroup) {
          chain::copy_out(smem + C::kSO + (c & 1) * chain::kOTile, a.out, a.out_stride, h,
                          tokens.begin + c * kSub, tokens.end, u);
        }
      };
      // c sub-chunks finished: into this CTA's count and the helper's copy of it.
      const uint32_t helper_done = cluster::peer_shared(base + C::kSHelperDone + 4 * rank,
                                                        kHelperRank);
      const auto finished = [&](int64_t c) {
        if (tid == 0) {
          cluster::store_count(done, static_cast<uint32_t>(c));
          cluster::store_count_remote(helper_done, static_cast<uint32_t>(c));
        }
      };
      uint32_t b = 0, parity = 0;  // ring buffer c % kRing and its phase's parity
      for (int64_t c = 0; c < chunks; ++c) {
        named_sync(1, kWarpgroup);  // every chain warp is done with sub-chunk c - 1
        if (c > 0) {
          finished(c);
          copy_out(c - 1);
        }
        wgmma::mbarrier_wait(full + 8 * b, parity);
        jitter(a.jitter_ns, static_cast<uint32_t>(c) * 977u + tid);
        chain::step_one_group<false>(st, base + b * C::kBuffer, smem + b * C::kBuffer,
                                     smem + C::kSO + (c & 1) * chain::kOTile, tid);
        if (++b == C::kRing) b = 0, parity ^= 1;
      }
      named_sync(1, kWarpgroup);
      if (chunks > 0) {
        finished(chunks);  // the helper may wait for its last build for this chain
        copy_out(chunks - 1);
      }
      if (mine.exists && a.final_state != nullptr) {
        chain::store_state_one_group(st, a.final_state, state_offset, tid);
      }
    } else {  // ---- builder j = group - 1: sub-chunks j, j + kHelperRound, ...
      registers_down<C::kBuilderRegisters>();
      const int builder = group - 1, btid = tid & 127, bar = 2 + builder;
      unsigned char* const scratch = smem + C::kSScratch + builder * C::kScratch;
      unsigned char* const work = scratch + build::kInBytes;
      auto sub_chunk = [&](int64_t c) { return tokens.sub_chunk(c); };
      if (builder < chunks) build::issue_ahead(a.in, sub_chunk(builder), h, btid, scratch, 0);
      int set = 0;  // the beta slot of sub-chunk c's loads
      // Ring buffer c % kRing, kept as a count (no 64-bit remainder by five in the loop).
      uint32_t b = static_cast<uint32_t>(builder);
      for (int64_t c = builder; c < chunks; c += kHelperRound) {
        build::issue_v(a.in, sub_chunk(c), h, btid, scratch);
        if (c >= C::kRing) {  // the chain has finished the buffer's previous record
          const uint32_t need = static_cast<uint32_t>(c - C::kRing + 1);
          while (cluster::load_count(done) < need) __nanosleep(32);
        }
        const auto sync = [bar] { named_sync(bar, kWarpgroup); };
        const build::OneRecord record{smem + b * C::kBuffer};
        const auto load_ahead = [&] {
          if (c + kHelperRound < chunks) {
            build::issue_ahead(a.in, sub_chunk(c + kHelperRound), h, btid, scratch, set ^ 1);
          } else {
            ptx::cp_async_commit();
          }
        };
        build::build_sub_chunk<1, false>(sub_chunk(c), a.in.fuse_q_l2norm, btid, scratch, work,
                                         record, sync, false, build::NoPrologue{}, load_ahead,
                                         set);
        jitter(a.jitter_ns, static_cast<uint32_t>(c) * 131u + btid);
        ptx::fence_proxy_async_shared();  // the record's stores, for the chain's wgmma reads
        named_sync(bar, kWarpgroup);      // the record is written; the scratch is free again
        if (btid == 0) wgmma::mbarrier_arrive(full + 8 * b);
        set ^= 1;
        b = b + kHelperRound < C::kRing ? b + kHelperRound : b + kHelperRound - C::kRing;
      }
    }
  } else if (group > 0) {  // ---- helper builder j = group - 1: round r for chain (j + r) % 3
    const int builder = group - 1, btid = tid & 127, bar = 2 + builder;
    unsigned char* const scratch = smem + builder * C::kHSlot;
    unsigned char* const work = scratch + build::kInBytes;
    unsigned char* const stage = scratch + C::kHStage;
    unsigned char* const own = scratch + C::kHRecord;  // the record, before its copy
    // The first round >= r with a build (-1: none). Each chain comes once in three rounds and its
    // sub-chunk only grows, so three rounds without a build mean none is left. (The chains'
    // lengths are read again each time, a few cached loads a build, rather than held.)
    const auto next_round = [&](int64_t r) -> int64_t {
#pragma unroll 1
      for (int t = 0; t < kHelperChains; ++t) {
        const int i = helper_chain(builder, r + t);
        if (helper_sub_chunk(r + t) < cluster_chain(a, cluster_index, i).tokens.chunks) {
          return r + t;
        }
      }
      return -1;
    };
    // Round r's chain, head and sub-chunk.
    const auto job = [&](int64_t r, int& h) {
      const ClusterChain ch = cluster_chain(a, cluster_index, helper_chain(builder, r));
      h = ch.h;
      return ch.tokens.sub_chunk(helper_sub_chunk(r));
    };
    int64_t r = next_round(0);
    if (r >= 0) {
      int h;
      const build::SubChunk sc = job(r, h);
      build::issue_ahead(a.in, sc, h, btid, scratch, 0);
    }
    int set = 0;
    int last_chain = -1;  // the chain of this builder's last copy, and its sub-chunk
    int64_t last_c = 0;
    const uint32_t counts = base + C::kSHelperDone;
    while (r >= 0) {
      const int i = helper_chain(builder, r);
      const int64_t c = helper_sub_chunk(r);
      int h;
      const build::SubChunk sc = job(r, h);
      build::issue_v(a.in, sc, h, btid, scratch);
      const int64_t next = next_round(r + 1);
      const auto sync = [bar] { named_sync(bar, kWarpgroup); };
      const auto load_ahead = [&] {
        if (next >= 0) {
          int next_h;
          const build::SubChunk next_sc = job(next, next_h);
          build::issue_ahead(a.in, next_sc, next_h, btid, scratch, set ^ 1);
        } else {
          ptx::cp_async_commit();
        }
      };
      const build::StagedRecord record{stage, build::OneRecord{own}};
      // The record buffer again: its last copy has landed once that chain has finished it.
      const auto acquire = [&] {
        if (last_chain >= 0) {
          const uint32_t need = static_cast<uint32_t>(last_c + 1);
          while (cluster::load_count(counts + 4 * last_chain) < need) __nanosleep(32);
        }
        build::copy_staged(stage, record.target, btid);
      };
      build::build_sub_chunk<1, false>(sc, a.in.fuse_q_l2norm, btid, scratch, work, record, sync,
                                       false, build::NoPrologue{}, load_ahead, set, acquire);
      jitter(a.jitter_ns, static_cast<uint32_t>(c) * 131u + btid);
      ptx::fence_proxy_async_shared();  // the record's stores, for the bulk copy
      named_sync(bar, kWarpgroup);      // the record is written; the scratch is free again
      if (btid == 0) {
        const uint32_t b = static_cast<uint32_t>(c % C::kRing);
        if (c >= C::kRing) {  // chain i has finished buffer b's previous record
          const uint32_t need = static_cast<uint32_t>(c - C::kRing + 1);
          while (cluster::load_count(counts + 4 * i) < need) __nanosleep(32);
        }
        cluster::copy_to_peer(cluster::peer_shared(base + b * C::kBuffer, i), ptx::smem_u32(own),
                              static_cast<uint32_t>(kRecordBytes),
                              cluster::peer_shared(full + 8 * b, i));
      }
      last_chain = i;
      last_c = c;
      set ^= 1;
      r = next;
    }
  }
  cluster::sync();  // no CTA leaves while another may still write its ring, counts or barriers
}

// The kernel's launch configuration for `grid` CTAs in clusters of kHelperClusterCtas
// (cluster.cuh launch_config).
inline cudaError_t helpers_launch_config(unsigned grid, cudaStream_t stream,
                                         cudaLaunchAttribute (&attribute)[1],
                                         cudaLaunchConfig_t& config) {
  return cluster::launch_config(onepass_helpers_kernel, grid, HelpersConfig::kThreadsAll,
                                HelpersConfig::kSBytes, kHelperClusterCtas, stream, attribute,
                                config);
}

}  // namespace kda::detail::onepass
