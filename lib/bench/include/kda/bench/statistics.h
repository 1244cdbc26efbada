// Sample statistics for kda-bench (pure CPU).
//
// Rules, chosen so our numbers line up with the two methods we reproduce:
//  * median: the usual one (mean of the two middle values for an even count) — the same as
//    linear interpolation at p = 0.5.
//  * p20 / p80: linear interpolation between closest ranks, position p·(n−1) in the sorted
//    samples (torch.quantile's default, which is what Triton's do_bench returns for quantiles).
//  * q1 / q3: nvbench's rank rule, sorted[round(p·(n−1))] with no interpolation.
//  * stdev: Bessel-corrected (n−1). noise = stdev / mean; it needs at least
//    kMinSamplesForNoise samples and is +inf below that (a noise from 2 samples means nothing).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kda::bench {

inline constexpr int64_t kMinSamplesForNoise = 5;

double mean(std::span<const double> samples);    // NaN when empty
double stdev(std::span<const double> samples);   // Bessel; NaN when n < 2
// stdev / mean; +inf when n < kMinSamplesForNoise; NaN when the mean is 0 or not finite.
double relative_stdev(std::span<const double> samples);

// Both take samples sorted ascending and p in [0, 1]; NaN when empty.
double quantile_rank(std::span<const double> sorted, double p);    // nvbench rank rule
double quantile_linear(std::span<const double> sorted, double p);  // torch.quantile "linear"

// Geometric mean; NaN when empty or when any value is not finite or not > 0.
double geomean(std::span<const double> values);

// Pearson correlation of x and y over the indices where both are finite (spans of equal
// length); NaN below 3 such pairs or when either side has no spread.
double correlation(std::span<const double> x, std::span<const double> y);

struct Summary {
  int64_t n = 0;
  double mean = 0, stdev = 0, noise = 0;  // noise = relative stdev (fraction)
  double min = 0, max = 0;
  double median = 0, p20 = 0, p80 = 0;    // linear interpolation
  double q1 = 0, q3 = 0, iqr = 0;         // nvbench rank rule
  double iqr_rel = 0;                     // iqr / median
};

// All fields NaN (n = 0) for an empty span. Samples need not be sorted.
Summary summarize(std::span<const double> samples);

}  // namespace kda::bench
