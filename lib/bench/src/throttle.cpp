#include "kda/bench/throttle.h"

#include <algorithm>
#include <cmath>

namespace kda::bench {

ThrottleMonitor::ThrottleMonitor(const ThrottleConfig& config, double default_clock_hz)
    : config_(config), default_clock_hz_(default_clock_hz) {}

ThrottleDecision ThrottleMonitor::judge(double measured_clock_hz) {
  const bool measurable = std::isfinite(measured_clock_hz) && measured_clock_hz > 0.0 &&
                          std::isfinite(default_clock_hz_) && default_clock_hz_ > 0.0;
  if (!measurable || measured_clock_hz >= config_.threshold * default_clock_hz_) {
    streak_ = 0;
    delay_s_ = 0.0;
    return {};
  }
  ++discards_;
  ++streak_;
  if (streak_ <= config_.grace || delay_s_ <= 0.0) {
    delay_s_ = config_.recovery_delay_s;
  } else {
    delay_s_ = std::min(delay_s_ * config_.growth, config_.max_delay_s);
  }
  return {true, delay_s_};
}

}  // namespace kda::bench
