// Unit tests of kda_bench_core (pure CPU): statistics, the stopping rule on synthetic sample
// streams, the throttle decision, the bytes model, compare, and the result printers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kda/bench/bytes_model.h"
#include "kda/bench/compare.h"
#include "kda/bench/format.h"
#include "kda/bench/json_report.h"
#include "kda/bench/results.h"
#include "kda/bench/sampling.h"
#include "kda/bench/statistics.h"
#include "kda/bench/stopping.h"
#include "kda/bench/throttle.h"
#include "kda/harness/report.h"
#include "kda/harness/shapes.h"

namespace kb = kda::bench;
namespace kh = kda::harness;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<double> one_to(int n) {
  std::vector<double> v;
  for (int i = 1; i <= n; ++i) v.push_back(i);
  return v;
}

std::string scratch(const std::string& name) {
  std::filesystem::create_directories(KDA_TEST_SCRATCH_DIR);
  const std::string path = std::string(KDA_TEST_SCRATCH_DIR) + "/" + name;
  std::filesystem::remove(path);
  return path;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// statistics

TEST(Statistics, MeanAndBesselStdevOnHandData) {
  const std::vector<double> x = {2, 4, 4, 4, 5, 5, 7, 9};
  EXPECT_DOUBLE_EQ(kb::mean(x), 5.0);
  EXPECT_NEAR(kb::stdev(x), std::sqrt(32.0 / 7.0), 1e-15);  // n-1 = 7, not 8
  EXPECT_NEAR(kb::relative_stdev(x), std::sqrt(32.0 / 7.0) / 5.0, 1e-15);
}

TEST(Statistics, EdgeCases) {
  EXPECT_TRUE(std::isnan(kb::mean({})));
  EXPECT_TRUE(std::isnan(kb::stdev(std::vector<double>{1.0})));
  // Noise needs kMinSamplesForNoise (5) samples.
  EXPECT_EQ(kb::relative_stdev(std::vector<double>{1, 2, 3, 4}), kInf);
  EXPECT_TRUE(std::isfinite(kb::relative_stdev(std::vector<double>{1, 2, 3, 4, 5})));
  EXPECT_TRUE(std::isnan(kb::relative_stdev(std::vector<double>{0, 0, 0, 0, 0})));
  EXPECT_DOUBLE_EQ(kb::relative_stdev(std::vector<double>{3, 3, 3, 3, 3}), 0.0);
}

TEST(Statistics, RankQuantilesFollowNvbenchRule) {
  const auto x = one_to(10);  // rank = round(p (n-1)), no interpolation
  EXPECT_EQ(kb::quantile_rank(x, 0.25), 3.0);  // round(2.25) = 2
  EXPECT_EQ(kb::quantile_rank(x, 0.75), 8.0);  // round(6.75) = 7
  EXPECT_EQ(kb::quantile_rank(x, 0.5), 6.0);   // round(4.5) = 5 (half away from zero)
  EXPECT_EQ(kb::quantile_rank(x, 0.0), 1.0);
  EXPECT_EQ(kb::quantile_rank(x, 1.0), 10.0);
  const auto y = one_to(5);
  EXPECT_EQ(kb::quantile_rank(y, 0.25), 2.0);  // exactly rank 1
  EXPECT_EQ(kb::quantile_rank(y, 0.75), 4.0);
}

TEST(Statistics, LinearQuantilesMatchTorchQuantile) {
  // torch.quantile(torch.arange(1., 11.), q) for q = 0.2, 0.5, 0.8: 2.8, 5.5, 8.2.
  const auto x = one_to(10);
  EXPECT_NEAR(kb::quantile_linear(x, 0.2), 2.8, 1e-12);
  EXPECT_NEAR(kb::quantile_linear(x, 0.5), 5.5, 1e-12);
  EXPECT_NEAR(kb::quantile_linear(x, 0.8), 8.2, 1e-12);
  EXPECT_EQ(kb::quantile_linear(x, 0.0), 1.0);
  EXPECT_EQ(kb::quantile_linear(x, 1.0), 10.0);
  const std::vector<double> one = {7.0};
  EXPECT_EQ(kb::quantile_linear(one, 0.2), 7.0);
  EXPECT_EQ(kb::quantile_rank(one, 0.75), 7.0);
  EXPECT_TRUE(std::isnan(kb::quantile_linear({}, 0.5)));
}

TEST(Statistics, SummarizeUnsortedSamples) {
  const std::vector<double> x = {9, 1, 8, 2, 7, 3, 6, 4, 5, 10};
  const kb::Summary s = kb::summarize(x);
  EXPECT_EQ(s.n, 10);
  EXPECT_DOUBLE_EQ(s.mean, 5.5);
  EXPECT_EQ(s.min, 1.0);
  EXPECT_EQ(s.max, 10.0);
  EXPECT_DOUBLE_EQ(s.median, 5.5);  // the usual median, not the rank rule's 6
  EXPECT_NEAR(s.p20, 2.8, 1e-12);
  EXPECT_NEAR(s.p80, 8.2, 1e-12);
  EXPECT_EQ(s.q1, 3.0);
  EXPECT_EQ(s.q3, 8.0);
  EXPECT_EQ(s.iqr, 5.0);
  EXPECT_NEAR(s.iqr_rel, 5.0 / 5.5, 1e-15);
  EXPECT_NEAR(s.noise, kb::stdev(x) / 5.5, 1e-15);

  const kb::Summary odd = kb::summarize(std::vector<double>{3, 1, 2});
  EXPECT_EQ(odd.median, 2.0);
  EXPECT_EQ(odd.noise, kInf);  // 3 samples: too few for a noise

  const kb::Summary empty = kb::summarize({});
  EXPECT_EQ(empty.n, 0);
  EXPECT_TRUE(std::isnan(empty.median));
  EXPECT_TRUE(std::isnan(empty.noise));
}

TEST(Statistics, Geomean) {
  EXPECT_NEAR(kb::geomean(std::vector<double>{1, 4, 16}), 4.0, 1e-12);
  EXPECT_NEAR(kb::geomean(std::vector<double>{0.5, 2.0}), 1.0, 1e-15);
  EXPECT_TRUE(std::isnan(kb::geomean({})));
  EXPECT_TRUE(std::isnan(kb::geomean(std::vector<double>{1, 0})));
  EXPECT_TRUE(std::isnan(kb::geomean(std::vector<double>{1, -2})));
  EXPECT_TRUE(std::isnan(kb::geomean(std::vector<double>{1, kNaN})));
}

// ---------------------------------------------------------------------------------------------
// stopping rule

namespace {
// Feeds samples until the criterion stops (wall time = accumulated GPU time, as if the loop had
// no overhead) or max_samples; returns the reason.
template <class Gen>
kb::StopReason run_until_stop(kb::StdrelCriterion& c, Gen gen, int64_t max_samples) {
  for (int64_t i = 0; i < max_samples; ++i) {
    c.add_sample(gen(i));
    const kb::StopReason r = c.check(c.total_time_s());
    if (r != kb::StopReason::none) return r;
  }
  return kb::StopReason::none;
}
}  // namespace

TEST(Stopping, ConvergesOnALowNoiseStreamOnceMinTimeIsReached) {
  kb::StdrelCriterion c;  // defaults: 10 samples, 0.5 s, 0.5 %, 15 s
  // 1 ms +- 0.01 %: the noise is far below 0.5 % from the start, so min time decides.
  auto gen = [](int64_t i) { return 1e-3 * (1.0 + 1e-4 * static_cast<double>(i % 3 - 1)); };
  const kb::StopReason r = run_until_stop(c, gen, 100000);
  EXPECT_EQ(r, kb::StopReason::noise_target);
  EXPECT_TRUE(kb::is_converged(r));
  EXPECT_GE(c.total_time_s(), 0.5);
  EXPECT_NEAR(static_cast<double>(c.samples()), 500.0, 1.0);
  EXPECT_LT(c.noise(), 0.005);
}

TEST(Stopping, RefusesBeforeMinSamples) {
  kb::StoppingConfig cfg;
  cfg.min_time_s = 0.0;
  kb::StdrelCriterion c(cfg);
  for (int i = 0; i < 9; ++i) {
    c.add_sample(1e-3);
    EXPECT_EQ(c.check(0.0), kb::StopReason::none) << "after " << i + 1 << " samples";
  }
  c.add_sample(1e-3);
  EXPECT_EQ(c.check(0.0), kb::StopReason::noise_target);
}

TEST(Stopping, RefusesBeforeMinTime) {
  kb::StoppingConfig cfg;
  cfg.min_time_s = 2.0;
  kb::StdrelCriterion c(cfg);
  for (int i = 0; i < 1000; ++i) c.add_sample(1e-3);  // 1 s, zero noise
  EXPECT_EQ(c.samples(), 1000);
  EXPECT_EQ(c.check(1.0), kb::StopReason::none);
  for (int i = 0; i < 1001; ++i) c.add_sample(1e-3);  // 2000 x 1e-3 rounds to just below 2
  EXPECT_GE(c.total_time_s(), 2.0);
  EXPECT_EQ(c.check(2.0), kb::StopReason::noise_target);
}

TEST(Stopping, StopsByStabilisationOnANoisyStationaryStream) {
  kb::StdrelCriterion c;
  std::mt19937_64 rng(12345);
  std::normal_distribution<double> normal(0.0, 1.0);
  // 5 % relative noise: never below the 0.5 % target, but its estimate settles.
  auto gen = [&](int64_t) { return 1e-3 * (1.0 + 0.05 * normal(rng)); };
  const kb::StopReason r = run_until_stop(c, gen, 100000);
  EXPECT_EQ(r, kb::StopReason::noise_stable);
  EXPECT_TRUE(kb::is_converged(r));
  EXPECT_GE(c.samples(), 500);   // min time 0.5 s of 1 ms samples comes first
  EXPECT_LT(c.samples(), 5000);  // and stabilisation well before the timeout
  EXPECT_NEAR(c.noise(), 0.05, 0.01);
}

TEST(Stopping, NoStabilisationBeforeEnoughNoiseEstimates) {
  kb::StoppingConfig cfg;
  cfg.min_time_s = 0.0;
  kb::StdrelCriterion c(cfg);
  // Alternating 1 / 2 ms: noise ~ 33 %, constant; stable only after > 64 estimates (at a
  // multiple of 16), i.e. not before sample 5 + 64.
  for (int i = 0; i < 60; ++i) {
    c.add_sample(i % 2 ? 2e-3 : 1e-3);
    EXPECT_EQ(c.check(0.0), kb::StopReason::none) << i;
  }
  const kb::StopReason r = run_until_stop(c, [](int64_t i) { return i % 2 ? 2e-3 : 1e-3; }, 200);
  EXPECT_EQ(r, kb::StopReason::noise_stable);
  EXPECT_GT(c.samples(), 64 + kb::kMinSamplesForNoise);
}

TEST(Stopping, TimeoutFlagsNonConvergence) {
  kb::StdrelCriterion c;
  for (int i = 0; i < 20; ++i) c.add_sample(1e-3);  // only 20 ms of GPU time
  EXPECT_EQ(c.check(14.9), kb::StopReason::none);
  const kb::StopReason r = c.check(15.0);
  EXPECT_EQ(r, kb::StopReason::timeout);
  EXPECT_FALSE(kb::is_converged(r));
  EXPECT_STREQ(kb::to_string(r), "timeout");
  // Timeout also stops a run that never got a single sample.
  kb::StdrelCriterion empty;
  EXPECT_EQ(empty.check(20.0), kb::StopReason::timeout);
}

TEST(Stopping, ConvergenceOnTheLastSampleBeatsTheTimeout) {
  kb::StoppingConfig cfg;
  cfg.min_time_s = 0.0;
  kb::StdrelCriterion c(cfg);
  for (int i = 0; i < 10; ++i) c.add_sample(1e-3);
  EXPECT_EQ(c.check(100.0), kb::StopReason::noise_target);
}

TEST(Stopping, NaNGuard) {
  kb::StdrelCriterion c;
  for (int i = 0; i < kb::StdrelCriterion::kMaxNonFiniteStreak - 1; ++i) {
    c.add_sample(kNaN);
    EXPECT_EQ(c.check(0.0), kb::StopReason::none);
  }
  c.add_sample(kInf);
  EXPECT_EQ(c.check(0.0), kb::StopReason::non_finite);
  EXPECT_FALSE(kb::is_converged(kb::StopReason::non_finite));
  EXPECT_EQ(c.samples(), 0);
  EXPECT_EQ(c.rejected_samples(), kb::StdrelCriterion::kMaxNonFiniteStreak);
  EXPECT_EQ(c.total_time_s(), 0.0);
}

TEST(Stopping, NaNSamplesNeverPoisonTheStatistics) {
  kb::StoppingConfig cfg;
  cfg.min_time_s = 0.0;
  kb::StdrelCriterion c(cfg);
  for (int i = 0; i < 20; ++i) {
    c.add_sample(i % 2 ? kNaN : 1e-3);
    c.add_sample(-1.0);  // negative: unusable too
  }
  EXPECT_EQ(c.samples(), 10);
  EXPECT_EQ(c.rejected_samples(), 30);
  EXPECT_DOUBLE_EQ(c.mean_s(), 1e-3);
  EXPECT_EQ(c.check(0.0), kb::StopReason::noise_target);  // the streak was broken each time
}

TEST(Stopping, AllZeroTimesStopAsNonFinite) {
  kb::StdrelCriterion c;
  kb::StopReason r = kb::StopReason::none;
  int64_t n = 0;
  while (r == kb::StopReason::none && n < 1000) {
    c.add_sample(0.0);
    ++n;
    r = c.check(0.0);
  }
  EXPECT_EQ(r, kb::StopReason::non_finite);
  EXPECT_EQ(n, kb::kMinSamplesForNoise - 1 + kb::StdrelCriterion::kMaxNonFiniteStreak);
}

TEST(Stopping, MinTimeCountsTheGpuTimeASampleSpans) {
  // A graph batch of 80 calls of 2.5 us: each sample is 200 us of GPU time, recorded per call.
  // min_time (0.5 s) is reached after 2500 samples, not after 0.5 s of per-call times (200000
  // samples, which is what made the batched zero_tail rows of the 47f6117 H200 run take 10-14 s
  // per row and time out with --timeout 3).
  kb::StdrelCriterion c;
  int64_t n = 0;
  kb::StopReason r = kb::StopReason::none;
  while (r == kb::StopReason::none && n < 1000000) {
    c.add_sample(2.5e-6 * (1.0 + 1e-3 * static_cast<double>(n % 3 - 1)), 80);
    ++n;
    r = c.check(c.total_time_s());
  }
  EXPECT_EQ(r, kb::StopReason::noise_target);
  EXPECT_NEAR(static_cast<double>(n), 2500.0, 2.0);
  EXPECT_NEAR(c.total_time_s(), 0.5, 1e-3);
  EXPECT_NEAR(c.mean_s(), 2.5e-6, 1e-12);  // the statistics stay per call
  EXPECT_LT(c.noise(), 0.005);

  kb::StdrelCriterion one;  // calls = 1 (and calls < 1 counts as 1)
  one.add_sample(1e-3);
  one.add_sample(1e-3, 0);
  EXPECT_DOUBLE_EQ(one.total_time_s(), 2e-3);
  one.add_sample(kNaN, 80);  // unusable samples are never accumulated, whatever they span
  EXPECT_DOUBLE_EQ(one.total_time_s(), 2e-3);
  EXPECT_EQ(one.rejected_samples(), 1);
}

// ---------------------------------------------------------------------------------------------
// sample plan (calls per sample)

TEST(Sampling, MethodNames) {
  EXPECT_STREQ(kb::to_string(kb::SampleMethod::call), "call");
  EXPECT_STREQ(kb::to_string(kb::SampleMethod::graph), "graph");
  EXPECT_STREQ(kb::to_string(kb::SampleMethod::graph_batch), "graph_batch");
}

TEST(Sampling, OnlyCallsShorterThanTheMinimumSampleAreBatched) {
  const kb::SamplingConfig cfg;  // 200 us, <= 1024 calls
  EXPECT_DOUBLE_EQ(cfg.min_sample_s, 200e-6);
  EXPECT_FALSE(kb::is_short_call(1.5e-3, cfg));   // whole paths: one call per event pair
  EXPECT_FALSE(kb::is_short_call(200e-6, cfg));   // the boundary is not short
  EXPECT_TRUE(kb::is_short_call(199e-6, cfg));
  EXPECT_TRUE(kb::is_short_call(4.2e-6, cfg));
  EXPECT_TRUE(kb::is_short_call(0.0, cfg));       // no measurable time: as short as it gets
  EXPECT_FALSE(kb::is_short_call(kNaN, cfg));     // unknown: one call per sample
  EXPECT_FALSE(kb::is_short_call(kInf, cfg));

  EXPECT_EQ(kb::calls_per_sample(1.5e-3, cfg), 1);
  EXPECT_EQ(kb::calls_per_sample(200e-6, cfg), 1);
  EXPECT_EQ(kb::calls_per_sample(150e-6, cfg), 2);  // ceil(1.33)
  EXPECT_EQ(kb::calls_per_sample(100e-6, cfg), 2);
  EXPECT_EQ(kb::calls_per_sample(99e-6, cfg), 3);   // ceil(2.02): a sample is >= 200 us
  EXPECT_EQ(kb::calls_per_sample(88.5e-6, cfg), 3); // the h64 l2norm pass
  EXPECT_EQ(kb::calls_per_sample(4.2e-6, cfg), 48);
  EXPECT_EQ(kb::calls_per_sample(2.5e-6, cfg), 80);
  EXPECT_EQ(kb::calls_per_sample(1e-9, cfg), 1024);  // capped
  EXPECT_EQ(kb::calls_per_sample(0.0, cfg), 1024);
  EXPECT_EQ(kb::calls_per_sample(-1.0, cfg), 1024);
  EXPECT_EQ(kb::calls_per_sample(kNaN, cfg), 1);
  for (double e : {1.1e-6, 3.3e-6, 7e-6, 33e-6, 120e-6, 199.9e-6}) {
    const int64_t n = kb::calls_per_sample(e, cfg);
    EXPECT_GE(static_cast<double>(n) * e, cfg.min_sample_s * (1 - 1e-12)) << e;
    EXPECT_LT(static_cast<double>(n - 1) * e, cfg.min_sample_s) << e;  // no more than needed
  }

  kb::SamplingConfig off = cfg;  // --min-sample-us 0: nothing is batched
  off.min_sample_s = 0.0;
  EXPECT_EQ(kb::calls_per_sample(2.5e-6, off), 1);
  kb::SamplingConfig few = cfg;
  few.max_calls = 1;  // a batch has at least two calls
  EXPECT_EQ(kb::calls_per_sample(2.5e-6, few), 2);
}

TEST(Sampling, RefinementFromTheGraphReplayOnlyGrows) {
  const kb::SamplingConfig cfg;
  // The zero_tail case: the warm-up's single call (launch latency included) says 8.2 us -> 25
  // calls; a replay of those 25 calls takes 62.5 us (2.5 us each) -> 80; a replay of 80 takes
  // 200 us -> stays 80.
  int64_t n = kb::calls_per_sample(8.2e-6, cfg);
  EXPECT_EQ(n, 25);
  n = kb::refine_calls_per_sample(n, 25 * 2.5e-6, cfg);
  EXPECT_EQ(n, 80);
  EXPECT_EQ(kb::refine_calls_per_sample(n, 80 * 2.5e-6, cfg), 80);
  // Never fewer calls (the loop ends), even when the replay was slower than expected.
  EXPECT_EQ(kb::refine_calls_per_sample(80, 400e-6, cfg), 80);
  EXPECT_EQ(kb::refine_calls_per_sample(1, 1e-3, cfg), 1);
  EXPECT_EQ(kb::refine_calls_per_sample(10, kNaN, cfg), 10);
  EXPECT_EQ(kb::refine_calls_per_sample(0, 1e-3, cfg), 1);
  EXPECT_EQ(kb::refine_calls_per_sample(1000, 1000 * 1e-9, cfg), 1024);  // capped
}

TEST(Sampling, SamplesPerBatchAndPerCallTimes) {
  const kb::SamplingConfig cfg;  // 25 ms per batch, <= 64 samples
  EXPECT_EQ(kb::samples_per_batch(1.5e-3, cfg), 17);  // round(16.7): as before for whole paths
  EXPECT_EQ(kb::samples_per_batch(200e-6, cfg), 64);  // 125, capped
  EXPECT_EQ(kb::samples_per_batch(0.1, cfg), 1);      // round(0.25) = 0 -> 1
  EXPECT_EQ(kb::samples_per_batch(0.0, cfg), 1);
  EXPECT_EQ(kb::samples_per_batch(kNaN, cfg), 1);
  EXPECT_EQ(kb::samples_per_batch(kInf, cfg), 1);
  EXPECT_DOUBLE_EQ(kb::per_call_time(200e-6, 80), 2.5e-6);
  EXPECT_DOUBLE_EQ(kb::per_call_time(1e-3, 1), 1e-3);
  EXPECT_DOUBLE_EQ(kb::per_call_time(1e-3, 0), 1e-3);
  EXPECT_TRUE(std::isnan(kb::per_call_time(kNaN, 4)));
}

// ---------------------------------------------------------------------------------------------
// throttle

TEST(Throttle, DiscardsBelowThresholdWithGrowingCoolDown) {
  kb::ThrottleMonitor m({}, 1.98e9);  // H200 default SM clock
  EXPECT_FALSE(m.judge(1.9e9).discard);
  EXPECT_FALSE(m.judge(0.75 * 1.98e9).discard);  // exactly at the threshold: kept
  const double expected[] = {0.05, 0.05, 0.075, 0.1125, 0.16875, 0.253125, 0.3796875, 0.5, 0.5};
  for (double e : expected) {
    const kb::ThrottleDecision d = m.judge(1.0e9);
    EXPECT_TRUE(d.discard);
    EXPECT_NEAR(d.sleep_s, e, 1e-12);
  }
  EXPECT_EQ(m.discards(), 9);
  const kb::ThrottleDecision ok = m.judge(1.98e9);  // recovered: resets the schedule
  EXPECT_FALSE(ok.discard);
  EXPECT_EQ(ok.sleep_s, 0.0);
  EXPECT_EQ(m.streak(), 0);
  EXPECT_NEAR(m.judge(1.0e9).sleep_s, 0.05, 1e-15);
  EXPECT_EQ(m.discards(), 10);
}

TEST(Throttle, UnknownClocksAreAccepted) {
  kb::ThrottleMonitor m({}, 1.98e9);
  EXPECT_FALSE(m.judge(kNaN).discard);
  EXPECT_FALSE(m.judge(0.0).discard);
  EXPECT_FALSE(m.judge(-1.0).discard);
  kb::ThrottleMonitor no_default({}, 0.0);
  EXPECT_FALSE(no_default.judge(1.0e6).discard);
  EXPECT_EQ(m.discards() + no_default.discards(), 0);
}

TEST(Throttle, CustomThreshold) {
  kb::ThrottleConfig cfg;
  cfg.threshold = 0.9;
  cfg.recovery_delay_s = 0.01;
  kb::ThrottleMonitor m(cfg, 2.0e9);
  EXPECT_TRUE(m.judge(1.7e9).discard);
  EXPECT_FALSE(m.judge(1.8e9).discard);
}

// ---------------------------------------------------------------------------------------------
// bytes model

TEST(BytesModel, PerTokenHeadIs1540ForK128) {
  kb::ProblemSize s;
  s.tokens = 8192;
  s.heads = 96;
  EXPECT_EQ(kb::forward_bytes_per_token_head(s), 1540);
  EXPECT_EQ(s.token_heads(), 786432);
  EXPECT_EQ(kb::forward_bytes(s), 786432LL * 1540);  // 1,211,105,280
  EXPECT_EQ(kb::forward_bytes(s), 1211105280LL);
  EXPECT_EQ(kb::l2norm_bytes(s), 402653184LL);      // 2 x 201 MB (performance.md)
  EXPECT_EQ(kb::path_bytes(s, kb::Path::fused), 1211105280LL);
  EXPECT_EQ(kb::path_bytes(s, kb::Path::explicit_), 1211105280LL + 402653184LL);
  EXPECT_EQ(kb::path_bytes(s, kb::Path::l2norm), 402653184LL);
  EXPECT_EQ(kb::floor_bytes(s, kb::Path::explicit_), 1211105280LL);
  EXPECT_EQ(kb::floor_bytes(s, kb::Path::l2norm), 402653184LL);
  // performance.md: byte floor 0.285 ms (h96) at 4.25 TB/s.
  EXPECT_NEAR(1211105280.0 / kb::kDefaultFloorBandwidth, 0.285e-3, 0.0005e-3);
  s.heads = 64;
  EXPECT_EQ(kb::forward_bytes(s), 524288LL * 1540);
  EXPECT_NEAR(static_cast<double>(kb::forward_bytes(s)) / kb::kDefaultFloorBandwidth, 0.190e-3,
              0.0005e-3);
}

TEST(BytesModel, ContractShapes) {
  const kh::ShapeFile file = kh::load_shape_file(std::string(KDA_SOURCE_DIR) +
                                                 "/shapes/contract.yaml");
  ASSERT_EQ(file.shapes.size(), 6u);
  double floor_log_sum = 0.0;
  for (const auto& shape : file.shapes) {
    const kb::ProblemSize s = kb::ProblemSize::of(shape);
    const int64_t th = shape.heads == 96 ? 786432 : 524288;
    EXPECT_EQ(s.token_heads(), th) << shape.id;
    EXPECT_EQ(kb::forward_bytes(s), th * 1540) << shape.id;  // no states in the contract
    EXPECT_EQ(kb::l2norm_bytes(s), th * 512) << shape.id;
    floor_log_sum += std::log(static_cast<double>(kb::forward_bytes(s)) / 4.25e12);
  }
  // performance.md: geomean byte floor over the six ~ 0.233 ms.
  EXPECT_NEAR(std::exp(floor_log_sum / 6.0), 0.233e-3, 0.001e-3);
}

TEST(BytesModel, StatesAndOtherHeadSizes) {
  kb::ProblemSize s;
  s.batch = 2;
  s.tokens = 10;
  s.heads = 3;
  s.num_states = 2;
  const int64_t base = 60 * 1540;
  EXPECT_EQ(kb::forward_bytes(s), base);
  s.initial_state = true;
  EXPECT_EQ(kb::forward_bytes(s), base + 2 * 3 * 128 * 128 * 4);
  s.final_state = true;
  EXPECT_EQ(kb::forward_bytes(s), base + 2 * (2 * 3 * 128 * 128 * 4));
  kb::ProblemSize small;
  small.tokens = 1;
  small.heads = 1;
  small.key_dim = 64;
  small.value_dim = 32;
  EXPECT_EQ(kb::forward_bytes_per_token_head(small), 2 * 64 * 2 + 32 * 2 + 64 * 4 + 4 + 32 * 2);
  EXPECT_EQ(kb::l2norm_bytes(small), 2 * 64 * 2);
}

TEST(BytesModel, RawPathIs1282PerTokenHeadPlusGateParametersAndStates) {
  kb::ProblemSize s;
  s.tokens = 8192;
  s.heads = 96;
  s.num_states = 1;
  // raw q, raw k, v bf16 (3 x 256 B), raw gate bf16 (256 B), beta logits bf16 (2 B), out bf16
  // (256 B); A_log [96] and dt_bias [96, 128] fp32 once.
  EXPECT_EQ(kb::raw_forward_bytes_per_token_head(s), 1282);
  const int64_t gate_parameters = 96 * 4 + 96 * 128 * 4;  // 49,536
  EXPECT_EQ(kb::raw_forward_bytes(s), 786432LL * 1282 + gate_parameters);  // 1,008,255,360
  EXPECT_EQ(kb::path_bytes(s, kb::Path::raw), 1008255360LL);
  // Its floor is its own bytes (0.237 ms at 4.25 TB/s), not the contract forward's.
  EXPECT_EQ(kb::floor_bytes(s, kb::Path::raw), 1008255360LL);
  EXPECT_NEAR(1008255360.0 / kb::kDefaultFloorBandwidth, 0.2372e-3, 0.0001e-3);
  EXPECT_LT(kb::floor_bytes(s, kb::Path::raw), kb::floor_bytes(s, kb::Path::fused));
  // States count as for the forward.
  s.initial_state = s.final_state = true;
  EXPECT_EQ(kb::raw_forward_bytes(s), 1008255360LL + 2 * 96 * 128 * 128 * 4);
  kb::ProblemSize small;
  small.tokens = 1;
  small.heads = 1;
  small.key_dim = 64;
  small.value_dim = 32;
  EXPECT_EQ(kb::raw_forward_bytes_per_token_head(small), 3 * 64 * 2 + 2 + 2 * 32 * 2);
}

TEST(BytesModel, PathNames) {
  EXPECT_EQ(kda::harness::parse_path("explicit"), kb::Path::explicit_);
  EXPECT_EQ(kda::harness::parse_path("fused"), kb::Path::fused);
  EXPECT_EQ(kda::harness::parse_path("l2norm"), kb::Path::l2norm);
  EXPECT_EQ(kda::harness::parse_path("raw"), kb::Path::raw);
  EXPECT_FALSE(kda::harness::parse_path("Fused").has_value());
  EXPECT_STREQ(kda::harness::to_string(kb::Path::explicit_), "explicit");
  EXPECT_STREQ(kda::harness::to_string(kb::Path::raw), "raw");
  for (kb::Path p : kda::harness::kAllPaths) {
    EXPECT_EQ(kda::harness::parse_path(kda::harness::to_string(p)), p);
  }
}

// ---------------------------------------------------------------------------------------------
// compare

TEST(Compare, Classification) {
  using kb::Change;
  auto cls = [](double a, double na, double b, double nb) {
    return kb::classify(a, na, b, nb, 0.01);
  };
  EXPECT_EQ(cls(1e-3, 0.002, 1.005e-3, 0.003).change, Change::same);
  EXPECT_EQ(cls(1e-3, 0.002, 0.98e-3, 0.002).change, Change::faster);
  EXPECT_EQ(cls(1e-3, 0.002, 1.02e-3, 0.002).change, Change::slower);
  EXPECT_EQ(cls(1e-3, 0.03, 1.02e-3, 0.002).change, Change::same);   // noise of A covers it
  EXPECT_EQ(cls(1e-3, 0.002, 0.975e-3, 0.03).change, Change::same);  // noise of B covers it
  EXPECT_EQ(cls(1e-3, kNaN, 1.02e-3, kNaN).change, Change::slower);  // missing noise: 1 % floor
  // A noise that cannot bound anything makes the row INVALID, never SAME (issue 18: a noise of
  // -1.5 or inf made a 2x slowdown SAME).
  EXPECT_EQ(cls(1e-3, kInf, 2e-3, 0.0).change, Change::invalid);
  EXPECT_EQ(cls(1e-3, -1.5, 2e-3, 0.0).change, Change::invalid);
  EXPECT_EQ(cls(1e-3, 0.0, 2e-3, -1.5).change, Change::invalid);
  EXPECT_EQ(cls(0.0, 0.0, 1e-3, 0.0).change, Change::invalid);
  EXPECT_EQ(cls(1e-3, 0.0, kNaN, 0.0).change, Change::invalid);
  const kb::Classification c = cls(2e-3, 0.004, 1e-3, 0.001);
  EXPECT_DOUBLE_EQ(c.ratio, 0.5);
  EXPECT_DOUBLE_EQ(c.threshold, 0.01);
  // The boundary counts as SAME (values exact in binary).
  EXPECT_EQ(kb::classify(1.0, 0.0, 1.25, 0.0, 0.25).change, Change::same);
  EXPECT_EQ(kb::classify(1.0, 0.0, 0.75, 0.0, 0.25).change, Change::same);
  EXPECT_EQ(kb::classify(1.0, 0.0, 1.25, 0.0, 0.125).change, Change::slower);
  EXPECT_STREQ(kb::to_string(Change::faster), "FASTER");
}

namespace {
kh::Table table_of(std::vector<std::string> columns, std::vector<std::vector<std::string>> rows) {
  kh::Table t;
  t.columns = std::move(columns);
  t.rows = std::move(rows);
  return t;
}
}  // namespace

TEST(Compare, MatchesRowsAndTakesTheGeomean) {
  const auto a = kb::timing_table(
      table_of({"shape_id", "path", "mode", "median_s", "noise"},
               {{"s1", "fused", "warm", "0.001", "0.002"},
                {"s1", "explicit", "warm", "0.002", "0.002"},
                {"s2", "fused", "warm", "0.004", "0.001"},
                {"gone", "fused", "warm", "0.001", "0.001"}}),
      "a.csv");
  const auto b = kb::timing_table(
      table_of({"shape_id", "path", "mode", "median_s", "noise"},
               {{"s2", "fused", "warm", "0.002", "0.001"},   // 2x faster
                {"s1", "explicit", "warm", "0.004", "0.002"},  // 2x slower
                {"s1", "fused", "warm", "0.001", "0.003"},   // same
                {"new", "fused", "warm", "0.001", "0.001"}}),
      "b.csv");
  const kb::CompareReport r = kb::compare_tables(a, b, {});
  ASSERT_EQ(r.entries.size(), 3u);
  EXPECT_EQ(r.entries[0].shape_id, "s1");  // A's order
  EXPECT_EQ(r.entries[0].result.change, kb::Change::same);
  EXPECT_EQ(r.entries[1].result.change, kb::Change::slower);
  EXPECT_EQ(r.entries[2].result.change, kb::Change::faster);
  EXPECT_EQ(r.same, 1);
  EXPECT_EQ(r.slower, 1);
  EXPECT_EQ(r.faster, 1);
  EXPECT_NEAR(r.geomean_ratio, 1.0, 1e-12);  // (1 * 2 * 0.5)^(1/3)
  ASSERT_EQ(r.only_in_a.size(), 1u);
  EXPECT_NE(r.only_in_a[0].find("gone"), std::string::npos);
  ASSERT_EQ(r.only_in_b.size(), 1u);
  EXPECT_NE(r.only_in_b[0].find("new"), std::string::npos);

  const std::string md = kb::compare_markdown(r, "a.csv", "b.csv", {});
  EXPECT_NE(md.find("SLOWER"), std::string::npos);
  EXPECT_NE(md.find("geomean B/A over 3 rows: 1.000"), std::string::npos);
  const kh::Table raw = kb::compare_table(r, false);
  EXPECT_EQ(raw.columns.back(), "change");
  EXPECT_EQ(raw.rows[1].back(), "SLOWER");
}

TEST(Compare, PeerCsvWithMillisecondsAndNoModeOrNoise) {
  // A peer's file (like data/peers-h200.csv): impl + median_ms, no mode, no noise.
  const auto peer = kb::timing_table(
      table_of({"shape_id", "impl", "median_ms", "notes"},
               {{"h96-fixed", "fused", "1.4523", "x"}, {"h64-fixed", "fused", "1.2423", "y"}}),
      "peer.csv");
  EXPECT_FALSE(peer.has_mode);
  EXPECT_NEAR(peer.records[0].median_s, 1.4523e-3, 1e-15);
  EXPECT_TRUE(std::isnan(peer.records[0].noise));
  const auto ours = kb::timing_table(
      table_of({"shape_id", "path", "stage", "mode", "median_s", "noise"},
               {{"h96-fixed", "fused", "", "warm", "0.0014", "0.002"},
                {"h96-fixed", "fused", "", "cold", "0.0016", "0.002"},
                {"h64-fixed", "fused", "", "warm", "0.0013", "0.002"},
                {"h64-fixed", "fused", "", "cold", "0.0015", "0.002"}}),
      "ours.csv");
  // Two modes of ours match one peer row: ambiguous until a mode is chosen.
  EXPECT_THROW(kb::compare_tables(peer, ours, {}), kb::CompareError);
  kb::CompareConfig cfg;
  cfg.mode = "warm";
  const kb::CompareReport r = kb::compare_tables(peer, ours, cfg);
  ASSERT_EQ(r.entries.size(), 2u);
  EXPECT_EQ(r.entries[0].mode, "warm");
  EXPECT_EQ(r.entries[0].result.change, kb::Change::faster);  // 1.4 vs 1.4523: -3.6 %
  EXPECT_EQ(r.entries[1].result.change, kb::Change::slower);  // 1.3 vs 1.2423: +4.6 %
}

TEST(Compare, DifferentPathNamesAcrossFiles) {
  const auto peer = kb::timing_table(
      table_of({"shape_id", "impl", "median_ms"},
               {{"h96-fixed", "flashkda", "1.4523"}, {"h96-fixed", "fla-core", "2.7214"}}),
      "peer.csv");
  const auto ours = kb::timing_table(
      table_of({"shape_id", "path", "median_s"},
               {{"h96-fixed", "fused", "0.0014523"}, {"h96-fixed", "explicit", "0.002"}}),
      "ours.csv");
  kb::CompareConfig cfg;
  cfg.a_path = "flashkda";
  cfg.b_path = "fused";
  const kb::CompareReport r = kb::compare_tables(peer, ours, cfg);
  ASSERT_EQ(r.entries.size(), 1u);
  EXPECT_EQ(r.entries[0].path, "flashkda vs fused");
  EXPECT_EQ(r.entries[0].result.change, kb::Change::same);
  EXPECT_TRUE(r.only_in_a.empty());
  EXPECT_TRUE(r.only_in_b.empty());
}

TEST(Compare, ClearErrorsForBadTables) {
  try {
    kb::timing_table(table_of({"shape", "path", "median_s"}, {}), "x.csv");
    FAIL() << "no error";
  } catch (const kb::CompareError& e) {
    EXPECT_NE(std::string(e.what()).find("x.csv: no 'shape_id' column"), std::string::npos)
        << e.what();
  }
  try {
    kb::timing_table(table_of({"shape_id", "path", "mean_s"}, {}), "x.csv");
    FAIL() << "no error";
  } catch (const kb::CompareError& e) {
    EXPECT_NE(std::string(e.what()).find("'median_s'"), std::string::npos) << e.what();
  }
  try {
    kb::timing_table(table_of({"shape_id", "path", "median_s"}, {{"a", "fused", "1.2ms"}}),
                     "x.csv");
    FAIL() << "no error";
  } catch (const kb::CompareError& e) {
    EXPECT_NE(std::string(e.what()).find("data row 1: column 'median_s': '1.2ms' is not a number"),
              std::string::npos)
        << e.what();
  }
  const auto dup = kb::timing_table(
      table_of({"shape_id", "path", "median_s"}, {{"a", "fused", "1"}, {"a", "fused", "2"}}),
      "d.csv");
  EXPECT_THROW(kb::compare_tables(dup, dup, {}), kb::CompareError);
  EXPECT_THROW(kb::read_timing_table(scratch("missing.csv")), kb::CompareError);
}

// Issue 18, item 4: a time or noise that is there must be usable; empty cells are missing values.
TEST(Compare, RefusesNegativeNanAndInfiniteTimesAndNoise) {
  auto error = [](const std::string& median, const std::string& noise) {
    try {
      kb::timing_table(table_of({"shape_id", "path", "median_s", "noise"},
                                {{"a", "fused", median, noise}}),
                       "x.csv");
    } catch (const kb::CompareError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string bad_noise =
      "is not a noise (a finite fraction >= 0, or empty for a missing one); it sets how large a "
      "change counts as SAME";
  EXPECT_EQ(error("0.001", "-1.5"), "x.csv: data row 1: column 'noise': '-1.5' " + bad_noise);
  EXPECT_EQ(error("0.001", "nan"), "x.csv: data row 1: column 'noise': 'nan' " + bad_noise);
  EXPECT_EQ(error("0.001", "inf"), "x.csv: data row 1: column 'noise': 'inf' " + bad_noise);
  const std::string bad_time = "is not a time (a finite number > 0, or empty for a missing one)";
  EXPECT_EQ(error("-0.001", "0"), "x.csv: data row 1: column 'median_s': '-0.001' " + bad_time);
  EXPECT_EQ(error("nan", "0"), "x.csv: data row 1: column 'median_s': 'nan' " + bad_time);
  EXPECT_EQ(error("inf", "0"), "x.csv: data row 1: column 'median_s': 'inf' " + bad_time);
  EXPECT_EQ(error("0", "0"), "x.csv: data row 1: column 'median_s': '0' " + bad_time);
  EXPECT_EQ(error("0.001", ""), "");  // no noise: the threshold floor applies
  EXPECT_EQ(error("", "0.01"), "");   // no median: the row is INVALID
  EXPECT_EQ(error("0.001", "0"), "");
  try {
    kb::timing_table(table_of({"shape_id", "impl", "median_ms"}, {{"a", "x", "-1"}}), "p.csv");
    FAIL() << "no error";
  } catch (const kb::CompareError& e) {
    EXPECT_NE(std::string(e.what()).find("column 'median_ms': '-1' is not a time"),
              std::string::npos)
        << e.what();
  }
}

// Issue 18, item 4: --fail-on-slower fails on everything a regression gate cannot vouch for.
TEST(Compare, RegressionGateFailures) {
  const auto a = kb::timing_table(
      table_of({"shape_id", "path", "mode", "median_s", "noise"},
               {{"s1", "fused", "warm", "0.001", "0.002"},
                {"s2", "fused", "warm", "0.001", "0.002"},
                {"s3", "fused", "warm", "0.001", "0.002"},
                {"s4", "fused", "warm", "0.001", "0.002"},
                {"gone", "fused", "warm", "0.001", "0.002"}}),
      "a.csv");
  const auto b = kb::timing_table(
      table_of({"shape_id", "path", "mode", "verdict", "median_s", "noise"},
               {{"s1", "fused", "warm", "passed", "0.001", "0.002"},
                {"s2", "fused", "warm", "passed", "0.002", "0.002"},        // 2x slower
                {"s3", "fused", "warm", "not verified", "0.001", "0.002"},  // unverified
                {"s4", "fused", "warm", "passed", "", "0.002"},             // no median
                {"new", "fused", "warm", "passed", "0.001", "0.002"}}),
      "b.csv");
  EXPECT_TRUE(b.has_verdict);
  const kb::CompareReport r = kb::compare_tables(a, b, {});
  EXPECT_EQ(kb::regression_gate_failures(r),
            (std::vector<std::string>{"SLOWER: s2 / fused (warm) (B/A 2.000)",
                                      "not verified in B: s3 / fused (warm) (verdict 'not verified')",
                                      "INVALID: s4 / fused (warm) (no usable median or noise in A or B)",
                                      "missing in B: gone / fused (warm)"}));
  // A file against itself passes; a B without a verdict column (a peer's) is not held to one.
  EXPECT_FALSE(a.has_verdict);
  EXPECT_TRUE(kb::regression_gate_failures(kb::compare_tables(a, a, {})).empty());
}

// ---------------------------------------------------------------------------------------------
// result model and printers

namespace {
kb::RunRow make_row(const std::string& shape, const std::string& path, double median,
                    int64_t heads = 96) {
  kb::RunRow r;
  r.shape_id = shape;
  r.size.tokens = 8192;
  r.size.heads = heads;
  r.size.num_states = 1;
  r.path = *kda::harness::parse_path(path);
  r.mode = "warm";
  r.verdict = kda::harness::Verdict::passed;
  r.stop = kb::StopReason::noise_target;
  r.gpu_s = {median * 0.99, median, median, median, median * 1.01};
  r.cpu_s = {median * 1.1, median * 1.1, median * 1.1, median * 1.1, median * 1.1};
  r.clock_hz = {1.9e9, 1.9e9, kNaN, 1.9e9, 1.9e9};
  r.bytes = kb::path_bytes(r.size, r.path);
  r.floor_bytes = kb::floor_bytes(r.size, r.path);
  r.workspace_bytes = 1 << 20;
  r.finalize();
  return r;
}

kb::RunContext make_context() {
  kb::RunContext ctx;
  ctx.run_id = "test-run";
  ctx.device_name = "NVIDIA H200";
  ctx.cc = "9.0";
  ctx.sm_count = 132;
  ctx.default_sm_clock_hz = 1.98e9;
  ctx.peak_mem_bw_Bps = 4.8e12;
  ctx.git_commit = "abc123";
  ctx.seed = 7;
  return ctx;
}
}  // namespace

TEST(Results, DerivedMetrics) {
  const kb::RunContext ctx = make_context();
  const kb::RunRow r = make_row("h96-fixed", "fused", 1.0e-3);
  EXPECT_DOUBLE_EQ(r.gpu.median, 1.0e-3);
  EXPECT_DOUBLE_EQ(r.sm_clock_mean_hz, 1.9e9);  // the unknown clock is left out
  EXPECT_DOUBLE_EQ(kb::achieved_Bps(r), 1211105280.0 / 1e-3);
  EXPECT_NEAR(kb::floor_s(ctx, r), 1211105280.0 / 4.25e12, 1e-18);
  EXPECT_NEAR(kb::floor_share(ctx, r), 1211105280.0 / 4.25e12 / 1e-3, 1e-12);
  EXPECT_NEAR(kb::bw_util(ctx, r), 1211105280.0 / 1e-3 / 4.8e12, 1e-12);
  EXPECT_NEAR(kb::clock_scaling(ctx, r), 1.9 / 1.98, 1e-12);
  kb::RunRow stage = r;
  stage.stage = "intra";
  stage.bytes = stage.floor_bytes = 0;
  EXPECT_TRUE(std::isnan(kb::achieved_Bps(stage)));
  EXPECT_TRUE(std::isnan(kb::floor_share(ctx, stage)));
}

TEST(Results, JsonRowsAreTheCsvColumnsTypedPlusTheSamples) {
  const kb::RunContext ctx = make_context();
  std::vector<kb::RunRow> rows = {make_row("h96-fixed", "fused", 1.4e-3),
                                  make_row("h96-fixed", "l2norm", 0.1e-3)};
  rows[1].verdict = kda::harness::Verdict::failed;
  const kb::RunSummary summary = kb::summarize_run(rows);
  const nlohmann::json doc = nlohmann::json::parse(
      kb::results_json(ctx, {{"name", "NVIDIA H200"}}, {{"modes", {"warm"}}}, rows, summary,
                       nullptr));
  EXPECT_EQ(doc["tool"], "kda-bench");
  EXPECT_EQ(doc["schema_version"], kb::kJsonSchemaVersion);
  EXPECT_EQ(doc["device"]["name"], "NVIDIA H200");
  EXPECT_FALSE(doc.contains("baseline_compare"));
  ASSERT_EQ(doc["rows"].size(), 2u);
  const kh::Table csv = kh::parse_csv(kb::results_csv(ctx, rows), "run.csv");
  for (const auto& row : doc["rows"]) {
    for (const std::string& column : csv.columns) EXPECT_TRUE(row.contains(column)) << column;
    EXPECT_EQ(row.size(), csv.columns.size() + 4);  // samples x 3, rejected_samples
  }
  const auto& fused = doc["rows"][0];
  EXPECT_EQ(fused["path"], "fused");
  EXPECT_EQ(fused["median_s"].get<double>(), rows[0].gpu.median);  // a number, full precision
  EXPECT_EQ(fused["heads"].get<int64_t>(), 96);
  EXPECT_EQ(fused["samples_gpu_s"].size(), rows[0].gpu_s.size());
  EXPECT_TRUE(fused["samples_sm_clock_hz"][2].is_null());  // the unknown clock
  EXPECT_EQ(doc["rows"][1]["verdict"], "failed");
  EXPECT_EQ(doc["warnings"].size(), kb::run_warnings(rows).size());
  EXPECT_TRUE(doc["meta"]["stages_not_run"].empty());
  kb::RunContext staged = ctx;
  staged.stages_not_run = {"h96-fixed fused:one_pass"};
  const nlohmann::json with_stages =
      nlohmann::json::parse(kb::results_json(staged, {}, {}, rows, summary, nullptr));
  ASSERT_EQ(with_stages["meta"]["stages_not_run"].size(), 1u);
  EXPECT_EQ(with_stages["meta"]["stages_not_run"][0], "h96-fixed fused:one_pass");
}

TEST(Results, CsvHasStableColumnsAndRoundTripsThroughTheHarnessReader) {
  const kb::RunContext ctx = make_context();
  std::vector<kb::RunRow> rows = {make_row("h96-fixed", "fused", 1.4e-3),
                                  make_row("h96-fixed", "explicit", 1.5e-3),
                                  make_row("h96-fixed", "l2norm", 0.1e-3)};
  rows[1].verdict = kda::harness::Verdict::failed;
  rows[1].verdict_detail = "failed: output max error 3.5, budget 0.01, \"quoted\"";
  rows[2].calls_per_sample = 3;
  rows[2].sample_method = "graph_batch";
  rows[1].gate = "mixed";
  const std::string path = scratch("results.csv");
  kh::write_text_file_atomic(path, kb::results_csv(ctx, rows), false);

  const kh::Table t = kh::read_csv(path);
  const std::vector<std::string> expected_start = {
      "run_id", "utc_time", "git_commit", "device_name", "cc", "sm_count",
      "default_sm_clock_hz", "driver_version", "runtime_version", "shape_id", "batch", "tokens",
      "heads", "num_seqs", "token_heads", "path", "stage", "mode", "verdict", "verdict_detail",
      "samples", "warmup_runs", "converged", "timed_out", "stop_reason", "throttle_discards",
      "median_s", "mean_s", "min_s", "max_s", "p20_s", "p80_s", "q1_s", "q3_s", "noise"};
  ASSERT_GE(t.columns.size(), expected_start.size());
  for (size_t i = 0; i < expected_start.size(); ++i) EXPECT_EQ(t.columns[i], expected_start[i]);
  ASSERT_EQ(t.rows.size(), 3u);
  auto col = [&](const std::string& name) {
    for (size_t i = 0; i < t.columns.size(); ++i)
      if (t.columns[i] == name) return i;
    ADD_FAILURE() << "no column " << name;
    return size_t{0};
  };
  EXPECT_EQ(t.rows[0][col("shape_id")], "h96-fixed");
  EXPECT_EQ(std::stod(t.rows[0][col("median_s")]), 1.4e-3);  // exact round trip
  EXPECT_EQ(t.rows[0][col("bytes")], "1211105280");
  EXPECT_EQ(t.rows[0][col("token_heads")], "786432");
  EXPECT_EQ(t.rows[0][col("samples")], "5");
  EXPECT_EQ(t.rows[0][col("converged")], "1");
  EXPECT_EQ(t.rows[0][col("stop_reason")], "noise");
  EXPECT_EQ(t.rows[0][col("stage")], "");
  EXPECT_EQ(t.rows[1][col("verdict_detail")], rows[1].verdict_detail);
  EXPECT_EQ(t.rows[0][col("calls_per_sample")], "1");
  EXPECT_EQ(t.rows[0][col("sample_method")], "call");
  EXPECT_EQ(t.rows[2][col("calls_per_sample")], "3");
  EXPECT_EQ(t.rows[2][col("sample_method")], "graph_batch");
  EXPECT_EQ(t.columns.back(), "gate");  // appended after sample_method
  EXPECT_EQ(t.columns[t.columns.size() - 2], "sample_method");
  EXPECT_EQ(t.columns[t.columns.size() - 3], "calls_per_sample");
  EXPECT_EQ(t.rows[1][col("gate")], "mixed");
  EXPECT_EQ(std::stod(t.rows[2][col("noise")]), rows[2].gpu.noise);

  // The file is refused without overwrite, and a second run compares SAME on every row.
  EXPECT_THROW(kh::write_text_file_atomic(path, "x", false), kh::OutputError);
  const kb::TimingTable a = kb::read_timing_table(path);
  EXPECT_TRUE(a.has_mode);
  EXPECT_TRUE(a.has_stage);
  const kb::CompareReport r = kb::compare_tables(a, a, {});
  EXPECT_EQ(r.same, 3);
  EXPECT_DOUBLE_EQ(r.geomean_ratio, 1.0);
}

TEST(Results, RunSummaryRatiosSavingsAndGeomeans) {
  std::vector<kb::RunRow> rows = {
      make_row("a", "fused", 1.0e-3),          make_row("a", "explicit", 1.1e-3),
      make_row("a", "l2norm", 0.2e-3),         make_row("b", "fused", 2.0e-3, 64),
      make_row("b", "explicit", 2.5e-3, 64),   make_row("b", "l2norm", 0.25e-3, 64)};
  kb::RunRow stage = make_row("a", "fused", 0.5e-3);
  stage.stage = "intra";  // stage rows are not part of the summary
  rows.push_back(stage);
  const kb::RunSummary s = kb::summarize_run(rows);
  ASSERT_EQ(s.shapes.size(), 2u);
  EXPECT_NEAR(s.shapes[0].ratio, 1.0 / 1.1, 1e-12);
  EXPECT_NEAR(s.shapes[0].saving_s, 0.1e-3, 1e-15);
  EXPECT_NEAR(s.shapes[0].saving_share, 0.5, 1e-9);
  EXPECT_NEAR(s.shapes[1].ratio, 0.8, 1e-12);
  EXPECT_NEAR(s.shapes[1].saving_share, 2.0, 1e-9);
  ASSERT_EQ(s.geomeans.size(), 1u);
  const kb::ModeGeomeans& g = s.geomeans[0];
  EXPECT_EQ(g.mode, "warm");
  EXPECT_EQ(g.shapes, 2);
  EXPECT_NEAR(g.ratio, std::sqrt(0.8 / 1.1), 1e-12);
  EXPECT_NEAR(g.fused_s, std::sqrt(2.0e-6), 1e-15);
  EXPECT_NEAR(g.explicit_s, std::sqrt(1.1e-3 * 2.5e-3), 1e-15);
  EXPECT_NEAR(g.saving_share, (g.explicit_s - g.fused_s) / std::sqrt(0.2e-3 * 0.25e-3), 1e-9);

  // A shape with only one path has no ratio and is left out of the ratio geomean.
  const kb::RunSummary lone = kb::summarize_run({make_row("c", "fused", 1e-3)});
  ASSERT_EQ(lone.shapes.size(), 1u);
  EXPECT_TRUE(std::isnan(lone.shapes[0].ratio));
  EXPECT_EQ(lone.geomeans[0].shapes, 0);
  // No raw rows: no raw figures.
  EXPECT_TRUE(std::isnan(s.shapes[0].raw_s));
  EXPECT_EQ(g.raw_shapes, 0);
  EXPECT_TRUE(std::isnan(g.raw_ratio));
}

TEST(Results, RawAgainstFusedPerShapeAndGeomean) {
  const std::vector<kb::RunRow> rows = {
      make_row("a", "fused", 1.0e-3), make_row("a", "raw", 1.2e-3),
      make_row("b", "fused", 2.0e-3, 64), make_row("b", "raw", 2.1e-3, 64),
      make_row("c", "raw", 3.0e-3)};  // no fused row: no ratio
  const kb::RunSummary s = kb::summarize_run(rows);
  ASSERT_EQ(s.shapes.size(), 3u);
  EXPECT_NEAR(s.shapes[0].raw_s, 1.2e-3, 1e-15);
  EXPECT_NEAR(s.shapes[0].raw_ratio, 1.2, 1e-12);
  EXPECT_NEAR(s.shapes[1].raw_ratio, 1.05, 1e-12);
  EXPECT_TRUE(std::isnan(s.shapes[2].raw_ratio));
  const kb::ModeGeomeans& g = s.geomeans.at(0);
  EXPECT_EQ(g.raw_shapes, 2);
  EXPECT_NEAR(g.raw_ratio, std::sqrt(1.2 * 1.05), 1e-12);
  EXPECT_NEAR(g.raw_s, std::cbrt(1.2e-3 * 2.1e-3 * 3.0e-3), 1e-15);
  // The markdown has its own table for it; the JSON summary the two values.
  const kb::RunContext ctx = make_context();
  const std::string md = kb::results_markdown(ctx, rows, s);
  EXPECT_NE(md.find("## Raw vs fused"), std::string::npos) << md;
  EXPECT_NE(md.find("| raw (us) | fused (us) | raw/fused |"), std::string::npos) << md;
  EXPECT_NE(md.find("1.200"), std::string::npos) << md;
  const nlohmann::json doc =
      nlohmann::json::parse(kb::results_json(ctx, {}, {}, rows, s, nullptr));
  EXPECT_NEAR(doc["summary"]["per_shape"][0]["raw_over_fused"].get<double>(), 1.2, 1e-12);
  EXPECT_TRUE(doc["summary"]["per_shape"][2]["raw_over_fused"].is_null());
  EXPECT_NEAR(doc["summary"]["geomeans"][0]["raw_s"].get<double>(), g.raw_s, 1e-18);
  // A run without raw rows has no such table.
  const std::vector<kb::RunRow> plain = {make_row("a", "fused", 1.0e-3)};
  EXPECT_EQ(kb::results_markdown(ctx, plain, kb::summarize_run(plain)).find("## Raw vs fused"),
            std::string::npos);
}

// Stages a call's kernel choice did not run have no rows; the report names each one, and says
// nothing when every stage ran.
TEST(Results, MarkdownNamesTheStagesNotRun) {
  kb::RunContext ctx = make_context();
  const std::vector<kb::RunRow> rows = {make_row("a", "fused", 1.0e-3)};
  EXPECT_EQ(kb::results_markdown(ctx, rows, kb::summarize_run(rows)).find("## Stages not run"),
            std::string::npos);
  ctx.stages_not_run = {"h96-uniform8 fused:prep", "h96-uniform8 fused:scan"};
  const std::string md = kb::results_markdown(ctx, rows, kb::summarize_run(rows));
  const size_t section = md.find("## Stages not run");
  ASSERT_NE(section, std::string::npos);
  EXPECT_NE(md.find("- h96-uniform8 fused:prep\n", section), std::string::npos);
  EXPECT_NE(md.find("- h96-uniform8 fused:scan\n", section), std::string::npos);
}

TEST(Results, MarkdownReportAndWarnings) {
  const kb::RunContext ctx = make_context();
  std::vector<kb::RunRow> rows = {make_row("a", "fused", 1.0e-3),
                                  make_row("a", "explicit", 1.1e-3)};
  rows[1].stop = kb::StopReason::timeout;
  rows[1].throttle_discards = 3;
  rows[0].verdict = kda::harness::Verdict::failed;
  rows[0].verdict_detail = "failed: output has 12 non-finite values";
  const std::string md = kb::results_markdown(ctx, rows, kb::summarize_run(rows));
  EXPECT_NE(md.find("## Results"), std::string::npos);
  EXPECT_NE(md.find("| median (us) |"), std::string::npos);
  EXPECT_EQ(md.find("(us) (us)"), std::string::npos);
  EXPECT_NE(md.find("| noise (%) |"), std::string::npos);
  EXPECT_NE(md.find("1000.0"), std::string::npos);  // 1 ms in us
  EXPECT_NE(md.find("## Fused vs explicit"), std::string::npos);
  EXPECT_NE(md.find("0.909"), std::string::npos);   // 1.0 / 1.1
  EXPECT_NE(md.find("geomean (1 shapes)"), std::string::npos);
  EXPECT_EQ(md.find("| stage"), std::string::npos);  // no stage rows: column hidden
  EXPECT_NE(md.find("| calls/sample | sampling |"), std::string::npos);  // how it was measured
  EXPECT_NE(md.find("graph_batch = one replay of a graph"), std::string::npos);
  if (::testing::Test::HasFailure()) std::cout << md;
  const auto w = kb::run_warnings(rows);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_NE(w[0].find("verification failed"), std::string::npos);
  EXPECT_NE(w[1].find("did not converge (timeout)"), std::string::npos);
  EXPECT_NE(w[2].find("3 samples discarded as throttled"), std::string::npos);
}

TEST(Statistics, Correlation) {
  const std::vector<double> x{1, 2, 3, 4, 5};
  EXPECT_NEAR(kb::correlation(x, std::vector<double>{2, 1, 4, 3, 5}), 0.8, 1e-15);
  EXPECT_NEAR(kb::correlation(x, std::vector<double>{10, 8, 6, 4, 2}), -1.0, 1e-15);
  // Pairs with a non-finite side are left out: this is {1, 2, 4} against {3, 5, 9}.
  EXPECT_NEAR(kb::correlation(x, std::vector<double>{3, 5, kNaN, 9, kInf}), 1.0, 1e-15);
  EXPECT_TRUE(std::isnan(kb::correlation(x, std::vector<double>{1, kNaN, kNaN, kNaN, 2})));
  EXPECT_TRUE(std::isnan(kb::correlation(x, std::vector<double>{7, 7, 7, 7, 7})));
  EXPECT_TRUE(std::isnan(kb::correlation(std::vector<double>{}, std::vector<double>{})));
}

// Noise above the target that follows the per-sample SM clock is named as the card's clock steps
// (the h96 rows on the H200: 1.31 ms at 1814 MHz, up to 1.55 ms at 1527 MHz); noise that does
// not follow the clock, and rows that met the noise target, get no such line.
TEST(Results, ClockDrivenNoiseWarning) {
  kb::RunRow stepped = make_row("h96-fixed", "fused", 1.3e-3);
  stepped.gpu_s.clear();
  stepped.clock_hz.clear();
  for (int i = 0; i < 200; ++i) {
    const double hz = i % 4 == 0 ? 1.6e9 : 1.8e9;
    const double jitter = 1.0 + 1e-4 * ((i * 37) % 11 - 5);
    stepped.gpu_s.push_back(1.3e-3 * 1.8e9 / hz * jitter);
    stepped.clock_hz.push_back(i == 7 ? kNaN : hz);  // an unknown clock is left out
  }
  stepped.stop = kb::StopReason::noise_stable;
  stepped.finalize();
  const auto clock = kb::clock_driven_noise(stepped);
  ASSERT_TRUE(clock.has_value());
  EXPECT_GT(clock->correlation, 0.99);
  EXPECT_DOUBLE_EQ(clock->min_hz, 1.6e9);
  EXPECT_DOUBLE_EQ(clock->max_hz, 1.8e9);

  kb::RunRow unrelated = stepped;  // the same times, clocks that do not follow them
  for (size_t i = 0; i < unrelated.clock_hz.size(); ++i) {
    unrelated.clock_hz[i] = i % 4 == 2 ? 1.6e9 : 1.8e9;
  }
  EXPECT_FALSE(kb::clock_driven_noise(unrelated).has_value());

  kb::RunRow met = stepped;  // stopped at the noise target: nothing to explain
  met.stop = kb::StopReason::noise_target;

  const auto w = kb::run_warnings({stepped, unrelated, met});
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("h96-fixed fused warm: noise"), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("follows the SM clock"), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("1600-1800 MHz"), std::string::npos) << w[0];
}

// A run whose every shape was skipped (K != 128 on the GPU) still prints and writes its reports.
TEST(Results, EmptyRunStillPrints) {
  const kb::RunContext ctx = make_context();
  const std::vector<kb::RunRow> rows;
  const std::string md = kb::results_markdown(ctx, rows, kb::summarize_run(rows));
  EXPECT_NE(md.find("## Results"), std::string::npos) << md;
  const std::string csv = kb::results_csv(ctx, rows);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1) << csv;  // the header line only
  EXPECT_TRUE(kb::run_warnings(rows).empty());
}

TEST(Format, Numbers) {
  EXPECT_EQ(kb::csv_number(kNaN), "");
  EXPECT_EQ(kb::csv_number(kInf), "inf");
  EXPECT_EQ(kb::csv_number(0.001), "0.001");
  EXPECT_EQ(std::stod(kb::csv_number(1.0 / 3.0)), 1.0 / 3.0);
  EXPECT_EQ(kb::human_number(1.4523e-3, kb::Unit::seconds), "1452.3");
  EXPECT_EQ(kb::human_number(0.0031, kb::Unit::fraction), "0.31");
  EXPECT_EQ(kb::human_number(1211105280.0, kb::Unit::bytes), "1211.1");
  EXPECT_EQ(kb::human_number(4.25e12, kb::Unit::bytes_per_s), "4.250");
  EXPECT_EQ(kb::human_number(kNaN, kb::Unit::seconds), "");
  EXPECT_EQ(kb::percent_text(0.005), "0.50%");
}
