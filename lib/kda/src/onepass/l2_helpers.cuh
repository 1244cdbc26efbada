// The one-pass forward for few chains with helper CTAs over L2 (onepass.h launch_l2_helpers;
// docs/design.md "Few chains: helpers over L2"). A fixed shape of 96 chains runs the library's
// CTA per chain (the chain on one warpgroup, three builders) on 96 of 132 SMs, builder-bound at
// ~1.6 us a sub-chunk against the chain's own ~1.3; the helper cluster (helpers.cuh) lent those
// chains a fourth builder but fits only 30 clusters of four on the GPCs, so 96 chains ran in two
// waves. Here the grid is the chain CTAs (blocks 0 .. chains - 1, the library's CTA) and, after
// them, helper CTAs of four builders each (as many as there are SMs left), with no cluster and no
// co-scheduling: any builder, a chain CTA's own or a helper's, claims a chain's next sub-chunk
// with one atomic add on the chain's global counter, so the sub-chunks are claimed in order and
// whoever is free builds the next one. A helper CTA that never becomes resident (a busy device)
// claims nothing: the chains' own builders claim every sub-chunk and the kernel still ends.
//
// Where a record goes. An own builder builds sub-chunk c in place into ring buffer c % kRing of
// its CTA (after the chain has finished c - kRing, a count in shared memory), marks the buffer
// with c + 1 and arrives on its full mbarrier. A helper builder builds it with ordinary stores
// straight into one of its own kL2HelperRecords global record slots (a free one: empty, or its
// record's chain is past that record; the lines stay in L2) and publishes it in the chain's
// mailbox entry c % kL2HelperMailbox (after the chain has finished c - kL2HelperMailbox) with
// one release store of (c + 1, the slot). The chain's warp 0 finds record c by the buffer's mark
// or the mailbox; for a helper's record it bulk-copies the slot into ring buffer c % kRing,
// completing on the same full mbarrier, so the chain's steps read shared memory only. The copy
// of c + 1 is issued while step c runs when its entry was seen a step earlier (a relaxed load
// issued then, read now): the record lands during step c instead of before c + 1.
//
// Deadlock freedom (tests/kda/test_onepass_handover.cpp simulates it): each builder builds its
// claims in the order it made them, and a builder waits only for a chain to finish a sub-chunk
// claimed before the one it is building (a smaller one of the same chain, or the record in its
// own slot, which it claimed earlier). Following the waits from builder to
// builder, the times of the claims being built strictly decrease, so the builder of the earliest
// claim in progress never waits, and every claim is built.
//
// Claims run two builds ahead: the claim for the build after next is made (by warp 1, idle while
// warp 0 inverts in phase 4) while this build runs, so the atomic's round trip never stalls a
// build, and the next sub-chunk's inputs are loaded during this build as in kernel.cuh.
// Raw inputs (kRaw): the builds' raw prologue, the gate's running sums handed from build to build
// through global memory (L2GateCarry: tagged 64-bit words, no flag), and V_new as a bf16 pair in
// the chain (the library raw path's chain).
// The bits are the one pass's (kernel.cuh Config<1, 3>: the bf16 chain, or for raw inputs the
// V_new-pair chain): the same builds, the same steps; only who builds which sub-chunk differs.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

#include "device/cluster.cuh"  // load_count / store_count (this CTA's shared memory)
#include "device/gpu_flags.cuh"
#include "device/ptx.cuh"
#include "device/wgmma.cuh"
#include "onepass/build16.cuh"
#include "onepass/chain16.cuh"
#include "onepass/kernel.cuh"  // named_sync, jitter, registers_up / registers_down, ChainTokens
#include "onepass/onepass.h"
#include "onepass/record16.h"

namespace kda::detail::onepass {

// A chain CTA (ChainCtaLayout's) and after the layout the count of sub-chunks its chain has
// finished, each buffer's mark (c + 1 of the own record it holds or will hold) and each builder's
// two queued claims.
struct L2HelpersConfig : ChainCtaLayout<kL2HelperRing> {
  static constexpr int kRing = kL2HelperRing;
  static constexpr int kSDone = kSEnd;
  static constexpr int kSMarks = kSDone + 4;
  static constexpr int kSClaims = kSMarks + 4 * kRing;
  static constexpr int kChainBytes = kSClaims + 8 * kBuilders;
  // A helper CTA: four builders (every warpgroup), each with its scratch (input set, work
  // region), its two queued claims (chain, sub-chunk) and what its record slots hold (chain,
  // sub-chunk; the slot of the build in progress); its records go straight to global memory.
  static constexpr int kHelperBuilders = kL2HelperBuilders;
  static_assert(kHelperBuilders * 128 == kThreadsAll, "a helper CTA: every warpgroup builds");
  static constexpr int kHClaims = build::kInBytes + build::kWorkBytes;
  static constexpr int kHSlots = kHClaims + 16;
  static constexpr int kHSlot = (kHSlots + 8 * kL2HelperRecords + 4 + 127) & ~127;
  static constexpr int kHelperBytes = kHelperBuilders * kHSlot;
  static constexpr int kSBytes =
      (kChainBytes > kHelperBytes ? kChainBytes : kHelperBytes) + 1024;  // + alignment slack
  // The chain CTA's registers as the library's one-warpgroup configuration (kernel.cuh); the
  // helper's four builders keep the launch's 128.
  static constexpr int kChainRegisters = 224;
  static constexpr int kBuilderRegisters = 96;
  static_assert(kSBytes <= 227 * 1024, "one CTA per SM");
  static_assert(kRecordBytes % 16 == 0 && kBuffer % 1024 == 0, "the bulk copy's alignment");
  static_assert(128 * kChainRegisters + 128 * kBuilders * kBuilderRegisters <= 65536,
                "the register file");
};

// A claim's "none": past every chain's sub-chunks.
inline constexpr uint32_t kNoClaim = 0xffffffffu;

// Chain q (grid row q / heads, head q % heads) of the call.
__device__ __forceinline__ ChainTokens l2_chain_tokens(const OnepassArgs& a, int q) {
  return chain_tokens(a, q / a.in.heads);
}
// The raw gate's running sums between builders in any CTA (build16.cuh raw_prologue's carry):
// chain q's rows in global memory, each channel one 64-bit word (the sub-chunk low, the running
// sum's bits high), stored relaxed by its channel's thread and read by polling until the tag is
// the row's sub-chunk. A value and its tag are one single-copy-atomic access, so neither a flag
// nor a fence orders them, and each thread waits only for its own channel. Row c lives in slot
// c % kRows until c + kRows is written; its readers c + 1 and c + 2 have finished once the chain
// is past c + 2 (their records were built after their prologues), so the writer of c + kRows
// first waits for that count (a sub-chunk claimed before its own: no deadlock).
struct L2GateCarry {
  static constexpr int kRows = kL2HelperCarryRows;
  unsigned long long* rows;  // the chain's [kRows][128]
  const uint32_t* done;      // the chain's count of finished sub-chunks
  __device__ __forceinline__ void wait(int64_t) const {}  // read() waits, each channel alone
  __device__ __forceinline__ void wait_two_back(int64_t) const {}
  __device__ __forceinline__ float read(int64_t c, int tid) const {
    const unsigned long long* word = rows + (c % kRows) * kDim + tid;
    for (;;) {
      const unsigned long long w = gpu_flags::load_relaxed(word);
      if (static_cast<uint32_t>(w) == static_cast<uint32_t>(c)) {
        return __uint_as_float(static_cast<uint32_t>(w >> 32));
      }
      __nanosleep(32);
    }
  }
  __device__ __forceinline__ float read_two_back(int64_t c, int tid) const { return read(c, tid); }
  template <class Sync>
  __device__ __forceinline__ void publish(int64_t c, float x, int tid, const Sync&) const {
    if (c >= kRows) {
      const uint32_t need = static_cast<uint32_t>(c - kRows + 3);
      while (gpu_flags::load_relaxed(done) < need) __nanosleep(64);
      gpu_flags::fence_acquire();  // the row's readers' loads before this store
    }
    gpu_flags::store_relaxed(rows + (c % kRows) * kDim + tid,
                             (static_cast<unsigned long long>(__float_as_uint(x)) << 32) |
                                 static_cast<uint32_t>(c));
  }
};
__device__ __forceinline__ L2GateCarry l2_gate_carry(const L2HelperRing& ring, int q) {
  return {ring.carry + static_cast<int64_t>(q) * L2GateCarry::kRows * kDim, ring.done + q};
}

// Helper record slot `slot` (global index over all helper builders) and chain q's mailbox entry
// for sub-chunk c.
__device__ __forceinline__ unsigned char* l2_record(const L2HelperRing& ring, uint32_t slot) {
  return ring.records + static_cast<int64_t>(slot) * kRecordBytes;
}
__device__ __forceinline__ unsigned long long* l2_entry(const L2HelperRing& ring, int q,
                                                        uint32_t c) {
  return ring.mailbox + static_cast<int64_t>(q) * kL2HelperMailbox + c % kL2HelperMailbox;
}
// An entry's sub-chunk (c + 1; 0: none yet) and slot.
__device__ __forceinline__ uint32_t entry_sub_chunk(unsigned long long e) {
  return static_cast<uint32_t>(e);
}
__device__ __forceinline__ uint32_t entry_slot(unsigned long long e) {
  return static_cast<uint32_t>(e >> 32);
}

template <bool kRaw>
__global__ void __launch_bounds__(L2HelpersConfig::kThreadsAll, 1)
    onepass_l2_helpers_kernel(const OnepassArgs a, const L2HelperRing ring) {
  using C = L2HelpersConfig;
  namespace flags = gpu_flags;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw = ptx::smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // the swizzled tiles need 1024-byte alignment
  unsigned char* const smem = smem_raw + (base - raw);
  const int tid = threadIdx.x;
  const int q = static_cast<int>(blockIdx.x);  // a chain CTA's chain
  const bool helper = q >= ring.chains;
  const uint32_t full = base + C::kSFull;
  if (!helper && tid == 0) {
    // This chain's CTA runs: helpers may build for it (never for a chain whose CTA has not
    // started: their records would pin the helper's slots while that CTA waits for an SM).
    flags::store_relaxed(ring.live + q, 1u);
    flags::add_relaxed(ring.live_count, 1u);
    for (int b = 0; b < C::kRing; ++b) {
      wgmma::mbarrier_init(full + 8 * b, 1);  // its builder's arrival, or the chain's copy's
      *reinterpret_cast<uint32_t*>(smem + C::kSMarks + 4 * b) = 0;
    }
    *reinterpret_cast<uint32_t*>(smem + C::kSDone) = 0;
    wgmma::fence_mbarrier_init();
  }
  __syncthreads();
  // The warpgroup's role and the warp, in registers ptxas sees as warp-uniform (a wgmma under a
  // branch it cannot prove uniform serializes every wgmma of the kernel).
  const int group = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int warp = __shfl_sync(0xffffffffu, tid / 32, 0);

  if (!helper) {
    const int h = q % a.in.heads;
    const ChainTokens tokens = l2_chain_tokens(a, q);
    const uint32_t chunks = static_cast<uint32_t>(tokens.chunks);
    const uint32_t done = base + C::kSDone;
    const auto mark = [&](uint32_t b) { return base + C::kSMarks + 4 * b; };
    if (group == 0) {  // ---- the chain (kernel.cuh's one-warpgroup chain)
      registers_up<C::kChainRegisters>();
      const int64_t state_offset =
          (static_cast<int64_t>(tokens.seq) * a.in.heads + h) * kDim * kDim;
      float st[2][16][4];
      chain::load_state_one_group(st, a.initial_state, state_offset, tid);
      auto copy_out = [&](uint32_t c) {
#pragma unroll
        for (int u = tid; u < 256; u += kWarpgroup) {
          chain::copy_out(smem + C::kSO + (c & 1) * chain::kOTile, a.out, a.out_stride, h,
                          tokens.begin + static_cast<int64_t>(c) * kSub, tokens.end, u);
        }
      };
      const bool lane0 = (tid & 31) == 0;
      // c sub-chunks finished (every read of their records waited for, the named barrier before
      // this): into the shared count (the own builders' ring waits) and the global one (the
      // helpers' slot and mailbox waits, the raw carry's row waits), each with release so that
      // the reads it frees are ordered before a builder's writes (kernel.cuh's empty-barrier
      // arrive does that for the library).
      // Without a helper CTA (and on contract inputs: no global carry) only the own builders
      // read the count, so the global store is left out: its release is a MEMBAR.GPU on the
      // chain's path every step, which waits for the thread's output stores to reach L2.
      const bool count_globally = kRaw || ring.helper_ctas > 0;
      const auto finished = [&](uint32_t c) {
        flags::store_release_cta_shared(done, c);
        if (count_globally) flags::store_release(ring.done + q, c);
      };
      // Warp 0: a helper's record c from its global slot into ring buffer c % kRing (the entry
      // acquired by the caller), announced on the buffer's full mbarrier.
      const auto copy_in = [&](uint32_t c, uint32_t slot) {
        flags::fence_proxy_async_global();
        const uint32_t b = c % C::kRing;
        wgmma::bulk_copy_to_smem(lane0, base + b * C::kBuffer, l2_record(ring, slot),
                                 static_cast<uint32_t>(kRecordBytes), full + 8 * b);
      };
      uint32_t ahead = kNoClaim;  // the sub-chunk whose copy went out a step early
      unsigned long long peek = 0;  // sub-chunk c + 1's mailbox entry, loaded during step c - 1
      uint32_t b = 0, parity = 0;  // ring buffer c % kRing and its phase's parity
      for (uint32_t c = 0; c < chunks; ++c) {
        named_sync(1, kWarpgroup);  // every chain warp is done with sub-chunk c - 1
        if (c > 0) {
          if (tid == 0) finished(c);
          copy_out(c - 1);
        }
        if (warp == 0) {
          // Record c: an own builder's (the buffer's mark) or a helper's (the slot's flag).
          if (ahead != c) {
            for (;;) {
              const uint32_t m = __shfl_sync(0xffffffffu, cluster::load_count(mark(b)), 0);
              if (m == c + 1) break;
              // (Relaxed, the acquire by a fence once it is seen: an acquire load would drop the
              // L1's lines at every poll, under the builders' loads.)
              const unsigned long long e =
                  __shfl_sync(0xffffffffu, flags::load_relaxed(l2_entry(ring, q, c)), 0);
              if (entry_sub_chunk(e) == c + 1) {
                flags::fence_acquire();
                copy_in(c, entry_slot(e));
                break;
              }
              __nanosleep(64);
            }
          }
          // Record c + 1, when its entry was seen during step c - 1: its copy lands during step c
          // (buffer (c + 1) % kRing held c + 1 - kRing, which the chain has finished).
          const unsigned long long seen = __shfl_sync(0xffffffffu, peek, 0);
          if (c + 1 < chunks && entry_sub_chunk(seen) == c + 2) {
            flags::fence_acquire();
            copy_in(c + 1, entry_slot(seen));
            ahead = c + 1;
          }
          peek = c + 2 < chunks ? flags::load_relaxed(l2_entry(ring, q, c + 2)) : 0ull;
        }
        wgmma::mbarrier_wait(full + 8 * b, parity);
        jitter(a.jitter_ns, c * 977u + tid);
        chain::step_one_group<false, kRaw>(st, base + b * C::kBuffer, smem + b * C::kBuffer,
                                           smem + C::kSO + (c & 1) * chain::kOTile, tid);
        if (++b == C::kRing) b = 0, parity ^= 1;
      }
      named_sync(1, kWarpgroup);
      // The last count too: a helper's slot holding this chain's last record is free only then
      // (without it a helper whose slots hold two chains' last records waits forever, and the
      // chain whose sub-chunk it has claimed with it: L2HelpersNeedTheLastCount).
      if (tid == 0 && chunks > 0) finished(chunks);
      if (chunks > 0) copy_out(chunks - 1);
      if (a.final_state != nullptr) {
        chain::store_state_one_group(st, a.final_state, state_offset, tid);
      }
    } else {  // ---- own builder j = group - 1: the chain's sub-chunks it claims
      registers_down<C::kBuilderRegisters>();
      const int builder = group - 1, btid = tid & 127, bar = 2 + builder;
      unsigned char* const scratch = smem + C::kSScratch + builder * C::kScratch;
      unsigned char* const work = scratch + build::kInBytes;
      // The queued claims: entry `set ^ 1` holds the next sub-chunk (its inputs are loaded during
      // this build), entry `set` receives the claim after it (shared::cta addresses, read where
      // they are needed: the builders run at 96 registers).
      const uint32_t queue = base + C::kSClaims + 8 * builder;
      const auto sync = [bar] { named_sync(bar, kWarpgroup); };
      // Raw inputs: this thread's gate channel (A_log[h], dt_bias[h, btid]), the chain's carry,
      // and beta of the loads ahead (a register, which the prologue stores).
      [[maybe_unused]] kda::detail::GateChannel channel{};
      [[maybe_unused]] float gate_scale = 0.0f;
      [[maybe_unused]] float beta_ahead = 0.0f;
      if constexpr (kRaw) {
        if (a.raw.raw_gate) {
          channel = kda::detail::gate_channel(a.raw.a_log[h], a.raw.dt_bias[h * kDim + btid]);
          gate_scale = kda::detail::gate_scale(a.raw.lower_bound);
        }
      }
      const auto issue_ahead = [&](uint32_t c, uint32_t slot) {
        if constexpr (kRaw) {
          beta_ahead = build::issue_raw_ahead(a.in, a.raw, tokens.sub_chunk(c), h, btid, scratch);
        } else {
          build::issue_ahead(a.in, tokens.sub_chunk(c), h, btid, scratch, static_cast<int>(slot));
        }
      };
      if (btid == 32) {
        const uint32_t first = flags::claim(ring.claims + q);
        cluster::store_count(queue, first);
        cluster::store_count(queue + 4, first < chunks ? flags::claim(ring.claims + q) : kNoClaim);
      }
      sync();
      uint32_t c = cluster::load_count(queue);
      if (c < chunks) issue_ahead(c, 0);
      uint32_t set = 0;  // the beta slot of sub-chunk c's loads, and the queue's entry
      uint32_t claimed = kNoClaim;  // thread 32: the claim after next, made during this build
      while (c < chunks) {
        const build::SubChunk sc = tokens.sub_chunk(c);
        build::issue_v(a.in, sc, h, btid, scratch);
        const uint32_t b = c % C::kRing;
        if (c >= C::kRing) {  // the chain has finished the buffer's previous record
          // Acquire loads (pair with the count's release: its reads, then our stores); not a
          // relaxed poll and a fence, whose MEMBAR would wait for this builder's loads of v.
          const uint32_t need = c - C::kRing + 1;
          while (flags::load_acquire_cta_shared(done) < need) __nanosleep(32);
        }
        if (btid == 0) cluster::store_count(mark(b), c + 1);
        const auto load_ahead = [&] {
          const uint32_t next = cluster::load_count(queue + 4 * (set ^ 1));
          if (next < chunks) {
            issue_ahead(next, set ^ 1);
          } else {
            ptx::cp_async_commit();
          }
          // The claim after next: issued here, its result stored into the queue only at the end
          // of the build (the atomic's round trip, ~1 us, would otherwise hold warp 1 and so the
          // builder's next barrier; phase 4, which warp 1 sits out, is shorter).
          if (btid == 32) claimed = next < chunks ? flags::claim(ring.claims + q) : kNoClaim;
        };
        const build::OneRecord record{smem + b * C::kBuffer};
        if constexpr (kRaw) {
          build::build_raw_sub_chunk(a.in, a.raw, channel, gate_scale, c, sc, beta_ahead,
                                     l2_gate_carry(ring, q), btid, scratch, work, record, sync,
                                     load_ahead);
        } else {
          build::build_sub_chunk<1, false>(sc, a.in.fuse_q_l2norm, btid, scratch, work, record,
                                           sync, false, build::NoPrologue{}, load_ahead,
                                           static_cast<int>(set));
        }
        jitter(a.jitter_ns, c * 131u + btid);
        if (btid == 32) cluster::store_count(queue + 4 * set, claimed);  // read after the barrier
        ptx::fence_proxy_async_shared();  // the record's stores, for the chain's wgmma reads
        named_sync(bar, kWarpgroup);      // the whole record is written; the scratch is free
        if (btid == 0) wgmma::mbarrier_arrive(full + 8 * b);
        c = cluster::load_count(queue + 4 * (set ^ 1));
        set ^= 1;
      }
    }
    return;
  }

  // ---- A helper CTA: four builders (every warpgroup; no chain), each claiming sub-chunks of the
  // chains in turn: after a claim on chain q its next claim tries q + (all helper builders)
  // first, so the helpers spread over the chains; a chain with nothing left passes the claim to
  // the next chain, and a builder stops once every chain has refused it. The record is built
  // straight into one of the builder's global record slots (ordinary stores, to L2) and published
  // in the chain's mailbox by one thread after the builder's barrier (the barrier, then a release
  // at GPU scope: the other threads' stores are ordered before it).
  const int builder = group, btid = tid & 127, bar = 2 + builder;
  unsigned char* const scratch = smem + builder * C::kHSlot;
  unsigned char* const work = scratch + build::kInBytes;
  const uint32_t queue = base + builder * C::kHSlot + C::kHClaims;  // (chain, sub-chunk) x 2
  const int helper_builders = C::kHelperBuilders * (static_cast<int>(gridDim.x) - ring.chains);
  const int me = C::kHelperBuilders * (q - ring.chains) + builder;
  int cursor = me % ring.chains;  // warp 1's next chain to try
  const int lane = btid & 31;
  const auto chunks_of = [&](int i) { return static_cast<uint32_t>(l2_chain_tokens(a, i).chunks); };
  // Queue entry e := the next claim (chain, sub-chunk) on a chain whose CTA runs, or
  // (0, kNoClaim) once no running chain has sub-chunks left (the others' own builders build
  // theirs); by warp 1's 32 lanes together. First one atomic on the cursor's chain (the common
  // case: it has work); where it refuses, the lanes look at 32 chains' counters at once (relaxed
  // loads: a counter only grows, so a stale one errs towards trying) and lane 0 claims from the
  // first open one, so that a helper at the end of the call learns in a few round trips, not one
  // a chain, that nothing is left (its last build waits for that).
  const auto claim_into = [&](uint32_t e) {
    uint32_t got = kNoClaim;
    int i = cursor;
    if (lane == 0 && flags::load_relaxed(ring.live + i) != 0) got = flags::claim(ring.claims + i);
    got = __shfl_sync(0xffffffffu, got, 0);
    int start = 0;    // chains cursor + start .. + 31 are looked at next
    int refused = i;  // a chain that refused a claim stays closed (its counter only grows)
    while (got >= chunks_of(i)) {
      if (start >= ring.chains) {
        i = -1;
        break;
      }
      const int k = start + lane;
      int chain_k = cursor + k;
      chain_k = chain_k >= ring.chains ? chain_k - ring.chains : chain_k;
      const bool open = k < ring.chains && chain_k != refused &&
                        flags::load_relaxed(ring.live + chain_k) != 0 &&
                        flags::load_relaxed(ring.claims + chain_k) < chunks_of(chain_k);
      const uint32_t ballot = __ballot_sync(0xffffffffu, open);
      if (ballot == 0) {
        start += 32;
        continue;
      }
      i = __shfl_sync(0xffffffffu, chain_k, __ffs(ballot) - 1);
      if (lane == 0) got = flags::claim(ring.claims + i);
      got = __shfl_sync(0xffffffffu, got, 0);
      refused = i;  // if refused: closed now; the next look passes over it
    }
    if (lane == 0) {
      cluster::store_count(e, i < 0 ? 0u : static_cast<uint32_t>(i));
      cluster::store_count(e + 4, i < 0 ? kNoClaim : got);
    }
    if (i >= 0) {
      cursor = static_cast<int>((static_cast<int64_t>(i) + helper_builders) % ring.chains);
    }
  };
  const auto sync = [bar] { named_sync(bar, kWarpgroup); };
  if (btid / 32 == 1) {
    // The chain CTAs start before the helpers as a rule (lower block indices); wait up to 20 us
    // for all of them before the first claims (none held while waiting), then help the running.
    const uint64_t t0 = flags::now_ns();
    while (flags::load_relaxed(ring.live_count) < static_cast<uint32_t>(ring.chains) &&
           flags::now_ns() - t0 < 20000) {
      __nanosleep(256);
    }
    claim_into(queue);
    __syncwarp();
    if (cluster::load_count(queue + 4) != kNoClaim) {
      claim_into(queue + 8);
    } else if (lane == 0) {
      cluster::store_count(queue + 8, 0);
      cluster::store_count(queue + 12, kNoClaim);
    }
  }
  sync();
  const auto job = [&](uint32_t i, uint32_t sub) {
    return l2_chain_tokens(a, static_cast<int>(i)).sub_chunk(sub);
  };
  const auto head = [&](uint32_t i) { return static_cast<int>(i) % a.in.heads; };
  // Raw inputs: beta of the loads ahead (a register, which the prologue stores).
  [[maybe_unused]] float beta_ahead = 0.0f;
  const auto issue_ahead = [&](uint32_t i, uint32_t sub, uint32_t slot) {
    if constexpr (kRaw) {
      beta_ahead = build::issue_raw_ahead(a.in, a.raw, job(i, sub), head(i), btid, scratch);
    } else {
      build::issue_ahead(a.in, job(i, sub), head(i), btid, scratch, static_cast<int>(slot));
    }
  };
  // This builder's record slots: what each holds (chain, sub-chunk; kNoClaim: nothing) in its
  // scratch, and the one this build writes.
  const uint32_t held = base + builder * C::kHSlot + C::kHSlots;
  const uint32_t writing = held + 8 * kL2HelperRecords;
  const uint32_t first_slot = static_cast<uint32_t>(me) * kL2HelperRecords;
  if (btid == 0) {
    for (int k = 0; k < kL2HelperRecords; ++k) cluster::store_count(held + 8 * k + 4, kNoClaim);
  }
  uint32_t chain = cluster::load_count(queue), c = cluster::load_count(queue + 4);
  if (c != kNoClaim) issue_ahead(chain, c, 0);
  uint32_t set = 0;  // the beta slot of this build's loads, and the queue's entry (as above)
  while (c != kNoClaim) {
    const build::SubChunk sc = job(chain, c);
    build::issue_v(a.in, sc, head(chain), btid, scratch);
    const int i = static_cast<int>(chain);
    // A free record slot of this builder's (empty, or its record's chain is past it: the copy
    // landed before that step), chosen by thread 0 for all (the counts it reads move).
    if (btid == 0) {
      for (int k = 0;; k = k + 1 < kL2HelperRecords ? k + 1 : 0) {
        const uint32_t held_c = cluster::load_count(held + 8 * k + 4);
        if (held_c == kNoClaim ||
            flags::load_relaxed(ring.done + cluster::load_count(held + 8 * k)) > held_c) {
          flags::fence_acquire();  // the chain's copy of the slot's record before our stores
          cluster::store_count(writing, static_cast<uint32_t>(k));
          break;
        }
        if (k + 1 == kL2HelperRecords) __nanosleep(64);
      }
    }
    sync();
    const uint32_t k_slot = cluster::load_count(writing);
    unsigned char* const record = l2_record(ring, first_slot + k_slot);
    const auto load_ahead = [&] {
      const uint32_t next_chain = cluster::load_count(queue + 8 * (set ^ 1));
      const uint32_t next = cluster::load_count(queue + 8 * (set ^ 1) + 4);
      if (next != kNoClaim) {
        issue_ahead(next_chain, next, set ^ 1);
      } else {
        ptx::cp_async_commit();
      }
      if (btid / 32 == 1) {  // the claim after next (warp 1: idle while warp 0 runs phase 4)
        if (next != kNoClaim) {
          claim_into(queue + 8 * set);
        } else if (lane == 0) {
          cluster::store_count(queue + 8 * set, 0);
          cluster::store_count(queue + 8 * set + 4, kNoClaim);
        }
      }
    };
    if constexpr (kRaw) {
      const float beta = beta_ahead;
      kda::detail::GateChannel channel{};
      float gate_scale = 0.0f;
      if (a.raw.raw_gate) {
        const int hh = head(chain);
        channel = kda::detail::gate_channel(a.raw.a_log[hh], a.raw.dt_bias[hh * kDim + btid]);
        gate_scale = kda::detail::gate_scale(a.raw.lower_bound);
      }
      build::build_raw_sub_chunk(a.in, a.raw, channel, gate_scale, c, sc, beta,
                                 l2_gate_carry(ring, i), btid, scratch, work,
                                 build::OneRecord{record}, sync, load_ahead);
    } else {
      build::build_sub_chunk<1, false>(sc, a.in.fuse_q_l2norm, btid, scratch, work,
                                       build::OneRecord{record}, sync, false, build::NoPrologue{},
                                       load_ahead, static_cast<int>(set));
    }
    jitter(a.jitter_ns, c * 131u + btid);
    named_sync(bar, kWarpgroup);  // every thread's stores of the record are in
    if (btid == 0) {
      // The entry's previous sub-chunk (c - kL2HelperMailbox) taken: its chain is past it.
      if (c >= kL2HelperMailbox) {
        const uint32_t need = c - kL2HelperMailbox + 1;
        while (flags::load_relaxed(ring.done + i) < need) __nanosleep(64);
      }
      cluster::store_count(held + 8 * k_slot, chain);
      cluster::store_count(held + 8 * k_slot + 4, c);
      flags::fence_acquire();             // cumulative: the whole builder's stores, at GPU scope
      flags::fence_proxy_async_global();  // for the chain's bulk copy (the async proxy)
      flags::store_release(l2_entry(ring, i, c),
                           (static_cast<unsigned long long>(first_slot + k_slot) << 32) | (c + 1));
    }
    chain = cluster::load_count(queue + 8 * (set ^ 1));
    c = cluster::load_count(queue + 8 * (set ^ 1) + 4);
    set ^= 1;
  }
}

// The kernel's grid: the chain CTAs, then `helper_ctas` helper CTAs.
template <bool kRaw>
inline cudaError_t launch_l2_helpers_kernel(const OnepassArgs& a, const L2HelperRing& ring,
                                            cudaStream_t stream) {
  using C = L2HelpersConfig;
  const cudaError_t e = cudaFuncSetAttribute(
      onepass_l2_helpers_kernel<kRaw>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSBytes);
  if (e != cudaSuccess) return e;
  onepass_l2_helpers_kernel<kRaw><<<static_cast<unsigned>(ring.chains + ring.helper_ctas),
                                    C::kThreadsAll, C::kSBytes, stream>>>(a, ring);
  return cudaGetLastError();
}

}  // namespace kda::detail::onepass
