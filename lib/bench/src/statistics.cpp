#include "kda/bench/statistics.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kda::bench {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

double mean(std::span<const double> samples) {
  if (samples.empty()) return kNaN;
  double sum = 0.0;
  for (double x : samples) sum += x;
  return sum / static_cast<double>(samples.size());
}

double stdev(std::span<const double> samples) {
  if (samples.size() < 2) return kNaN;
  const double m = mean(samples);
  double ss = 0.0;  // two-pass: no cancellation for samples that are all close to the mean
  for (double x : samples) ss += (x - m) * (x - m);
  return std::sqrt(ss / static_cast<double>(samples.size() - 1));
}

double relative_stdev(std::span<const double> samples) {
  if (static_cast<int64_t>(samples.size()) < kMinSamplesForNoise) return kInf;
  const double m = mean(samples);
  if (!std::isfinite(m) || m == 0.0) return kNaN;
  return stdev(samples) / m;
}

double quantile_rank(std::span<const double> sorted, double p) {
  if (sorted.empty()) return kNaN;
  const double pos = std::round(std::clamp(p, 0.0, 1.0) * static_cast<double>(sorted.size() - 1));
  return sorted[static_cast<size_t>(pos)];
}

double quantile_linear(std::span<const double> sorted, double p) {
  if (sorted.empty()) return kNaN;
  const double pos = std::clamp(p, 0.0, 1.0) * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return sorted[lo] + frac * (sorted[hi] - sorted[lo]);
}

double geomean(std::span<const double> values) {
  if (values.empty()) return kNaN;
  double log_sum = 0.0;
  for (double v : values) {
    if (!std::isfinite(v) || v <= 0.0) return kNaN;
    log_sum += std::log(v);
  }
  return std::exp(log_sum / static_cast<double>(values.size()));
}

double correlation(std::span<const double> x, std::span<const double> y) {
  const size_t n = std::min(x.size(), y.size());
  double sx = 0, sy = 0;
  int64_t pairs = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i]) || !std::isfinite(y[i])) continue;
    sx += x[i];
    sy += y[i];
    ++pairs;
  }
  if (pairs < 3) return kNaN;
  const double mx = sx / static_cast<double>(pairs), my = sy / static_cast<double>(pairs);
  double cxy = 0, cxx = 0, cyy = 0;  // two passes: no cancellation in the centred sums
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i]) || !std::isfinite(y[i])) continue;
    cxy += (x[i] - mx) * (y[i] - my);
    cxx += (x[i] - mx) * (x[i] - mx);
    cyy += (y[i] - my) * (y[i] - my);
  }
  if (!(cxx > 0.0) || !(cyy > 0.0)) return kNaN;
  return std::clamp(cxy / std::sqrt(cxx * cyy), -1.0, 1.0);
}

Summary summarize(std::span<const double> samples) {
  Summary s;
  s.n = static_cast<int64_t>(samples.size());
  if (samples.empty()) {
    s.mean = s.stdev = s.noise = s.min = s.max = s.median = s.p20 = s.p80 = kNaN;
    s.q1 = s.q3 = s.iqr = s.iqr_rel = kNaN;
    return s;
  }
  std::vector<double> sorted(samples.begin(), samples.end());
  std::sort(sorted.begin(), sorted.end());
  s.mean = mean(sorted);
  s.stdev = stdev(sorted);
  s.noise = relative_stdev(sorted);
  s.min = sorted.front();
  s.max = sorted.back();
  s.median = quantile_linear(sorted, 0.5);
  s.p20 = quantile_linear(sorted, 0.2);
  s.p80 = quantile_linear(sorted, 0.8);
  s.q1 = quantile_rank(sorted, 0.25);
  s.q3 = quantile_rank(sorted, 0.75);
  s.iqr = s.q3 - s.q1;
  s.iqr_rel = s.median != 0.0 ? s.iqr / s.median : kNaN;
  return s;
}

}  // namespace kda::bench
