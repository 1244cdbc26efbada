// Which forward kernel a chunk_forward call runs: the one-pass forward (onepass/onepass.h: one CTA
// per (sequence, head), the factors built beside the chain, nothing round-trips through memory) or
// the two-kernel forward (PREP, then SCAN, through the workspace's records). The one pass is
// ~0.78x the two kernels' SM time per token, but a chain is latency-bound (~2 us a 16-token
// sub-chunk), so it wins only when its chains fill the SMs: a time model of both, from H200
// measurements (docs/perf-notes.md "The one-pass forward in the library"), picks per call, among
// the calls the one pass keeps within the long-memory precision bar (one_pass_precise_enough).
// Host only, no CUDA calls: the caller passes the SM count.
#pragma once

#include <cstdint>
#include <vector>

#include "kda/kda.h"

namespace kda::detail {

enum class ForwardKernel { two_kernel, one_pass };

// Both kernels' estimated time for one problem (microseconds on an H200-class SM).
struct ForwardEstimate {
  double one_pass_us = 0;
  double two_kernel_us = 0;
};

// Whether the one-pass kernel reads these inputs: every input option (the contract's and the raw
// ones) with token strides whose 16 rows fit 32-bit offsets (below 2^26 elements); larger strides
// run on the two kernels.
bool one_pass_reads(const ForwardParams& p);

// The model, for `lengths` (tokens per sequence; the same for each of `heads`) on `sm_count` SMs,
// for the contract's inputs (the only ones the library gives the one pass,
// one_pass_precise_enough):
//   one pass    the chains (heads x sequences) longest first on one CTA per SM (list
//               scheduling, simulated; beyond 16,384 chains its bound total / SMs + longest),
//               each chain 2.0 us a 16-token sub-chunk plus 4 us to fill the ring and move the
//               state;
//   two kernels PREP 7.3 SM-us a 64-token chunk-head, then SCAN the larger of its latency
//               (2.07 us a chunk of the longest chain) and its throughput (2.8 SM-us a chunk-head).
// `lengths` may also come as groups of equal lengths (a dense batch is one group).
struct LengthGroup {
  int64_t length = 0;  // tokens
  int64_t count = 0;   // sequences
};
ForwardEstimate estimate_forward_grouped(std::vector<LengthGroup> groups, int heads, int sm_count);
ForwardEstimate estimate_forward(const std::vector<int64_t>& lengths, int heads, int sm_count);

// Whether the one pass keeps these inputs within the long-memory bar (out and final state rel-RMS
// <= 4e-3 on every checked problem): its state products run on bf16 operands, which gives 3.7e-3
// on the fused path (q's norm folded in fp32) but 4.0 - 4.3e-3 on the explicit path (q rounded to
// bf16 after its norm) and with raw inputs (H100, 6a46b5f); so the fused path with the contract's
// gate, beta and normalized k only, until the chain's operands carry more precision.
bool one_pass_precise_enough(const ForwardParams& p);

// The kernel chunk_forward runs for validated params on a device of `sm_count` SMs: the one pass
// when it reads the inputs, is precise enough for them, and its estimate is below 0.95x the two
// kernels'.
ForwardKernel choose_forward_kernel(const ForwardParams& p, int sm_count);

}  // namespace kda::detail
