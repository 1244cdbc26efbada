// One checked run of a path on the GPU (device_check.h); the judging is the harness's.
#include "device_check.h"

#include <chrono>
#include <cstring>
#include <vector>

namespace kda::app {

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
  std::vector<float> out, final_state;
  run_once(problem, path, stream, &out, &final_state);
  PathCheck check = kda::harness::judge_path(path, problem.inputs(), golden, std::move(out),
                                             std::move(final_state), rule);
  if (check_repeat) {
    std::vector<float> out2, final_state2;
    run_once(problem, path, stream, &out2, &final_state2);
    check.repeat_checked = true;
    check.repeat_bitwise = same_bits(check.out, out2) && same_bits(check.final_state, final_state2);
  }
  return check;
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
