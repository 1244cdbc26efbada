// The one-pass forward: one CTA per (sequence, head) builds every 16-token sub-chunk's factors
// itself and runs the chain on them, so the only DRAM traffic is the inputs, the outputs and the
// states (docs/design.md "The one-pass forward"). Warp-specialized (kernel.cuh):
//   the chain   one warpgroup, the fp32 state S^T in wgmma accumulators (chain16.cuh
//               step_one_group, 232 registers by setmaxnreg; 224 in the raw-input kernel);
//   3 builders  warpgroups at 88 registers (96 raw), builder b taking sub-chunks b, b + 3, ...
//               and writing each record (record16.h) into a ring of four shared-memory buffers
//               (build16.cuh); with raw inputs they also activate the gate (its chunk cumsum
//               handed from builder to builder), beta and k's norm;
// full / empty mbarriers hand the buffers over. One CTA per SM (202 KB of shared memory).
// A chain is latency-bound (~2 us a sub-chunk on an H200), so the kernel is the library's choice
// when the chains fill the SMs and the call is on the fused contract path (kernel_choice.h);
// few long sequences, the explicit path and raw inputs keep the two-kernel forward. Rows of
// sequence r of the grid: the sequences by decreasing length (order_by_length), so the longest
// chains start first and the tail is short.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include <cuda_bf16.h>

#include "onepass/record16.h"
#include "raw_inputs.h"

namespace kda::detail::onepass {

struct OnepassArgs {
  BuildInputs in;      // the contract's inputs (gate and beta typed; unused where raw reads them)
  RawPrepArgs raw;     // raw inputs (raw_inputs.h): the raw-input kernel runs when raw.any()
  __nv_bfloat16* out;  // [tokens][heads][128], every row of every sequence written
  int64_t out_stride;  // elements between tokens
  const float* initial_state;  // [N][H][128 keys][128 values] or null (zeros)
  float* final_state;          // same layout, or null
  const int32_t* order;        // device [num_seqs]: the sequence grid row r runs; null: r
  // How the chain rounds its state products' operands (record16.h): the library's bf16, or the
  // lab's bf16 pairs (one_pass16_pairs) and fp16 under row scales (one_pass16_f16).
  ChainOperands operands;
  // The value-halves cluster with each build staged (halves.cuh kStaged; the lab's
  // one_pass16_halves_staged): a ring buffer only from phase 5 on. launch_value_halves only.
  bool staged;
  int jitter_ns;  // tests' stress mode when > 0: every chain thread sleeps up to this long
                  // (pseudo-random per thread and sub-chunk) after a record is handed to it and
                  // before it reads it, every builder thread before it hands one over: a
                  // hand-over that does not really wait then shows up as different bits
};

inline constexpr int kLibraryBuilders = 3;  // the library's configuration: kernel.cuh Config<1, 3>
// The record rings' hand-over (tests/kda/test_onepass_handover.cpp simulates each with these
// sizes): buffers a CTA, builders a chain.
inline constexpr int kRingBuffers = 4;              // kernel.cuh (one CTA, kLibraryBuilders)
inline constexpr int kHalvesBuilders = 6;           // halves.cuh: three in each CTA of the pair
inline constexpr int kHalvesRingBuffers = 5;        // its whole-record buffers, builds unstaged
inline constexpr int kHalvesStagedRingBuffers = 3;  // and staged (beside the stages)
// Raw inputs: the gate's running sums in each CTA of the pair (halves.cuh PairCarry): its own
// rows, and the rows received from the peer.
inline constexpr int kHalvesCarryOwnSlots = 4;
inline constexpr int kHalvesCarryPeerSlots = 3;

// The helper cluster (helpers.cuh) for few chains: kHelperChains chain CTAs (the library's CTA:
// the chain and three builders) and one helper CTA of kHelperBuilders builders and no chain, which
// lends each chain one build a round. A chain's sub-chunks go in rounds of kHelperRound: its own
// builders build c % kHelperRound = 0, 1, 2 of each, the helper the last; helper builder j's build
// of round r is for chain (j + r) % kHelperChains, so every chain gets one helper build a round and
// the three helper builders serve the three chains in turn.
inline constexpr int kHelperChains = 3;                 // chain CTAs a cluster
inline constexpr int kHelperBuilders = 3;               // the helper CTA's builders
inline constexpr int kHelperClusterCtas = kHelperChains + 1;
inline constexpr int kHelperRank = kHelperChains;       // the helper CTA's rank in its cluster
inline constexpr int kHelperRound = kLibraryBuilders + 1;
inline constexpr int kHelperRingBuffers = 5;            // a chain CTA's whole-record buffers
static_assert(kHelperBuilders == kHelperChains, "one helper build a chain a round");
// Whether the helper builds chain sub-chunk c (else the chain CTA's builder c % kHelperRound).
KDA_ONEPASS_HD constexpr bool helper_builds(int64_t c) {
  return c % kHelperRound == kHelperRound - 1;
}
// The chain a helper builder's build of round r is for, and the sub-chunk.
KDA_ONEPASS_HD constexpr int helper_chain(int builder, int64_t round) {
  return static_cast<int>((builder + round) % kHelperChains);
}
KDA_ONEPASS_HD constexpr int64_t helper_sub_chunk(int64_t round) {
  return kHelperRound * round + kHelperRound - 1;
}

// The L2 helpers (l2_helpers.cuh) for few chains: the library's CTA per chain and, after them,
// helper CTAs of kL2HelperBuilders builders on the SMs left; every builder claims a chain's next
// sub-chunk from a global counter. A helper builds its record straight into one of its own
// kL2HelperRecords global record slots (L2) and names the slot in the chain's mailbox entry
// c % kL2HelperMailbox, from which the chain copies the record into its CTA's ring of
// kL2HelperRing buffers. The slots belong to the helper builders, not the chains, so a helper
// never waits for a chain before it builds (only for a free slot of its own) and the ring is
// ~6.6 MB for 96 chains on 132 SMs (36 helper CTAs), under 1 % of h96-fixed's inputs.
inline constexpr int kL2HelperBuilders = 4;   // a helper CTA's (every warpgroup)
inline constexpr int kL2HelperRing = 5;       // a chain CTA's record buffers
inline constexpr int kL2HelperMailbox = 16;   // a chain's entries: c + 1 and the helper slot
inline constexpr int kL2HelperRecords = 2;    // global record slots a helper builder
inline constexpr int kL2HelperCarryRows = 16; // raw inputs: a chain's gate rows (L2GateCarry)
// The helper CTAs the workspace provides record slots for: the SMs the chains leave on a 132-SM
// device (the H100's and the H200's), and no more than one a chain (four builders beside a chain's
// three; a chain-bound chain needs ~1.2 more). A device with more SMs runs no more than that.
inline constexpr int kL2HelperSms = 132;
KDA_ONEPASS_HD constexpr int64_t l2_helper_ctas_max(int64_t chains) {
  const int64_t left = chains < kL2HelperSms ? kL2HelperSms - chains : 0;
  return left < chains ? left : chains;
}
// The L2 helpers' global memory (a workspace region; before each launch the caller zeroes the
// counters, flags and mailboxes and fills the carry rows with 0xff bytes, a tag no sub-chunk
// has): per chain its claim counter, its count of finished sub-chunks and whether its CTA runs,
// the count of running chain CTAs, then each chain's mailbox (64-bit entries: c + 1 low, the
// helper slot high), then, for raw inputs, its gate carry rows (64-bit words: the sub-chunk low,
// the running sum's bits high), then the helper builders' record slots.
struct L2HelperRing {
  uint32_t* claims;          // [chains]
  uint32_t* done;            // [chains]
  uint32_t* live;            // [chains]: 1 once the chain's CTA runs (helpers build only for those)
  uint32_t* live_count;      // how many chain CTAs run
  unsigned long long* mailbox;  // [chains][kL2HelperMailbox]
  unsigned long long* carry;    // [chains][kL2HelperCarryRows][128]
  unsigned char* records;    // [helper_ctas][kL2HelperBuilders][kL2HelperRecords][kRecordBytes]
  int chains;                // num_seqs x heads: blocks 0 .. chains - 1 are the chain CTAs
  int helper_ctas;           // blocks after them (<= l2_helper_ctas_max(chains))
};
// Bytes (from a 256-byte aligned base) of the zeroed part, of the carry rows after it, and of the
// whole ring for `chains` chains.
KDA_ONEPASS_HD constexpr int64_t l2_helpers_mailbox_offset(int64_t chains) {
  return (chains * 3 * 4 + 4 + 7) / 8 * 8;
}
KDA_ONEPASS_HD constexpr int64_t l2_helpers_zeroed_bytes(int64_t chains) {
  return (l2_helpers_mailbox_offset(chains) + chains * kL2HelperMailbox * 8 + 255) / 256 * 256;
}
KDA_ONEPASS_HD constexpr int64_t l2_helpers_carry_bytes(int64_t chains) {
  return chains * kL2HelperCarryRows * kDim * 8;
}
KDA_ONEPASS_HD constexpr int64_t l2_helpers_bytes(int64_t chains) {
  return l2_helpers_zeroed_bytes(chains) + l2_helpers_carry_bytes(chains) +
         l2_helper_ctas_max(chains) * kL2HelperBuilders * kL2HelperRecords * kRecordBytes;
}
inline L2HelperRing l2_helper_ring(void* base, int chains, int helper_ctas) {
  auto* bytes = static_cast<unsigned char*>(base);
  auto* words = reinterpret_cast<uint32_t*>(bytes);
  const int64_t carry_at = l2_helpers_zeroed_bytes(chains);
  return {words,
          words + chains,
          words + 2 * static_cast<int64_t>(chains),
          words + 3 * static_cast<int64_t>(chains),
          reinterpret_cast<unsigned long long*>(bytes + l2_helpers_mailbox_offset(chains)),
          reinterpret_cast<unsigned long long*>(bytes + carry_at),
          bytes + carry_at + l2_helpers_carry_bytes(chains),
          chains,
          helper_ctas};
}

// The library's configuration (the raw-input kernel when args.raw.any()): grid num_seqs x heads
// (rank-major), 512 threads; returns the launch's error (cudaErrorInvalidValue for strides beyond
// row_offsets_fit).
cudaError_t launch(const OnepassArgs& args, cudaStream_t stream);

// The value-halves cluster (halves.cuh) for few chains: two CTAs per chain, each with half the
// state's value rows, both building the chain's sub-chunks (six builders a chain). The contract's
// inputs on bf16 chain operands (args.operands bf16; staged or not): launch's bf16 chain bit for
// bit; raw inputs (args.raw.any()) unstaged on V_new's bf16 pair (args.operands bf16_vnew_pairs,
// the gate's running sums handed across the pair): launch's raw kernel on that chain bit for bit.
// Any other combination: cudaErrorInvalidValue. Grid 2 x num_seqs x heads in clusters of two.
cudaError_t launch_value_halves(const OnepassArgs& args, cudaStream_t stream);
// How many of the value-halves clusters the current device runs at once (0 when it runs none, or
// the query fails: the error is cleared).
int value_halves_resident_clusters();

// The helper cluster (helpers.cuh) for few chains: clusters of kHelperChains chain CTAs (the
// library's CTA: its chain and three builders) and one helper CTA whose three builders build every
// kHelperRound-th sub-chunk of those chains, copied by bulk copy into the chain's ring; staged
// builds in the helper (build16.cuh StagedRecord). bf16 chain operands, the contract's inputs only
// (else cudaErrorInvalidValue). The same bits as launch's bf16 chain. Grid kHelperClusterCtas x
// ceil(num_seqs x heads / kHelperChains) in clusters of kHelperClusterCtas; chain (row, head)
// r * heads + h on chain CTA (r * heads + h) % kHelperChains of cluster (r * heads + h) /
// kHelperChains.
cudaError_t launch_helpers(const OnepassArgs& args, cudaStream_t stream);
// How many helper clusters the current device runs at once (0 when it runs none, or the query
// fails: the error is cleared).
int helper_resident_clusters();

// The L2 helpers (l2_helpers.cuh) with their ring at `ring_base` (256-byte aligned,
// l2_helpers_bytes(num_seqs x heads) bytes), prepared here on `stream` as L2HelperRing says:
// grid num_seqs x heads chain CTAs (rank-major as launch's) and `helper_ctas` helper CTAs (< 0:
// the SMs the chains leave on the current device), never more than l2_helper_ctas_max. The
// contract's inputs on bf16 chain operands: launch's bf16 chain bit for bit; raw inputs on V_new's
// bf16 pair (args.operands bf16_vnew_pairs): launch's raw kernel on that chain bit for bit; with
// any number of helper CTAs, none included. Any other combination: cudaErrorInvalidValue.
cudaError_t launch_l2_helpers(const OnepassArgs& args, void* ring_base, int helper_ctas,
                              cudaStream_t stream);

// order[r] = the sequence of rank r by decreasing length (cu[s + 1] - cu[s]), ties by index: a
// deterministic longest-first schedule for the one-pass grid. `order` holds num_seqs int32.
cudaError_t launch_order_by_length(const int32_t* cu, int num_seqs, int32_t* order,
                                   cudaStream_t stream);

}  // namespace kda::detail::onepass
