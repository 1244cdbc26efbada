#include "verify.h"

#include <chrono>
#include <cstdio>
#include <cstring>

#include "kda/ref/reference.h"

namespace kda::app {

std::vector<double> widen(const std::vector<float>& values) {
  return std::vector<double>(values.begin(), values.end());
}

namespace {

template <class S>
std::vector<double> to_double(const std::vector<S>& values) {
  return std::vector<double>(values.begin(), values.end());
}

}  // namespace

Golden compute_golden(const kda::harness::HostInputs& inputs, const kda::harness::BudgetRule& rule,
                      bool state_carry) {
  const auto start = std::chrono::steady_clock::now();
  const kda::ref::Problem problem = inputs.to_reference();
  kda::ref::Options options;
  options.normalize_q = true;
  options.final_state = inputs.want_final_state;

  // The per-token recurrence is the ground truth and about twice as fast as the chunked
  // reference on the contract shapes (they agree to 1e-12 in fp64: kda-check --backend reference).
  Golden golden;
  auto high = kda::ref::recurrent_forward<double>(problem, options);
  golden.out = std::move(high.out);
  golden.final_state = std::move(high.final_state);
  auto low = kda::ref::recurrent_forward<float>(problem, options);
  golden.out_low = to_double(low.out);
  golden.final_state_low = to_double(low.final_state);
  if (state_carry) {
    kda::ref::Options local_options = options;
    local_options.final_state = false;
    local_options.reset_state_at_chunk_starts = true;
    const auto local = kda::ref::recurrent_forward<double>(problem, local_options);
    golden.carry = kda::harness::judge_state_carry(golden.out, golden.out_low, local.out, rule);
  }

  const int64_t rows = inputs.batch * inputs.tokens * inputs.heads;
  golden.q_hat.resize(problem.q.size());
  kda::ref::l2norm_rows<double>(problem.q.data(), golden.q_hat.data(), rows, inputs.key_dim);
  std::vector<float> q_hat_low(problem.q.size());
  kda::ref::l2norm_rows<float>(problem.q.data(), q_hat_low.data(), rows, inputs.key_dim);
  golden.q_hat_low = to_double(q_hat_low);

  golden.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return golden;
}

int64_t count_nonzero_inactive(const kda::harness::HostInputs& inputs,
                               const std::vector<float>& out) {
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

bool PathCheck::passed() const { return verdict() == "passed"; }

std::string PathCheck::verdict() const {
  if (!out_judgement.passed()) return "failed: output " + out_judgement.verdict();
  if (final_state_checked && !final_state_judgement.passed())
    return "failed: final state " + final_state_judgement.verdict();
  if (inactive_nonzero != 0)
    return "failed: " + std::to_string(inactive_nonzero) +
           " non-zero values in rows at or after cu_seqlens[N]";
  if (repeat_checked && !repeat_bitwise) return "failed: a repeated run gave different bits";
  return "passed";
}

namespace {

// One run of `path` on NaN-poisoned outputs, downloaded.
void run_once(DeviceProblem& problem, Path path, cudaStream_t stream, std::vector<float>* out,
              std::vector<float>* final_state) {
  problem.poison(stream);
  problem.enqueue(path, stream);
  check_cuda(cudaStreamSynchronize(stream), "running the path");
  if (path == Path::l2norm) {
    *out = problem.download_q_hat();
  } else {
    *out = problem.download_out();
    *final_state = problem.download_final_state();
  }
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace

PathCheck check_path(DeviceProblem& problem, Path path, const Golden& golden,
                     cudaStream_t stream, bool check_repeat, const kda::harness::BudgetRule& rule) {
  PathCheck check;
  check.path = path;
  run_once(problem, path, stream, &check.out, &check.final_state);

  if (path == Path::l2norm) {
    check.out_judgement =
        kda::harness::judge(golden.q_hat, golden.q_hat_low, widen(check.out), rule);
  } else {
    check.out_judgement = kda::harness::judge(golden.out, golden.out_low, widen(check.out), rule);
    check.inactive_nonzero = count_nonzero_inactive(problem.inputs(), check.out);
    if (problem.inputs().want_final_state) {
      check.final_state_checked = true;
      check.final_state_judgement = kda::harness::judge(
          golden.final_state, golden.final_state_low, widen(check.final_state), rule);
    }
  }

  if (check_repeat) {
    std::vector<float> out2, final_state2;
    run_once(problem, path, stream, &out2, &final_state2);
    check.repeat_checked = true;
    check.repeat_bitwise = same_bits(check.out, out2) && same_bits(check.final_state, final_state2);
  }
  return check;
}

std::string SoakResult::verdict() const {
  if (runs == 0) return "failed: the soak did not run";
  char what[64];
  std::snprintf(what, sizeof what, "%lld runs in %.1f s", static_cast<long long>(runs), seconds);
  if (differing == 0) return std::string("passed: ") + what + ", all bitwise equal to the checked run";
  return "failed: " + std::to_string(differing) + " of " + what +
         " differed from the checked run (first: run " + std::to_string(first_differing_run) + ")";
}

SoakResult soak_path(DeviceProblem& problem, Path path, const PathCheck& first,
                     cudaStream_t stream, double seconds) {
  SoakResult soak;
  const auto start = std::chrono::steady_clock::now();
  std::vector<float> out, final_state;
  do {
    run_once(problem, path, stream, &out, &final_state);
    ++soak.runs;
    if (!same_bits(first.out, out) || !same_bits(first.final_state, final_state)) {
      ++soak.differing;
      if (soak.first_differing_run == 0) soak.first_differing_run = soak.runs;
    }
    soak.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } while (soak.seconds < seconds);
  return soak;
}

}  // namespace kda::app
