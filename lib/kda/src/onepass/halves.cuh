// The one-pass forward for few chains (onepass.h launch_value_halves): a thread-block cluster of
// two CTAs per chain. One CTA per chain is builder-bound (three builders make a sub-chunk every
// ~1.6-1.8 us however short the chain's step), so a fixed shape of 64 chains uses 64 SMs at that
// rate (docs/design.md "Few chains"). Here CTA `rank` of the pair holds the state's value rows
// 64 rank .. +63 (chain16.cuh step on one warpgroup, as warps 4 rank .. 4 rank + 3 of the
// two-warpgroup step: ~half the chain's step), and both CTAs' three builders build the chain's
// sub-chunks in turn (CTA rank, builder j: sub-chunks rank + 2 j, rank + 2 j + 6, ...). Six
// builders per chain; five ring buffers per CTA (three when staged), each a whole record.
//
// Hand-over: buffer c % kRing of both CTAs holds sub-chunk c. Its builder writes the record into
// its own CTA's buffer with ordinary stores (the one pass's build, the same bits), fences them
// for the async proxy, and after its barrier one thread arrives on its own full mbarrier and
// copies the whole record (23,040 B) into the peer's buffer by bulk copy, announced on the
// peer's full mbarrier (cluster.cuh copy_to_peer: an arrival expecting the bytes). Each chain
// frees the buffer in both CTAs once its step's products are waited for: it stores how many
// sub-chunks it has finished into both CTAs (six builders on five or three buffers: a builder
// can be two of a buffer's phases behind, which an mbarrier's phase parity cannot tell apart; a
// count can; tests/kda/test_onepass_handover.cpp). No cluster-scope release or acquire is in
// the loop: each is a MEMBAR.ALL.GPU or a CCTL.IVALL (cluster.cuh), and dd78659's builders,
// which mirrored every store into the peer and released them per thread, ran the step at one
// CTA a chain's speed.
// The bits are the one pass's (kernel.cuh Config<1, 3>, bf16 chain): the same builds, and per
// value row the same products in the same order.
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
// scratch (build16.cuh StagedRecord) and takes a ring buffer only for phase 5, the copy and the
// chains' steps, so three buffers serve six builders; otherwise a buffer is held for a whole
// build, the copy and the steps, and five buffers bound the step at ~(build + copy + step) / 5.
// kRaw: raw inputs (raw_inputs.h), the builds' raw prologue with the gate's running sums handed
// across the pair (PairCarry), and V_new as a bf16 pair in the chain (the library raw path's
// chain, ChainOperands::bf16_vnew_pairs: its bits); unstaged only (shared memory).
template <bool kStaged, bool kRaw = false>
struct HalvesConfig {
  static constexpr int kBuilders = kHalvesBuilders / 2;  // a CTA's (onepass.h)
  static constexpr int kRing = kStaged ? kHalvesStagedRingBuffers : kHalvesRingBuffers;
  static constexpr int kBuffer = chain::kBuffer;  // a record (23,040 B), 1024-byte aligned
  static constexpr int kChainBuilders = 2 * kBuilders;  // per chain: both CTAs'
  static constexpr int kThreadsAll = 128 * (1 + kBuilders);
  static constexpr int kStage = kStaged ? build::kStageBytes : 0;  // after the work region
  static constexpr int kScratch = (build::kInBytes + build::kWorkBytes + kStage + 127) & ~127;
  static constexpr int kSScratch = kRing * kBuffer;
  static constexpr int kSO = kSScratch + kBuilders * kScratch;
  static constexpr int kSFull = kSO + 2 * chain::kOTile;  // kRing mbarriers: record c % kRing in
  static constexpr int kSDone = kSFull + 8 * kRing;  // sub-chunks chain 0, chain 1 has finished
  // Raw inputs: the gate's running sums (PairCarry: this CTA's rows, then the peer's received
  // ones, 16-byte aligned for the bulk copy), then their mbarriers.
  static constexpr int kCarryRows = kHalvesCarryOwnSlots + kHalvesCarryPeerSlots;
  static constexpr int kSCarry = kSDone + 8;
  static constexpr int kSReceived = kSCarry + kHalvesCarryOwnSlots * kDim * 4;
  static constexpr int kSCarryBars = kSCarry + (kRaw ? kCarryRows * kDim * 4 : 0);
  static constexpr int kSBytes =
      kSCarryBars + (kRaw ? 8 * kCarryRows : 0) + 1024;  // + the base's alignment slack
  static_assert(!kRaw || !kStaged, "raw inputs: the unstaged halves (shared memory)");
  static_assert(kSCarry % 16 == 0, "the carry rows' bulk copy");
  static_assert(!kRaw || (2 * kHalvesCarryOwnSlots - kRing >= 2 &&
                          2 * kHalvesCarryPeerSlots - kRing >= 1),
                "the carry rings' reuse (PairCarry)");
  // The chain holds 64 state registers (the two-warpgroup step's ~136 a thread); the builders
  // get the rest.
  static constexpr int kChainRegisters = 152;
  static constexpr int kBuilderRegisters = 120;
  static_assert(kSBytes <= 227 * 1024, "one CTA per SM");
  static_assert(kRecordBytes % 16 == 0 && kBuffer % 1024 == 0, "the bulk copy's alignment");
  static_assert(128 * kChainRegisters + 128 * kBuilders * kBuilderRegisters <= 65536,
                "the register file");
};

// The raw gate's running sums across the pair (build16.cuh raw_prologue's carry). Sub-chunk c is
// built in CTA c % 2 and reads the row of c - 1 (the peer's) at chunk positions 1-3 and, at
// position 3, the row of c - 2 (its own CTA's: the chunk's first half's total). So each CTA keeps
// its own rows in a ring of kOwnSlots (row c in slot (c / 2) % kOwnSlots, an mbarrier each with
// one arrival: thread 0 after the builder's barrier) and sends by bulk copy only the rows the peer
// reads (positions 0-2, not the call's last) into the peer's receive ring (kPeerSlots rows, each
// with an mbarrier that the copy's arrive.expect_tx and bytes complete). Every copy thus has a
// reader that waits for it, so neither CTA can leave with a copy into it in flight. Rows the peer
// reads come, per sending CTA, as consecutive indices k (CTA 0: c = 0, 2, 4, ... as k = c / 2;
// CTA 1: c = 1, 5, 9, ... as k = c / 4), slot k % kPeerSlots.
// Reuse: the builder of the slot's next row has waited for ring buffer c' % kRing, i.e. both
// chains past c' - kRing, which are past the previous row's readers (c + 1, c + 2) when
// 2 kOwnSlots - kRing >= 2 and 2 kPeerSlots - kRing >= 1 (CTA 0's rows, two apart; CTA 1's are
// four apart): each mbarrier is then at most one phase behind its waiter, and a row's source is
// not rewritten before its copy has landed (its reader waited for that).
// One extra builder barrier and at most one 512-byte copy a build; no cluster-scope release per
// thread (cluster.cuh).
struct PairCarry {
  static constexpr int kOwnSlots = kHalvesCarryOwnSlots;
  static constexpr int kPeerSlots = kHalvesCarryPeerSlots;
  float* own;             // [kOwnSlots][128]: this CTA's rows
  uint32_t own_rows;      // their shared::cta address, then their mbarriers
  uint32_t own_bars;
  const float* received;  // [kPeerSlots][128]: the peer's rows copied in, and their mbarriers
  uint32_t received_bars;
  uint32_t peer_received;  // the peer's receive ring and its mbarriers (shared::cluster)
  uint32_t peer_received_bars;
  int64_t chunks;          // the chain's sub-chunks (the last row is read by no one)
  // Row c's index among the rows its CTA sends (c % 4 != 3).
  __device__ __forceinline__ static int64_t sent_index(int64_t c) {
    return (c & 1) == 0 ? c / 2 : c / 4;
  }
  __device__ __forceinline__ static uint32_t own_slot(int64_t c) {
    return static_cast<uint32_t>((c / 2) % kOwnSlots);
  }
  __device__ __forceinline__ void wait(int64_t c) const {  // c: the peer's row
    const int64_t k = sent_index(c);
    wgmma::mbarrier_wait(received_bars + 8 * static_cast<uint32_t>(k % kPeerSlots),
                         static_cast<uint32_t>((k / kPeerSlots) & 1));
  }
  __device__ __forceinline__ float read(int64_t c, int tid) const {
    return received[(sent_index(c) % kPeerSlots) * kDim + tid];
  }
  __device__ __forceinline__ void wait_two_back(int64_t c) const {  // c: this CTA's row
    wgmma::mbarrier_wait(own_bars + 8 * own_slot(c),
                         static_cast<uint32_t>((c / 2 / kOwnSlots) & 1));
  }
  __device__ __forceinline__ float read_two_back(int64_t c, int tid) const {
    return own[own_slot(c) * kDim + tid];
  }
  template <class Sync>
  __device__ __forceinline__ void publish(int64_t c, float x, int tid, const Sync& sync) const {
    const uint32_t slot = own_slot(c);
    own[slot * kDim + tid] = x;
    ptx::fence_proxy_async_shared();  // the row, for the bulk copy
    sync();
    if (tid == 0) {
      wgmma::mbarrier_arrive(own_bars + 8 * slot);
      if ((c & 3) != 3 && c + 1 < chunks) {
        const uint32_t k = static_cast<uint32_t>(sent_index(c) % kPeerSlots);
        cluster::copy_to_peer(peer_received + k * kDim * 4, own_rows + slot * kDim * 4, kDim * 4,
                              peer_received_bars + 8 * k);
      }
    }
  }
};

template <bool kStaged, bool kRaw = false>
__global__ void __launch_bounds__(HalvesConfig<kStaged, kRaw>::kThreadsAll, 1)
    onepass_halves_kernel(const OnepassArgs a) {
  using C = HalvesConfig<kStaged, kRaw>;
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
  const uint32_t full = base + C::kSFull;
  if (tid == 0) {
    for (int b = 0; b < kRingSize; ++b) {
      wgmma::mbarrier_init(full + 8 * b, 1);  // the builder's, or its copy's from the peer
    }
    *reinterpret_cast<uint32_t*>(smem + C::kSDone) = 0;
    *reinterpret_cast<uint32_t*>(smem + C::kSDone + 4) = 0;
    if constexpr (kRaw) {
      for (int b = 0; b < C::kCarryRows; ++b) {
        wgmma::mbarrier_init(base + C::kSCarryBars + 8 * b, 1);  // thread 0's, or a copy's
      }
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
    const uint32_t done = base + C::kSDone + 4 * rank;  // this chain's count, in both CTAs
    const uint32_t peer_done = cluster::peer_shared(done, peer);
    for (int64_t c = 0; c < chunks; ++c) {
      named_sync(1, kWarpgroup);  // every chain warp is done with sub-chunk c - 1
      if (c > 0) {
        if (tid == 0) {  // c sub-chunks done, in both CTAs' counts
          cluster::store_count(done, static_cast<uint32_t>(c));
          cluster::store_count_remote(peer_done, static_cast<uint32_t>(c));
        }
        copy_out(c - 1);
      }
      const uint32_t b = static_cast<uint32_t>(c % kRingSize);
      wgmma::mbarrier_wait(full + 8 * b, static_cast<uint32_t>((c / kRingSize) & 1));
      jitter(a.jitter_ns, static_cast<uint32_t>(c) * 977u + tid);
      chain::step<kRaw>(st, base + b * C::kBuffer, smem + b * C::kBuffer,
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
    const uint32_t peer_base = cluster::peer_shared(base, peer);  // the peer's ring, same offsets
    const uint32_t peer_full = cluster::peer_shared(full, peer);
    auto sub_chunk = [&](int64_t c) { return tokens.sub_chunk(c); };
    // Raw inputs: this thread's gate channel (A_log[h], dt_bias[h, btid]) and the carry (built in
    // the raw kernel only: its peer addresses are mapa instructions).
    [[maybe_unused]] kda::detail::GateChannel channel{};
    [[maybe_unused]] float gate_scale = 0.0f;
    const auto pair_carry = [&] {
      constexpr uint32_t kReceivedBars = 8 * kHalvesCarryOwnSlots;  // after the own rows' ones
      return PairCarry{reinterpret_cast<float*>(smem + C::kSCarry),
                       base + C::kSCarry,
                       base + C::kSCarryBars,
                       reinterpret_cast<const float*>(smem + C::kSReceived),
                       base + C::kSCarryBars + kReceivedBars,
                       cluster::peer_shared(base + C::kSReceived, peer),
                       cluster::peer_shared(base + C::kSCarryBars + kReceivedBars, peer),
                       chunks};
    };
    if constexpr (kRaw) {
      if (a.raw.raw_gate) {
        channel = kda::detail::gate_channel(a.raw.a_log[h], a.raw.dt_bias[h * kDim + btid]);
        gate_scale = kda::detail::gate_scale(a.raw.lower_bound);
      }
    }
    // The loads ahead, in place, as kernel.cuh's three builders (build16.cuh load_ahead); raw
    // beta into a register (issue_raw_ahead), which the prologue stores.
    [[maybe_unused]] float beta_ahead = 0.0f;
    const auto issue_ahead = [&](int64_t c, int slot) {
      if constexpr (kRaw) {
        beta_ahead = build::issue_raw_ahead(a.in, a.raw, sub_chunk(c), h, btid, scratch);
      } else {
        build::issue_ahead(a.in, sub_chunk(c), h, btid, scratch, slot);
      }
    };
    const int64_t first = rank + 2 * builder;
    if (first < chunks) issue_ahead(first, 0);
    int set = 0;  // the beta slot of sub-chunk c's loads
    for (int64_t c = first; c < chunks; c += C::kChainBuilders) {
      build::issue_v(a.in, sub_chunk(c), h, btid, scratch);
      const uint32_t b = static_cast<uint32_t>(c % kRingSize);
      // Buffer b of both CTAs free again (both chains are done with sub-chunk c - kRing).
      const auto wait_buffer = [&] {
        if (c < kRingSize) return;
        const uint32_t need = static_cast<uint32_t>(c - kRingSize + 1);
        const uint32_t counts = base + C::kSDone;  // chain 0's, chain 1's
        while (cluster::load_count(counts) < need || cluster::load_count(counts + 4) < need) {
          __nanosleep(32);
        }
      };
      if constexpr (!kStaged) wait_buffer();
      const auto sync = [bar] { named_sync(bar, kWarpgroup); };
      const build::OneRecord target{smem + b * C::kBuffer};
      const auto load_ahead = [&] {
        if (c + C::kChainBuilders < chunks) {
          issue_ahead(c + C::kChainBuilders, set ^ 1);
        } else {
          ptx::cp_async_commit();
        }
      };
      if constexpr (kRaw) {
        build::build_raw_sub_chunk(a.in, a.raw, channel, gate_scale, c, sub_chunk(c), beta_ahead,
                                   pair_carry(), btid, scratch, work, target, sync, load_ahead);
      } else if constexpr (kStaged) {
        const build::StagedRecord record{stage, target};
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
      ptx::fence_proxy_async_shared();  // the record's stores, for the wgmma reads and the copy
      named_sync(bar, kWarpgroup);  // the record is written; the scratch is free again
      if (btid == 0) {
        wgmma::mbarrier_arrive(full + 8 * b);
        cluster::copy_to_peer(peer_base + b * C::kBuffer, base + b * C::kBuffer,
                              static_cast<uint32_t>(kRecordBytes), peer_full + 8 * b);
      }
      set ^= 1;
    }
  }
  cluster::sync();  // neither CTA leaves while the other may still write its ring or barriers
}

// The kernel's launch configuration for `grid` CTAs in clusters of two (cluster.cuh
// launch_config).
template <bool kStaged, bool kRaw = false>
inline cudaError_t halves_launch_config(unsigned grid, cudaStream_t stream,
                                        cudaLaunchAttribute (&attribute)[1],
                                        cudaLaunchConfig_t& config) {
  using C = HalvesConfig<kStaged, kRaw>;
  return cluster::launch_config(onepass_halves_kernel<kStaged, kRaw>, grid, C::kThreadsAll,
                                C::kSBytes, 2, stream, attribute, config);
}

// Launches the value-halves cluster on `args` (bf16 chain operands, the contract's inputs; the
// caller checks row_offsets_fit): grid 2 x num_seqs x heads in clusters of two; returns the
// launch's error.
template <bool kStaged, bool kRaw = false>
inline cudaError_t launch_halves_config(const OnepassArgs& args, cudaStream_t stream) {
  cudaLaunchAttribute attribute[1];
  cudaLaunchConfig_t config;
  cudaError_t e = halves_launch_config<kStaged, kRaw>(
      2u * static_cast<unsigned>(args.in.num_seqs) * static_cast<unsigned>(args.in.heads), stream,
      attribute, config);
  if (e != cudaSuccess) return e;
  e = cudaLaunchKernelEx(&config, onepass_halves_kernel<kStaged, kRaw>, args);
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

}  // namespace kda::detail::onepass
