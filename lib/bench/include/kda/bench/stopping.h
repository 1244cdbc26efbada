// Adaptive stopping rule of kda-bench (nvbench's "stdrel" method, in our own code).
//
// Fed one GPU-time sample at a time: the per-call time of the sample and the number of calls it
// spans (1, or N for a graph batch; sampling.h). The measurement stops when
//   1. at least `min_samples` samples were accepted AND the GPU time they span (per-call time x
//      calls, summed) is at least `min_time_s`, and then
//      a. the noise (relative stdev of all accepted samples) is below `max_noise`
//         -> StopReason::noise_target, or
//      b. the noise has stabilised above the target: once more than kStableMinHistory noise
//         estimates exist, every kStableCheckEvery samples we take the relative stdev of the
//         last (at most) kStableWindow noise estimates; below kStableTolerance (5 %) the noise
//         will not improve by waiting -> StopReason::noise_stable; or
//   2. kMaxNonFiniteStreak consecutive samples were unusable (a sample that is NaN, infinite or
//      negative, or a noise estimate that is not finite, e.g. all-zero times)
//      -> StopReason::non_finite (not converged); or
//   3. the wall time given by the caller reached `timeout_s` -> StopReason::timeout (not
//      converged; reported as "did not converge").
// Rules 1–2 are checked before the timeout, so a run that converges on its last sample before
// the timeout counts as converged. The class is pure: the caller passes the wall time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kda::bench {

struct StoppingConfig {
  int64_t min_samples = 10;
  double min_time_s = 0.5;   // GPU time spanned by the accepted samples
  double max_noise = 0.005;  // relative stdev (fraction): 0.5 %
  double timeout_s = 15.0;   // wall time of the measurement loop
};

enum class StopReason { none, noise_target, noise_stable, non_finite, timeout, fixed_budget };
const char* to_string(StopReason reason);  // "running", "noise", "stable", "non_finite", ...
// True for the reasons that count as converged (noise_target, noise_stable, fixed_budget).
bool is_converged(StopReason reason);

class StdrelCriterion {
 public:
  static constexpr int64_t kStableMinHistory = 64;
  static constexpr int64_t kStableCheckEvery = 16;
  static constexpr int64_t kStableWindow = 512;
  static constexpr double kStableTolerance = 0.05;
  static constexpr int64_t kMaxNonFiniteStreak = 64;

  explicit StdrelCriterion(const StoppingConfig& config = {});

  // One sample: its per-call GPU time in seconds and the calls it spans (the sample's GPU time
  // is seconds x calls; calls < 1 counts as 1). The noise is that of the per-call times.
  // Unusable samples are counted, never accumulated.
  void add_sample(double seconds, int64_t calls = 1);

  // StopReason::none while the measurement should go on.
  StopReason check(double wall_elapsed_s) const;

  int64_t samples() const { return count_; }             // accepted samples
  int64_t rejected_samples() const { return rejected_; }
  double total_time_s() const { return total_; }  // GPU time spanned (per-call x calls)
  double mean_s() const { return mean_; }
  // Current relative stdev of the accepted samples (+inf below 5 samples, NaN for a zero mean).
  double noise() const;
  bool noise_stable() const { return stable_; }
  const StoppingConfig& config() const { return config_; }

 private:
  StoppingConfig config_;
  int64_t count_ = 0, rejected_ = 0, nonfinite_streak_ = 0;
  double total_ = 0.0, mean_ = 0.0, m2_ = 0.0;  // Welford running mean / sum of squares
  std::vector<double> noise_history_;           // finite noise estimates, one per sample
  bool stable_ = false;
};

}  // namespace kda::bench
