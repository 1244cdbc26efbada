// Error budgets (kda-forward.md §9.4).
#include "kda/harness/budget.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

namespace kda::harness {

namespace {

// "1.2e-2": `digits` significant digits, exponent without '+' or leading zeros.
std::string scientific(double value, int digits) {
  if (!std::isfinite(value)) return fmt::format("{}", value);
  std::string text = fmt::format("{:.{}e}", value, digits - 1);
  const size_t e = text.find('e');
  std::string mantissa = text.substr(0, e);
  int exponent = std::stoi(text.substr(e + 1));
  return fmt::format("{}e{}", mantissa, exponent);
}

// Like scientific() but with trailing mantissa zeros dropped: 5e-3, 6.5e-3.
std::string scientific_trimmed(double value) {
  std::string text = scientific(value, 3);
  const size_t e = text.find('e');
  if (e == std::string::npos) return text;
  std::string mantissa = text.substr(0, e);
  if (mantissa.find('.') != std::string::npos) {
    while (mantissa.back() == '0') mantissa.pop_back();
    if (mantissa.back() == '.') mantissa.pop_back();
  }
  return mantissa + text.substr(e);
}

// Two significant digits, or more when two would print an unequal pair as equal.
std::pair<std::string, std::string> distinct_pair(double a, double b) {
  for (int digits = 2; digits <= 17; ++digits) {
    std::string x = scientific(a, digits), y = scientific(b, digits);
    if (x != y || a == b) return {x, y};
  }
  return {scientific(a, 17), scientific(b, 17)};
}

}  // namespace

std::string Judgement::verdict() const {
  return passed() ? "passed" : "failed: " + reasons();
}

std::string Judgement::reasons() const {
  if (passed()) return "";
  if (golden_non_finite > 0) {
    return fmt::format("the reference has {} non-finite value{}", golden_non_finite,
                       golden_non_finite == 1 ? "" : "s");
  }
  if (non_finite > 0) {
    return fmt::format("{} non-finite value{}", non_finite, non_finite == 1 ? "" : "s");
  }
  std::vector<std::string> reasons;
  if (!within_budget) {
    auto [err, limit] = distinct_pair(max_abs_err, budget);
    reasons.push_back(fmt::format("max abs err {} > budget {}", err, limit));
  }
  if (!within_rms) {
    reasons.push_back(
        fmt::format("rel RMS {} >= {}", scientific(rel_rms, 2), scientific_trimmed(rms_limit)));
  }
  return fmt::format("{}", fmt::join(reasons, "; "));
}

Judgement judge(std::span<const double> golden, std::span<const double> low,
                std::span<const double> actual, const BudgetRule& rule) {
  if (golden.size() != low.size() || golden.size() != actual.size()) {
    throw std::invalid_argument(fmt::format(
        "judge: golden, low and actual differ in length ({}, {}, {})", golden.size(), low.size(),
        actual.size()));
  }
  Judgement j;
  j.elements = static_cast<int64_t>(golden.size());
  j.rms_limit = rule.rms_limit;
  if (golden.empty()) {
    j.within_budget = j.within_rms = true;
    return j;
  }

  for (size_t i = 0; i < golden.size(); ++i) {
    const int64_t index = static_cast<int64_t>(i);
    if (!std::isfinite(golden[i]) || !std::isfinite(low[i])) ++j.golden_non_finite;
    if (!std::isfinite(actual[i])) {
      if (j.non_finite++ == 0) j.worst_index = index;  // report the first non-finite element
      j.max_abs_err = std::numeric_limits<double>::infinity();
      continue;
    }
    const double err = std::abs(actual[i] - golden[i]);
    if (j.non_finite == 0 && (err > j.max_abs_err || j.worst_index < 0)) {
      j.max_abs_err = err;
      j.worst_index = index;
    }
    j.ref_err = std::max(j.ref_err, std::abs(low[i] - golden[i]));
    j.max_golden = std::max(j.max_golden, std::abs(golden[i]));
  }
  j.budget = rule.factor * (j.ref_err + rule.eps * j.max_golden);

  if (j.golden_non_finite > 0 || j.non_finite > 0) {
    j.rel_rms = std::numeric_limits<double>::infinity();
    j.within_budget = j.within_rms = false;
    return j;
  }
  j.within_budget = j.max_abs_err <= j.budget;

  // Sums of squares scaled by max|golden| so huge values cannot overflow (the scale cancels).
  const double scale = j.max_golden > 0.0 ? j.max_golden : 1.0;
  double err_sq = 0.0, golden_sq = 0.0;
  for (size_t i = 0; i < golden.size(); ++i) {
    const double d = (actual[i] - golden[i]) / scale;
    const double g = golden[i] / scale;
    err_sq += d * d;
    golden_sq += g * g;
  }
  if (err_sq == 0.0) {
    j.rel_rms = 0.0;
  } else if (golden_sq == 0.0) {
    j.rel_rms = std::numeric_limits<double>::infinity();
  } else {
    j.rel_rms = std::sqrt(err_sq / golden_sq);
  }
  j.within_rms = j.rel_rms < rule.rms_limit;
  return j;
}

StateCarry judge_state_carry(std::span<const double> golden, std::span<const double> low,
                             std::span<const double> local, const BudgetRule& rule) {
  const Judgement j = judge(golden, low, local, rule);
  StateCarry carry;
  carry.rel_rms = j.rel_rms;
  carry.weak = j.passed();
  return carry;
}

std::string StateCarry::text() const {
  return fmt::format("{:.2e}{}", rel_rms, weak ? " (weak)" : "");
}

}  // namespace kda::harness
