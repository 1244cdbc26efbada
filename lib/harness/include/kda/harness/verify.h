// CPU verification (kda-forward.md §9.4), shared by kda-check and kda-bench: the references a GPU
// result is judged against, the judging of one run of a path, and the report rows kda-check makes
// of them. Pure CPU: the apps run the kernels (apps/common/device_check.h) and hand the
// downloaded outputs here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kda/harness/budget.h"
#include "kda/harness/check_results.h"
#include "kda/harness/inputs.h"
#include "kda/harness/problem.h"

namespace kda::harness {

// golden = fp64 per-token recurrence on fp64-normalized q; low = the same reference in fp32.
// Made from the contract inputs (compute_golden: the fused, explicit and l2norm paths) or from
// the raw ones (compute_raw_golden: Path::raw).
struct Golden {
  std::vector<double> out, final_state;
  std::vector<double> out_low, final_state_low;
  std::vector<double> q_hat, q_hat_low;  // l2norm(q) in fp64 / fp32 (for the l2norm pass)
  // How much the state carried between chunks moves `out` (the fp64 golden with the state reset
  // at every chunk start, kda::ref::Options::reset_state_at_chunk_starts): a weak carry says the
  // inputs cannot tell a correct recurrence from one that drops the state (docs/checking.md).
  StateCarry carry;
  double seconds = 0.0;  // wall time spent on the references
  bool raw_inputs = false;  // made by compute_raw_golden (judge_path checks it fits the path)
};
// With state_carry, also the carry figure (one more fp64 run; judged by `rule`).
Golden compute_golden(const HostInputs& inputs, const BudgetRule& rule = {},
                      bool state_carry = false);

// The references of Path::raw: the same recurrences fed what the raw inputs mean, k = l2norm of
// raw_k and beta = sigmoid of beta_logits, computed in the reference's own precision (fp64 for
// the golden, fp32 for low, as q's norm), with q, v, the gate and the state of the contract
// paths (raw q is q; gate is the fp64 producer's output on raw_gate, a_log, dt_bias). k and beta
// are rounded once to fp32, the dtype kda::ref::Problem holds (2^-24 relative). A second pair
// of CPU references: compute it only when the raw path runs. No q_hat. Throws
// std::invalid_argument for inputs without raw tensors (HostInputs::has_raw_inputs).
Golden compute_raw_golden(const HostInputs& inputs, const BudgetRule& rule = {},
                          bool state_carry = false);

// Output elements in rows at or after cu[N] (packed inputs only) that are not exactly zero (NaN
// counts, -0.0 does not).
int64_t count_nonzero_inactive(const HostInputs& inputs, const std::vector<float>& out);

// Widen to double for the budget functions.
std::vector<double> widen(const std::vector<float>& values);

// One checked run of a path on NaN-poisoned outputs. For Path::l2norm the "out" tensor is q_hat.
struct PathCheck {
  Path path = Path::fused;
  std::vector<float> out, final_state;  // what the path produced (first run)
  Judgement out_judgement;
  Judgement final_state_judgement;
  bool final_state_checked = false;
  int64_t inactive_nonzero = 0;  // non-zero elements in rows at or after cu[N]
  bool repeat_checked = false;
  bool repeat_bitwise = true;  // a second run gave the same bits
  bool passed() const { return reason().empty(); }
  std::string reason() const;   // "" when passed, else the first reason
  std::string verdict() const;  // "passed" or "failed: <first reason>"
};

// Judges a run's downloaded outputs (`out`, and `final_state` when the inputs want one) with
// `rule`; the repeat fields are the caller's. `golden` must be compute_raw_golden's for
// Path::raw and compute_golden's for the others (else std::logic_error).
PathCheck judge_path(Path path, const HostInputs& inputs, const Golden& golden,
                     std::vector<float> out, std::vector<float> final_state,
                     const BudgetRule& rule = {});

// Soak (a long run for drift): every re-run's output compared bit for bit with the checked run.
struct SoakResult {
  int64_t runs = 0;
  int64_t differing = 0;            // runs whose bits differ from the checked run
  int64_t first_differing_run = 0;  // 1-based; 0 when none
  double seconds = 0.0;
  bool passed() const { return runs > 0 && differing == 0; }
  std::string reason() const;   // "<n> runs in <s> s, all bitwise equal ..." or why it failed
  std::string verdict() const;  // "passed: ..." or "failed: ..."
};

// --- the rows kda-check reports ---------------------------------------------------------------

// The reference backend (--backend reference): the chunked fp64 reference must agree with the
// fp64 recurrence to 1e-12 relative; the chunked fp32 reference is judged with the budget, its
// `low` being the fp32 recurrence. Dumps the references under dump_dir/<id>/ when dump_dir is not
// empty.
std::vector<CheckRow> check_references(const std::string& id, const HostInputs& inputs,
                                       const BudgetRule& rule, const std::string& dump_dir);

// A shape the GPU kernels do not take (K or V != 128): one "not verified" row.
CheckRow unsupported_dims_row(const std::string& id, const HostInputs& inputs);

// A path that was not run on these inputs, and why: the "out" row of `path`, "not verified:
// <reason>" (neither passed nor failed). `variant` empty when no variant could run it.
CheckRow path_not_run_row(const std::string& id, const HostInputs& inputs, Path path,
                          const std::string& variant, const std::string& reason);
// The reason of a raw row on inputs without raw tensors (a dump written before they existed).
inline constexpr const char* kNoRawInputs =
    "the dump has no raw inputs: dump again with this version";

// The rows of one checked GPU path: its output (q_hat for l2norm) and, when checked, its final
// state. `variant` names the forward's kernel variant (not shown on l2norm rows).
std::vector<CheckRow> path_rows(const std::string& id, const HostInputs& inputs,
                                const std::string& variant, const Golden& golden,
                                const PathCheck& check);

// Review point (c): the fused path may not be worse than the explicit path by more than the
// budget, the explicit output playing the role of `low` (only the budget part of the rule: the
// RMS gate is on the fused row itself).
CheckRow fused_vs_explicit_row(const std::string& id, const HostInputs& inputs,
                               const std::string& variant, const Golden& golden,
                               const PathCheck& fused, const PathCheck& explicit_path,
                               const BudgetRule& rule);

CheckRow soak_row(const std::string& id, Path path, const std::string& variant,
                  const SoakResult& soak);

}  // namespace kda::harness
