// Error budgets (kda-forward.md §9.4), pure CPU.
//   pass iff every element of actual is finite
//        and max|actual - golden| <= factor * (max|low - golden| + eps * max|golden|)
//        and RMS(actual - golden) / RMS(golden) < rms_limit.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace kda::harness {

struct BudgetRule {
  double eps = 0.0078125;   // 2^-7 (bf16)
  double factor = 2.0;
  double rms_limit = 5e-3;  // FLA's threshold on the relative RMS error
};

struct Judgement {
  int64_t elements = 0;
  int64_t non_finite = 0;         // non-finite elements of actual
  int64_t golden_non_finite = 0;  // non-finite elements of golden or low (a broken reference: fails)
  double max_abs_err = 0.0;       // max |actual - golden| (inf when a non-finite value exists)
  int64_t worst_index = -1;       // flat index of the largest error
  double ref_err = 0.0;           // max |low - golden|
  double max_golden = 0.0;        // max |golden|
  double budget = 0.0;            // factor * (ref_err + eps * max_golden)
  double rel_rms = 0.0;           // RMS(actual - golden) / RMS(golden) (0 when both are 0)
  double rms_limit = 5e-3;        // the rule's RMS limit, kept for the verdict text
  bool within_budget = false;
  bool within_rms = false;
  bool passed() const { return non_finite == 0 && within_budget && within_rms; }
  // "passed" or "failed: <reason>[; <reason>]", e.g. "failed: 3 non-finite values",
  // "failed: max abs err 1.2e-2 > budget 8.0e-3", "failed: rel RMS 6.1e-3 >= 5e-3".
  std::string verdict() const;
  std::string reasons() const;  // the verdict without "failed: "; "" when passed
};

// low may be a float reference widened to double; all three spans have the same length (else
// std::invalid_argument). Empty spans pass trivially (elements = 0).
Judgement judge(std::span<const double> golden, std::span<const double> low,
                std::span<const double> actual, const BudgetRule& rule = {});

// Review point (c) for the fused path: the explicit path's output plays the role of `low`.
inline Judgement judge_against_explicit(std::span<const double> golden,
                                        std::span<const double> explicit_out,
                                        std::span<const double> fused_out,
                                        const BudgetRule& rule = {}) {
  return judge(golden, explicit_out, fused_out, rule);
}

// How much the state carried between chunks moves the golden output: `local` is the golden of the
// same inputs with the state reset at every chunk start
// (kda::ref::Options::reset_state_at_chunk_starts). A row whose
// carry is weak cannot tell a correct recurrence from a forward that drops the state: `local`
// itself would pass the same rule.
struct StateCarry {
  double rel_rms = 0.0;  // RMS(golden - local) / RMS(golden)
  bool weak = false;     // local passes judge(golden, low, local, rule)
  std::string text() const;  // "3.21e-01", or "1.2e-80 (weak)"
};
StateCarry judge_state_carry(std::span<const double> golden, std::span<const double> low,
                             std::span<const double> local, const BudgetRule& rule = {});

}  // namespace kda::harness
