// Which forward kernel a chunk_forward call runs: the one-pass forward (onepass/onepass.h: one CTA
// per (sequence, head), the factors built beside the chain, nothing round-trips through memory) or
// the two-kernel forward (PREP, then SCAN, through the workspace's records). The one pass is
// ~0.78x the two kernels' SM time per token, but a chain is latency-bound (~1.8 us a 16-token
// sub-chunk), so it wins only when its chains fill the SMs: a time model of both, from Hopper
// measurements (docs/perf-notes.md "The one-pass forward in the library" and after), picks per
// call, with the one pass's step for the chain operands its inputs need (one_pass_operands).
// Host only, no CUDA calls: the caller passes the SM count.
#pragma once

#include <cstdint>
#include <vector>

#include "kda/kda.h"
#include "onepass/record16.h"

namespace kda::detail {

// one_pass_halves: the one pass's value-halves cluster (onepass.h launch_value_halves: two CTAs
// per chain, six builders a chain) for few chains with the fused q norm (the contract's inputs on
// bf16 operands, raw inputs on V_new's bf16 pair). (The lab's helper
// cluster, one_pass16_helpers, is no candidate: measured slower than the two kernels at f067e65.)
enum class ForwardKernel { two_kernel, one_pass, one_pass_halves };

// The kernels' estimated time for one problem (microseconds on an H200-class SM); the value
// halves' is +inf where they do not run (other operands, or no cluster fits the device).
struct ForwardEstimate {
  double one_pass_us = 0;
  double two_kernel_us = 0;
  double value_halves_us = 0;
};

// Whether the one-pass kernel reads these inputs: every input option (the contract's and the raw
// ones) with token strides whose 16 rows fit 32-bit offsets (below 2^26 elements); larger strides
// run on the two kernels.
bool one_pass_reads(const ForwardParams& p);

// A one-pass step (16 tokens, three builders beside the chain) per chain operands and inputs, in
// microseconds: measured on an H100 at b0125ab (results/h200/2026-12-06-b0125ab-f16-ahead; the
// one pass runs within 1 % on the H100 and the H200: 790 / 785 us on h96-uniform8 at
// 6a46b5f / ff48ca9). The bf16 chain on the fused contract path (builder-bound); the fp16 chain
// under row scales, whose scale work makes the chain the bound, on contract inputs and on raw
// ones (whose builders also activate the gate, beta and k's norm).
inline constexpr double kOnePassStepUs = 1.8;
inline constexpr double kOnePassF16StepUs = 2.15;
inline constexpr double kOnePassF16RawStepUs = 3.8;
// Raw inputs with the fused q norm on bf16 operands and V_new as a bf16 pair (ChainOperands::
// bf16_vnew_pairs): measured on an H100 at f067e65 (results/h200/2026-12-07-f067e65-helpers-
// vpairs-h100: h96-uniform8 911 us, h64-uniform8 616 us: 6 and 4 rounds of 64 steps).
inline constexpr double kOnePassVnewPairsRawStepUs = 2.33;
// Raw inputs cost the two kernels this much more than the contract's (the gate's activation and
// k's norm in PREP): 1.10 on every contract shape at f067e65 (H100; library raw against
// v2w_two_kernel fused).
inline constexpr double kRawTwoKernelFactor = 1.10;
// The value-halves cluster's step: six builders and five ring buffers a chain, each record
// copied to the peer CTA by bulk copy; measured on an H100 at 4f12d43 (h64-fixed fused 544.9 us:
// (544.9 - 4) / 512; results/h200/2026-12-07-4f12d43-halves-bulk-h100). On chip, like the one
// pass, so the H200's should be the same.
inline constexpr double kValueHalvesStepUs = 1.06;
// The value halves on raw inputs with the fused q norm (V_new as a bf16 pair, the gate's running
// sums carried across the pair): measured on an H100 at 4c3203f (h64-fixed raw 688.3 us:
// (688.3 - 4) / 512; results/h200/2026-12-07-4c3203f-l2-helpers-raw-halves-h100). The raw
// builders, not the pair's carry, set it: +26 % over the fused halves', as the raw one pass's
// builds cost over the fused one's.
inline constexpr double kValueHalvesRawStepUs = 1.34;
// Whether chunk_forward offers the value halves to the choice (forward.cu make_plan); the model
// then chooses as choose_forward_kernel says.
inline constexpr bool kLibraryTakesValueHalves = true;

// The two kernels move their records through DRAM (1,440 B a token-head written and read), so on
// a device of less DRAM bandwidth they take longer while the one pass (on chip) does not: their
// H200 times (its HBM3e: 4.8e12 B/s) times (4.8e12 / bandwidth)^0.35, never less than 1 (the
// driver's figures, as kda-bench's device line prints them: H200 4.814e12, H100 80GB HBM3
// 3.352e12). The exponent is fitted to the H100: its two kernels took 1.11-1.16x the
// H200's on the six contract shapes (b0125ab against ff48ca9, fused path), the one pass the same
// within 1 % (6a46b5f against ff48ca9).
inline constexpr double kH200DramBytesPerS = 4.8e12;
inline constexpr double kTwoKernelBandwidthExponent = 0.35;
double two_kernel_slowdown(double dram_bytes_per_s);

// The model, for `lengths` (tokens per sequence; the same for each of `heads`) on `sm_count` SMs:
//   one pass    the chains (heads x sequences) longest first on one CTA per SM (list
//               scheduling, simulated; beyond 16,384 chains its bound total / SMs + longest),
//               each chain `step_us` a 16-token sub-chunk plus 4 us to fill the ring and move
//               the state;
//   two kernels PREP 7.3 SM-us a 64-token chunk-head, then SCAN the larger of its latency
//               (2.07 us a chunk of the longest chain) and its throughput (2.8 SM-us a chunk-head);
//   value halves the one pass's schedule on `halves_clusters` cluster slots (the clusters the
//               device runs at once; 0: none) at `halves_step_us` a sub-chunk
//               (kValueHalvesStepUs, or kValueHalvesRawStepUs for raw inputs).
// `lengths` may also come as groups of equal lengths (a dense batch is one group).
struct LengthGroup {
  int64_t length = 0;  // tokens
  int64_t count = 0;   // sequences
};
// The two kernels' estimate is the contract inputs' (choose_forward_kernel multiplies it by
// kRawTwoKernelFactor for raw inputs), at `dram_bytes_per_s` (two_kernel_slowdown).
ForwardEstimate estimate_forward_grouped(std::vector<LengthGroup> groups, int heads, int sm_count,
                                         double step_us = kOnePassStepUs,
                                         double dram_bytes_per_s = kH200DramBytesPerS,
                                         int halves_clusters = 0,
                                         double halves_step_us = kValueHalvesStepUs);
ForwardEstimate estimate_forward(const std::vector<int64_t>& lengths, int heads, int sm_count,
                                 double step_us = kOnePassStepUs,
                                 double dram_bytes_per_s = kH200DramBytesPerS,
                                 int halves_clusters = 0,
                                 double halves_step_us = kValueHalvesStepUs);

// The chain operands that keep the one pass within the long-memory bar (out and final state
// rel-RMS <= 4e-3 on every checked problem) for these inputs. bf16 operands give 3.7 - 3.9e-3 on
// the fused path (q's norm folded in fp32) but 4.0 - 4.3e-3 on the explicit path (q rounded to
// bf16 after its norm) and with raw inputs (H100, 6a46b5f and b0125ab); V_new as a bf16 pair
// (bf16_vnew_pairs) gives 3.81e-3 worst with raw inputs and the fused q norm, but 3.996e-3 on the
// explicit path (f067e65: no margin). So: bf16 (the faster chain) for the fused path with the
// contract's gate, beta and normalized k; bf16_vnew_pairs for raw inputs with the fused q norm
// (0.92-0.94x the bf16 chain's time there: its builders do not spill); fp16 under row scales
// (worst 3.6e-3 explicit, 3.1e-3 raw; b0125ab) for every other call.
onepass::ChainOperands one_pass_operands(const ForwardParams& p);
// The one pass's step for those operands and inputs (kOnePass*StepUs).
double one_pass_step_us(const ForwardParams& p);
// Whether the value halves run these inputs: the fused q norm, so one_pass_operands is bf16 (the
// contract's inputs) or bf16_vnew_pairs (raw inputs); the explicit path's fp16 chain is not
// theirs.
bool value_halves_run(const ForwardParams& p);

// The kernel chunk_forward runs for validated params on a device of `sm_count` SMs,
// `dram_bytes_per_s` of DRAM bandwidth and room for `halves_clusters` value-halves clusters at
// once: the one pass when it reads the inputs and its estimate (one_pass_step_us) is below 0.95x
// the two kernels' (raw inputs: times kRawTwoKernelFactor); the value halves, where they run
// (value_halves_run), when theirs is below 0.95x the better of those two.
ForwardKernel choose_forward_kernel(const ForwardParams& p, int sm_count,
                                    double dram_bytes_per_s = kH200DramBytesPerS,
                                    int halves_clusters = 0);
// The kernel the library's chunk_forward runs for validated `p` on the current device: its plan
// (forward.cu make_plan, which asks the device for its SMs, DRAM bandwidth and, where the value
// halves could run, their resident clusters). Defined in forward.cu (CUDA calls); for tests.
ForwardKernel library_forward_kernel(const ForwardParams& p);

}  // namespace kda::detail
