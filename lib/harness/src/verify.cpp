// CPU verification (verify.h): the references, the judging of a path's outputs and kda-check's
// rows.
#include "kda/harness/verify.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "kda/harness/dump.h"
#include "kda/ref/reference.h"

namespace kda::harness {

namespace {

template <class S>
std::vector<double> to_double(const std::vector<S>& values) {
  return std::vector<double>(values.begin(), values.end());
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string sci(double v) {
  return check_cell_text(Cell(v), CellStyle::scientific);
}

std::vector<int64_t> out_shape(const HostInputs& in) {
  return {in.batch, in.tokens, in.heads, in.value_dim};
}

std::vector<int64_t> state_shape(const HostInputs& in) {
  return {in.num_states(), in.heads, in.key_dim, in.value_dim};
}

}  // namespace

std::vector<double> widen(const std::vector<float>& values) { return to_double(values); }

namespace {

// The references of one problem: the fp64 golden (the per-token recurrence is the ground truth
// and about twice as fast as the chunked reference on the contract shapes; they agree to 1e-12 in
// fp64: kda-check --backend reference), the state-carry figure (the same recurrence restarted at
// every chunk), then `to_low(problem)` turns the problem into the fp32 implementation's view
// (in place: no second copy of the inputs) for the fp32 twin.
template <class ToLow>
void run_recurrences(kda::ref::Problem& problem, const kda::ref::Options& options,
                     const BudgetRule& rule, bool state_carry, ToLow to_low, Golden& golden) {
  auto high = kda::ref::recurrent_forward<double>(problem, options);
  golden.out = std::move(high.out);
  golden.final_state = std::move(high.final_state);
  std::vector<double> local_out;
  if (state_carry) {
    kda::ref::Options local_options = options;
    local_options.final_state = false;
    local_options.reset_state_at_chunk_starts = true;
    local_out = kda::ref::recurrent_forward<double>(problem, local_options).out;
  }
  to_low(problem);
  auto low = kda::ref::recurrent_forward<float>(problem, options);
  golden.out_low = to_double(low.out);
  golden.final_state_low = to_double(low.final_state);
  if (state_carry) golden.carry = judge_state_carry(golden.out, golden.out_low, local_out, rule);
}

}  // namespace

Golden compute_golden(const HostInputs& inputs, const BudgetRule& rule, bool state_carry) {
  const auto start = std::chrono::steady_clock::now();
  kda::ref::Problem problem = inputs.to_reference();
  kda::ref::Options options;
  options.normalize_q = true;
  options.final_state = inputs.want_final_state;

  Golden golden;  // the fp32 implementation sees the contract inputs as they are
  run_recurrences(problem, options, rule, state_carry, [](kda::ref::Problem&) {}, golden);

  const int64_t rows = inputs.batch * inputs.tokens * inputs.heads;
  golden.q_hat.resize(problem.q.size());
  kda::ref::l2norm_rows<double>(problem.q.data(), golden.q_hat.data(), rows, inputs.key_dim);
  std::vector<float> q_hat_low(problem.q.size());
  kda::ref::l2norm_rows<float>(problem.q.data(), q_hat_low.data(), rows, inputs.key_dim);
  golden.q_hat_low = to_double(q_hat_low);

  golden.seconds = seconds_since(start);
  return golden;
}

namespace {

// k = l2norm_rows<S>(raw_k) and beta = sigmoid in S of beta_logits, each rounded once to fp32
// (kda::ref::Problem's dtype), into `problem` (whose other tensors are the contract ones).
template <class S>
void set_raw_k_and_beta(const HostInputs& in, kda::ref::Problem& problem) {
  const int64_t rows = in.batch * in.tokens * in.heads, dim = in.key_dim;
  constexpr int64_t kBlockRows = 256;  // a block's widened rows and S results stay small
  const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t first = block * kBlockRows;
    const int64_t count = std::min(kBlockRows, rows - first);
    std::vector<float> raw(static_cast<size_t>(count * dim));
    std::vector<S> normalized(raw.size());
    for (size_t j = 0; j < raw.size(); ++j) {
      raw[j] = bf16_to_float(in.raw_k[static_cast<size_t>(first * dim) + j]);
    }
    kda::ref::l2norm_rows<S>(raw.data(), normalized.data(), count, dim);
    for (size_t j = 0; j < raw.size(); ++j) {
      problem.k[static_cast<size_t>(first * dim) + j] = static_cast<float>(normalized[j]);
    }
  }
  for (size_t row = 0; row < problem.beta.size(); ++row) {
    const S logit = static_cast<S>(bf16_to_float(in.beta_logits[row]));
    problem.beta[row] = static_cast<float>(S(1) / (S(1) + std::exp(-logit)));
  }
}

}  // namespace

Golden compute_raw_golden(const HostInputs& inputs, const BudgetRule& rule, bool state_carry) {
  if (!inputs.has_raw_inputs()) {
    throw std::invalid_argument(std::string("compute_raw_golden: ") + kNoRawInputs);
  }
  const auto start = std::chrono::steady_clock::now();
  kda::ref::Problem problem = inputs.to_reference();
  kda::ref::Options options;
  options.normalize_q = true;
  options.final_state = inputs.want_final_state;

  Golden golden;
  golden.raw_inputs = true;
  set_raw_k_and_beta<double>(inputs, problem);
  // low: an honest fp32 implementation normalizes k and takes the sigmoid in fp32 too.
  run_recurrences(problem, options, rule, state_carry,
                  [&inputs](kda::ref::Problem& p) { set_raw_k_and_beta<float>(inputs, p); }, golden);
  golden.seconds = seconds_since(start);
  return golden;
}

int64_t count_nonzero_inactive(const HostInputs& inputs, const std::vector<float>& out) {
  if (inputs.cu_seqlens.empty()) return 0;
  const int64_t row_elems = inputs.heads * inputs.value_dim;
  const int64_t first = static_cast<int64_t>(inputs.cu_seqlens.back()) * row_elems;
  int64_t nonzero = 0;
  for (int64_t i = first; i < static_cast<int64_t>(out.size()); ++i) {
    // Bit test, not == 0: -0.0 is fine, NaN is not.
    nonzero += (out[i] != 0.0f || out[i] != out[i]) ? 1 : 0;
  }
  return nonzero;
}

std::string PathCheck::reason() const {
  if (!out_judgement.passed()) return "output " + out_judgement.reasons();
  if (final_state_checked && !final_state_judgement.passed())
    return "final state " + final_state_judgement.reasons();
  if (inactive_nonzero != 0)
    return std::to_string(inactive_nonzero) + " non-zero values in rows at or after cu_seqlens[N]";
  if (repeat_checked && !repeat_bitwise) return "a repeated run gave different bits";
  return "";
}

std::string PathCheck::verdict() const {
  const std::string why = reason();
  return why.empty() ? "passed" : "failed: " + why;
}

PathCheck judge_path(Path path, const HostInputs& inputs, const Golden& golden,
                     std::vector<float> out, std::vector<float> final_state,
                     const BudgetRule& rule) {
  if ((path == Path::raw) != golden.raw_inputs) {
    // A programming error: the raw path's output against the contract golden (or the reverse)
    // would be judged on other inputs than the ones it ran on.
    throw std::logic_error(std::string("judge_path: path ") + to_string(path) + " judged with " +
                           (golden.raw_inputs ? "compute_raw_golden" : "compute_golden") +
                           "'s references");
  }
  PathCheck check;
  check.path = path;
  check.out = std::move(out);
  check.final_state = std::move(final_state);
  if (path == Path::l2norm) {
    check.out_judgement = judge(golden.q_hat, golden.q_hat_low, widen(check.out), rule);
    return check;
  }
  check.out_judgement = judge(golden.out, golden.out_low, widen(check.out), rule);
  check.inactive_nonzero = count_nonzero_inactive(inputs, check.out);
  if (inputs.want_final_state) {
    check.final_state_checked = true;
    check.final_state_judgement =
        judge(golden.final_state, golden.final_state_low, widen(check.final_state), rule);
  }
  return check;
}

std::string SoakResult::reason() const {
  if (runs == 0) return "the soak did not run";
  const std::string what = fmt::format("{} runs in {:.1f} s", runs, seconds);
  if (differing == 0) return what + ", all bitwise equal to the checked run";
  return fmt::format("{} of {} differed from the checked run (first: run {})", differing, what,
                     first_differing_run);
}

std::string SoakResult::verdict() const {
  return std::string(passed() ? "passed: " : "failed: ") + reason();
}

// --- the rows kda-check reports ---------------------------------------------------------------

std::vector<CheckRow> check_references(const std::string& id, const HostInputs& inputs,
                                       const BudgetRule& rule, const std::string& dump_dir) {
  const auto start = std::chrono::steady_clock::now();
  const kda::ref::Problem problem = inputs.to_reference();
  kda::ref::Options options;
  options.final_state = inputs.want_final_state;
  const auto golden = kda::ref::recurrent_forward<double>(problem, options);
  const auto chunked = kda::ref::chunked_forward<double>(problem, options);
  const auto low = kda::ref::recurrent_forward<float>(problem, options);
  const auto chunked_f32 = kda::ref::chunked_forward<float>(problem, options);
  kda::ref::Options local_options = options;
  local_options.final_state = false;
  local_options.reset_state_at_chunk_starts = true;
  const auto local = kda::ref::recurrent_forward<double>(problem, local_options);
  const double seconds = seconds_since(start);

  const StateCarry carry = judge_state_carry(golden.out, to_double(low.out), local.out, rule);
  std::vector<CheckRow> rows;
  auto add = [&](CheckRow row) {
    row.reference_seconds = seconds;
    row.gate = inputs.gate_recipe;
    if (row.tensor == "out") row.carry = carry;
    rows.push_back(std::move(row));
  };
  auto add_f64 = [&](const std::string& tensor, const std::vector<double>& ref,
                     const std::vector<double>& got) {
    // Strict agreement: max |chunked - recurrent| <= 1e-12 * max |recurrent|.
    const Judgement j = judge(ref, ref, got, {0.0, 1.0, 1.0});
    const double rel = j.max_golden > 0 ? j.max_abs_err / j.max_golden : j.max_abs_err;
    CheckRow row = judgement_row(id, "ref-chunked-f64", tensor, j);
    row.judgement->budget = 1e-12 * j.max_golden;
    row.verdict = rel <= 1e-12 ? Verdict::passed : Verdict::failed;
    row.reason = rel <= 1e-12 ? "" : "relative difference " + sci(rel) + " > 1e-12";
    add(std::move(row));
  };
  auto add_f32 = [&](const std::string& tensor, const std::vector<double>& ref,
                     const std::vector<float>& low_values, const std::vector<float>& got) {
    add(judgement_row(id, "ref-chunked-f32", tensor,
                      judge(ref, to_double(low_values), to_double(got), rule)));
  };
  add_f64("out", golden.out, chunked.out);
  add_f32("out", golden.out, low.out, chunked_f32.out);
  if (inputs.want_final_state) {
    add_f64("final_state", golden.final_state, chunked.final_state);
    add_f32("final_state", golden.final_state, low.final_state, chunked_f32.final_state);
  }
  if (!dump_dir.empty()) {
    dump_tensor(dump_dir, id, "out_reference", golden.out, out_shape(inputs));
    dump_tensor(dump_dir, id, "out_reference_chunked_f32", chunked_f32.out, out_shape(inputs));
    if (inputs.want_final_state) {
      dump_tensor(dump_dir, id, "ht_reference", golden.final_state, state_shape(inputs));
    }
  }
  return rows;
}

CheckRow unsupported_dims_row(const std::string& id, const HostInputs& inputs) {
  CheckRow row;
  row.shape = id;
  row.path = "gpu";
  row.tensor = "-";
  row.verdict = Verdict::not_verified;
  row.reason = fmt::format("K = {}, V = {}; the GPU kernels support K = V = 128", inputs.key_dim,
                           inputs.value_dim);
  return row;
}

CheckRow path_not_run_row(const std::string& id, const HostInputs& inputs, Path path,
                          const std::string& variant, const std::string& reason) {
  CheckRow row;
  row.shape = id;
  row.path = to_string(path);
  row.tensor = path == Path::l2norm ? "q_hat" : "out";
  row.gate = inputs.gate_recipe;
  if (!variant.empty()) row.variant = variant;
  row.verdict = Verdict::not_verified;
  row.reason = reason;
  return row;
}

std::vector<CheckRow> path_rows(const std::string& id, const HostInputs& inputs,
                                const std::string& variant, const Golden& golden,
                                const PathCheck& check) {
  const bool forward = check.path != Path::l2norm;
  const Repeat repeat = !check.repeat_checked ? Repeat::none
                        : check.repeat_bitwise ? Repeat::bitwise
                                               : Repeat::differs;
  std::vector<CheckRow> rows;
  CheckRow row =
      judgement_row(id, to_string(check.path), forward ? "out" : "q_hat", check.out_judgement);
  row.verdict = check.passed() ? Verdict::passed : Verdict::failed;
  row.reason = check.reason();
  row.gate = inputs.gate_recipe;
  if (forward) {
    row.variant = variant;
    row.carry = golden.carry;
  }
  row.repeat = repeat;
  row.inactive_nonzero = check.inactive_nonzero;
  row.reference_seconds = golden.seconds;
  rows.push_back(std::move(row));
  if (check.final_state_checked) {
    CheckRow ht = judgement_row(id, to_string(check.path), "final_state",
                                check.final_state_judgement);
    ht.repeat = repeat;
    ht.variant = variant;
    ht.gate = inputs.gate_recipe;
    rows.push_back(std::move(ht));
  }
  return rows;
}

CheckRow fused_vs_explicit_row(const std::string& id, const HostInputs& inputs,
                               const std::string& variant, const Golden& golden,
                               const PathCheck& fused, const PathCheck& explicit_path,
                               const BudgetRule& rule) {
  const Judgement j =
      judge_against_explicit(golden.out, widen(explicit_path.out), widen(fused.out), rule);
  const bool ok = j.non_finite == 0 && j.within_budget;
  CheckRow row = judgement_row(id, "fused", "out vs explicit (c)", j);
  row.verdict = ok ? Verdict::passed : Verdict::failed;
  row.reason = ok ? ""
                  : "max |fused - golden| " + sci(j.max_abs_err) +
                        " > 2 (max |explicit - golden| + 2^-7 max |golden|) = " + sci(j.budget);
  const bool identical = fused.out.size() == explicit_path.out.size() &&
                         (fused.out.empty() ||
                          std::memcmp(fused.out.data(), explicit_path.out.data(),
                                      fused.out.size() * sizeof(float)) == 0);
  row.repeat = identical ? Repeat::equals_explicit : Repeat::differs_from_explicit;
  row.variant = variant;
  row.gate = inputs.gate_recipe;
  return row;
}

CheckRow soak_row(const std::string& id, Path path, const std::string& variant,
                  const SoakResult& soak) {
  CheckRow row;
  row.shape = id;
  row.path = to_string(path);
  row.tensor = "soak";
  if (path != Path::l2norm) row.variant = variant;
  row.repeat = soak.differing == 0 ? Repeat::bitwise : Repeat::differs;
  row.verdict = soak.passed() ? Verdict::passed : Verdict::failed;
  row.reason = soak.reason();
  return row;
}

}  // namespace kda::harness
