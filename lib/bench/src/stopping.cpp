#include "kda/bench/stopping.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>

#include "kda/bench/statistics.h"

namespace kda::bench {

const char* to_string(StopReason reason) {
  switch (reason) {
    case StopReason::none: return "running";
    case StopReason::noise_target: return "noise";
    case StopReason::noise_stable: return "stable";
    case StopReason::non_finite: return "non_finite";
    case StopReason::timeout: return "timeout";
    case StopReason::fixed_budget: return "budget";
  }
  return "?";
}

bool is_converged(StopReason reason) {
  return reason == StopReason::noise_target || reason == StopReason::noise_stable ||
         reason == StopReason::fixed_budget;
}

StdrelCriterion::StdrelCriterion(const StoppingConfig& config) : config_(config) {}

double StdrelCriterion::noise() const {
  if (count_ < kMinSamplesForNoise) return std::numeric_limits<double>::infinity();
  if (!std::isfinite(mean_) || mean_ == 0.0) return std::numeric_limits<double>::quiet_NaN();
  const double var = m2_ / static_cast<double>(count_ - 1);
  return std::sqrt(std::max(var, 0.0)) / mean_;
}

void StdrelCriterion::add_sample(double seconds, int64_t calls) {
  if (!std::isfinite(seconds) || seconds < 0.0) {
    ++rejected_;
    ++nonfinite_streak_;
    return;
  }
  ++count_;
  total_ += seconds * static_cast<double>(std::max<int64_t>(calls, 1));
  const double delta = seconds - mean_;
  mean_ += delta / static_cast<double>(count_);
  m2_ += delta * (seconds - mean_);

  const double current = noise();
  if (count_ < kMinSamplesForNoise) {
    nonfinite_streak_ = 0;  // +inf here only means "too few samples yet"
    return;
  }
  if (!std::isfinite(current)) {
    ++nonfinite_streak_;
    return;
  }
  nonfinite_streak_ = 0;
  noise_history_.push_back(current);

  const auto history = static_cast<int64_t>(noise_history_.size());
  if (history > kStableMinHistory && history % kStableCheckEvery == 0) {
    const int64_t window = std::min(history, kStableWindow);
    const std::span<const double> recent(noise_history_.data() + (history - window),
                                         static_cast<size_t>(window));
    const double spread = relative_stdev(recent);
    stable_ = std::isfinite(spread) && spread < kStableTolerance;
  }
}

StopReason StdrelCriterion::check(double wall_elapsed_s) const {
  if (nonfinite_streak_ >= kMaxNonFiniteStreak) return StopReason::non_finite;
  if (count_ >= config_.min_samples && total_ >= config_.min_time_s) {
    const double current = noise();
    if (std::isfinite(current) && current < config_.max_noise) return StopReason::noise_target;
    if (stable_) return StopReason::noise_stable;
  }
  if (wall_elapsed_s >= config_.timeout_s) return StopReason::timeout;
  return StopReason::none;
}

}  // namespace kda::bench
