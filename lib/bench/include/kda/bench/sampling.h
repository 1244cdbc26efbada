// How one timing sample is taken in the warm and graph modes of kda-bench (pure CPU decisions;
// the GPU loops in gpu_timing.h follow them, tests/bench/test_bench_core.cpp pins them).
//
// Why short calls need their own method: in the warm mode a sample is one event pair around
// calls launched by the host. A call whose GPU time is about the host's cost of launching it
// (the forward's `zero_tail` stage: ~2.6 us on the GPU, ~4-5 us of host work per launch)
// drains the stream queue faster than the host fills it, so after the first samples the events
// time the host's launch rate, with its jitter, instead of the GPU: the H200 run of 47f6117 saw
// ~18 % noise and medians equal to the host time per call. Putting more eager calls between one
// event pair does not help (the GPU still waits for each launch). A CUDA graph replay does: its
// calls are already on the device, so they run back to back whatever the host does.
//
// The rule, per row (warm and graph modes):
//  * estimate = GPU time of one call from the warm-up (one event pair around one call; it
//    includes the launch latency, so it over-estimates short calls).
//  * estimate >= min_sample_s (200 us): one call per event pair, as before — an eager launch in
//    the warm mode (SampleMethod::call), one replay of the call's graph in the graph mode
//    (SampleMethod::graph). The whole-path rows and the long stages are timed this way.
//  * shorter: N back-to-back calls are captured in one CUDA graph and a sample is one replay
//    between an event pair (SampleMethod::graph_batch); N = ceil(min_sample_s / estimate) in
//    [2, max_calls]. N is refined from the replay time of the captured graph (grow only): the
//    warm-up estimate carries the launch latency, the replay does not.
//  * the per-call time of a sample is sample / N (the statistics, the CSV and the noise are per
//    call); the stopping rule's min_time counts the sample's GPU time, per-call time × N.
//  * samples per batch (one blocking-kernel release and one clock reading per batch) =
//    round(batch_target_s / sample time), in [1, max_batch].
#pragma once

#include <cstdint>

namespace kda::bench {

enum class SampleMethod {
  call,         // one eager call between an event pair (warm >= min_sample_s, cold, triton)
  graph,        // one replay of the call's CUDA graph between an event pair (graph mode)
  graph_batch,  // one replay of a CUDA graph of N back-to-back calls; sample / N per call
};
const char* to_string(SampleMethod method);  // "call", "graph", "graph_batch"

struct SamplingConfig {
  double min_sample_s = 200e-6;  // calls shorter than this are timed as graph batches
  int64_t max_calls = 1024;      // calls in one graph batch, at most
  double batch_target_s = 0.025; // GPU time of one batch of samples
  int64_t max_batch = 64;        // samples in one batch, at most
};

// True when a call of this estimated GPU time is timed as a graph batch: estimate < min_sample_s
// (an estimate <= 0 counts as short; NaN does not: it is timed one call per sample).
bool is_short_call(double estimate_s, const SamplingConfig& config);

// Calls per sample for a call of this estimated GPU time: 1 when not short, else
// ceil(min_sample_s / estimate) clamped to [2, max_calls] (max_calls for an estimate <= 0).
int64_t calls_per_sample(double estimate_s, const SamplingConfig& config);

// After timing a graph of `calls` calls (one replay took sample_s): the calls a sample needs,
// never fewer than `calls` (grow only, so the refinement ends), at most max_calls.
int64_t refine_calls_per_sample(int64_t calls, double sample_s, const SamplingConfig& config);

// Samples per batch for samples of sample_s each: round(batch_target_s / sample_s) clamped to
// [1, max_batch] (1 when sample_s is not > 0).
int64_t samples_per_batch(double sample_s, const SamplingConfig& config);

// Per-call time of a sample that spans `calls` calls (calls < 1 counts as 1).
double per_call_time(double sample_s, int64_t calls);

}  // namespace kda::bench
