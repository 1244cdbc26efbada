#include "kda/bench/sampling.h"

#include <algorithm>
#include <cmath>

namespace kda::bench {

const char* to_string(SampleMethod method) {
  switch (method) {
    case SampleMethod::call: return "call";
    case SampleMethod::graph: return "graph";
    case SampleMethod::graph_batch: return "graph_batch";
  }
  return "?";
}

bool is_short_call(double estimate_s, const SamplingConfig& config) {
  if (std::isnan(estimate_s)) return false;
  return estimate_s < config.min_sample_s;
}

int64_t calls_per_sample(double estimate_s, const SamplingConfig& config) {
  if (!is_short_call(estimate_s, config)) return 1;
  const int64_t most = std::max<int64_t>(config.max_calls, 2);
  if (!(estimate_s > 0.0)) return most;
  const double wanted = std::ceil(config.min_sample_s / estimate_s);
  if (!(wanted < static_cast<double>(most))) return most;  // also catches +inf
  return std::max<int64_t>(static_cast<int64_t>(wanted), 2);
}

int64_t refine_calls_per_sample(int64_t calls, double sample_s, const SamplingConfig& config) {
  calls = std::max<int64_t>(calls, 1);
  if (std::isnan(sample_s)) return calls;
  const int64_t wanted = calls_per_sample(per_call_time(sample_s, calls), config);
  return std::max(calls, wanted);
}

int64_t samples_per_batch(double sample_s, const SamplingConfig& config) {
  const int64_t most = std::max<int64_t>(config.max_batch, 1);
  if (!(sample_s > 0.0) || !std::isfinite(sample_s)) return 1;
  const double target = std::max(config.batch_target_s, 0.0);
  const double n = std::round(target / sample_s);
  if (!(n < static_cast<double>(most))) return most;
  return std::max<int64_t>(static_cast<int64_t>(n), 1);
}

double per_call_time(double sample_s, int64_t calls) {
  return sample_s / static_cast<double>(std::max<int64_t>(calls, 1));
}

}  // namespace kda::bench
