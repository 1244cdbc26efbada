// Throttle detection without touching the card (pure CPU decision; the GPU side measures the
// SM clock of each sample with a timestamp kernel, see gpu_timing.h).
//
// A sample whose measured SM clock is below `threshold` × the default SM clock
// (cudaDevAttrClockRate) is discarded and the host sleeps before the next sample:
// `recovery_delay_s` for the first `grace` consecutive discards, then 1.5× the previous delay
// each time, capped at `max_delay_s`. An accepted sample resets the schedule. A sample whose
// clock could not be measured (NaN, <= 0) or a device without a default clock is accepted.
#pragma once

#include <cstdint>

namespace kda::bench {

struct ThrottleConfig {
  double threshold = 0.75;        // fraction of the default SM clock
  double recovery_delay_s = 0.05;
  double growth = 1.5;
  double max_delay_s = 0.5;
  int64_t grace = 2;              // consecutive discards before the delay starts growing
};

struct ThrottleDecision {
  bool discard = false;
  double sleep_s = 0.0;  // cool-down before the next sample (0 when accepted)
};

class ThrottleMonitor {
 public:
  ThrottleMonitor(const ThrottleConfig& config, double default_clock_hz);

  ThrottleDecision judge(double measured_clock_hz);

  int64_t discards() const { return discards_; }
  int64_t streak() const { return streak_; }
  double default_clock_hz() const { return default_clock_hz_; }

 private:
  ThrottleConfig config_;
  double default_clock_hz_;
  int64_t discards_ = 0, streak_ = 0;
  double delay_s_ = 0.0;
};

}  // namespace kda::bench
