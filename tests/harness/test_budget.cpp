// Error budgets (kda-forward.md §9.4) on hand-made cases whose arithmetic is exact in binary.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kda/harness/budget.h"

namespace kda::harness {
namespace {

// golden max 4, low's worst error 0.0625: budget = 2 * (0.0625 + 4 / 128) = 0.1875 exactly.
const std::vector<double> kGolden = {1.0, -2.0, 4.0, 0.5};
const std::vector<double> kLow = {1.0, -2.0, 4.0625, 0.5};

// The RMS gate is switched off so the max-error rule is tested alone.
BudgetRule max_error_only() {
  BudgetRule rule;
  rule.rms_limit = std::numeric_limits<double>::infinity();
  return rule;
}

TEST(Budget, PassesExactlyAtTheBoundary) {
  const std::vector<double> actual = {1.0, -2.0 - 0.1875, 4.0, 0.5};
  const Judgement j = judge(kGolden, kLow, actual, max_error_only());
  EXPECT_EQ(j.elements, 4);
  EXPECT_EQ(j.ref_err, 0.0625);
  EXPECT_EQ(j.max_golden, 4.0);
  EXPECT_EQ(j.budget, 0.1875);
  EXPECT_EQ(j.max_abs_err, 0.1875);
  EXPECT_EQ(j.worst_index, 1);
  EXPECT_TRUE(j.within_budget);
  EXPECT_TRUE(j.passed());
  EXPECT_EQ(j.verdict(), "passed");
}

TEST(Budget, FailsJustOver) {
  const std::vector<double> actual = {1.0, -2.0, 4.0, 0.5 + 0.1875 + 0x1p-40};
  const Judgement j = judge(kGolden, kLow, actual, max_error_only());
  EXPECT_FALSE(j.within_budget);
  EXPECT_FALSE(j.passed());
  EXPECT_EQ(j.worst_index, 3);
  // Two digits would print 1.9e-1 > 1.9e-1: the verdict adds digits until the numbers differ.
  EXPECT_EQ(j.verdict(), "failed: max abs err 1.87500000001e-1 > budget 1.87500000000e-1");

  const std::vector<double> far = {1.0, -2.0, 4.0, 0.5 + 0.75};
  EXPECT_EQ(judge(kGolden, kLow, far, max_error_only()).verdict(),
            "failed: max abs err 7.5e-1 > budget 1.9e-1");
}

TEST(Budget, NonFiniteAlwaysFails) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  Judgement j = judge(kGolden, kLow, std::vector<double>{1.0, nan, 4.0, 0.5}, max_error_only());
  EXPECT_EQ(j.non_finite, 1);
  EXPECT_TRUE(std::isinf(j.max_abs_err));
  EXPECT_EQ(j.worst_index, 1);
  EXPECT_FALSE(j.passed());
  EXPECT_EQ(j.verdict(), "failed: 1 non-finite value");

  j = judge(kGolden, kLow, std::vector<double>{inf, nan, -inf, 0.5});
  EXPECT_EQ(j.non_finite, 3);
  EXPECT_EQ(j.worst_index, 0);
  EXPECT_EQ(j.verdict(), "failed: 3 non-finite values");

  // A non-finite golden is a broken reference: never a pass.
  j = judge(std::vector<double>{nan, 1.0}, std::vector<double>{nan, 1.0}, std::vector<double>{nan, 1.0});
  EXPECT_FALSE(j.passed());
  EXPECT_EQ(j.verdict(), "failed: the reference has 1 non-finite value");
}

TEST(Budget, RelativeRmsGate) {
  // golden all ones; low exact; budget = 2 * (0 + 1/128) = 0.015625, so only the RMS gate bites.
  const std::vector<double> golden(100, 1.0);
  std::vector<double> actual(100, 1.0 + 0.0049);
  Judgement j = judge(golden, golden, actual);
  EXPECT_TRUE(j.within_budget);
  EXPECT_NEAR(j.rel_rms, 0.0049, 1e-12);
  EXPECT_TRUE(j.within_rms);
  EXPECT_TRUE(j.passed());

  actual.assign(100, 1.0 + 0.0061);
  j = judge(golden, golden, actual);
  EXPECT_TRUE(j.within_budget);
  EXPECT_FALSE(j.within_rms);
  EXPECT_EQ(j.verdict(), "failed: rel RMS 6.1e-3 >= 5e-3");

  // The limit itself fails (strict <), and both reasons are listed when both gates fail.
  BudgetRule rule;
  rule.rms_limit = 0.25;
  actual.assign(100, 1.25);
  j = judge(golden, golden, actual, rule);
  EXPECT_EQ(j.rel_rms, 0.25);
  EXPECT_EQ(j.verdict(), "failed: max abs err 2.5e-1 > budget 1.6e-2; rel RMS 2.5e-1 >= 2.5e-1");
}

TEST(Budget, ZeroGoldenAndEmpty) {
  const std::vector<double> zeros(8, 0.0);
  Judgement j = judge(zeros, zeros, zeros);
  EXPECT_EQ(j.rel_rms, 0.0);
  EXPECT_TRUE(j.passed());
  // Any error against an all-zero golden has infinite relative RMS (and exceeds a zero budget).
  std::vector<double> actual = zeros;
  actual[3] = 1e-30;
  j = judge(zeros, zeros, actual);
  EXPECT_TRUE(std::isinf(j.rel_rms));
  EXPECT_FALSE(j.passed());

  j = judge({}, {}, {});
  EXPECT_EQ(j.elements, 0);
  EXPECT_TRUE(j.passed());
  EXPECT_EQ(j.verdict(), "passed");
}

TEST(Budget, HugeValuesDoNotOverflowTheRms) {
  const std::vector<double> golden = {1e300, -1e300};
  const std::vector<double> actual = {1.001e300, -1e300};
  const Judgement j = judge(golden, golden, actual);
  EXPECT_TRUE(std::isfinite(j.rel_rms));
  EXPECT_NEAR(j.rel_rms, 0.001 / std::sqrt(2.0), 1e-9);
}

TEST(Budget, LengthMismatchThrows) {
  EXPECT_THROW(judge(std::vector<double>{1.0}, std::vector<double>{1.0, 2.0}, std::vector<double>{1.0}),
               std::invalid_argument);
}

TEST(Budget, FusedAgainstExplicit) {
  // The explicit path's error sets the budget for the fused path.
  const std::vector<double> golden = {1.0, 2.0};
  const std::vector<double> explicit_out = {1.0, 2.125};  // budget 2 * (0.125 + 2/128) = 0.28125
  EXPECT_TRUE(judge_against_explicit(golden, explicit_out, std::vector<double>{1.0, 2.0 + 0.28125},
                                     max_error_only())
                  .passed());
  EXPECT_FALSE(judge_against_explicit(golden, explicit_out, std::vector<double>{1.0, 2.0 + 0.3},
                                      max_error_only())
                   .passed());
}

TEST(StateCarry, WeakWhenTheResetOutputWouldPass) {
  const std::vector<double> golden = {1.0, -2.0, 3.0, 0.5};
  const std::vector<double> low = {1.0, -2.0, 3.0, 0.5};
  // The reset output is far off: the carry matters, the row tests the recurrence.
  const std::vector<double> far = {0.0, -1.0, 2.0, 0.5};
  const StateCarry strong = judge_state_carry(golden, low, far);
  EXPECT_FALSE(strong.weak);
  EXPECT_NEAR(strong.rel_rms, std::sqrt(3.0 / (1 + 4 + 9 + 0.25)), 1e-12);
  EXPECT_EQ(strong.text(), "4.59e-01");
  // Within the budget (2 * 2^-7 * 3 = 0.047) and the RMS gate: weak.
  const std::vector<double> near = {1.0 + 1e-4, -2.0, 3.0, 0.5};
  const StateCarry weak = judge_state_carry(golden, low, near);
  EXPECT_TRUE(weak.weak);
  EXPECT_EQ(weak.text(), "2.65e-05 (weak)");
}

}  // namespace
}  // namespace kda::harness
