#include "kda/harness/progress.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace kda::harness {

double reference_work(int64_t token_heads, int64_t key_dim, int64_t value_dim, int64_t pairs,
                      int threads) {
  const int64_t parallel = std::max<int64_t>(1, std::min<int64_t>(threads, pairs));
  return static_cast<double>(token_heads) * static_cast<double>(key_dim) *
         static_cast<double>(value_dim) / static_cast<double>(parallel);
}

ReferenceLoad reference_load(const ShapeSpec& shape, int threads) {
  ReferenceLoad load;
  load.token_heads = shape.active_tokens() * shape.heads;
  load.work = reference_work(load.token_heads, shape.key_dim, shape.value_dim,
                             shape.num_sequences() * shape.heads, threads);
  return load;
}

ReferenceLoad reference_load(const HostInputs& inputs, int threads) {
  ReferenceLoad load;
  const int64_t active = inputs.cu_seqlens.empty() ? inputs.batch * inputs.tokens
                                                   : int64_t{inputs.cu_seqlens.back()};
  load.token_heads = active * inputs.heads;
  load.work = reference_work(load.token_heads, inputs.key_dim, inputs.value_dim,
                             inputs.num_states() * inputs.heads, threads);
  return load;
}

void ReferenceEta::record(double work, double seconds) {
  if (!(work > 0) || !(seconds >= 0) || !std::isfinite(seconds)) return;
  work_ += work;
  seconds_ += seconds;
}

double ReferenceEta::remaining(const std::vector<double>& works, std::size_t first) const {
  double total = 0.0;
  for (std::size_t i = first; i < works.size(); ++i) total += estimate(works[i]);
  return total;
}

namespace {

// "about 12 s", "about 3.5 min"
std::string about(double seconds) {
  if (seconds < 90.0) return fmt::format("about {:.0f} s", std::max(1.0, seconds));
  return fmt::format("about {:.1f} min", seconds / 60.0);
}

}  // namespace

std::optional<std::string> reference_start_line(std::size_t index, std::size_t count,
                                                const std::string& id, int64_t token_heads,
                                                double estimate_seconds,
                                                double run_remaining_seconds) {
  if (!(estimate_seconds >= kAnnounceSeconds)) return std::nullopt;
  std::string line = fmt::format("[{}/{}] {}: CPU references for {} token-heads, {}", index + 1,
                                 count, id, token_heads, about(estimate_seconds));
  if (index + 1 < count) line += "; " + about(run_remaining_seconds) + " left in this run";
  return line;
}

}  // namespace kda::harness
