// Verification shared by kda-check and kda-bench: the CPU references a GPU result is judged
// against (kda-forward.md §9.4) and one checked run of a path on NaN-poisoned outputs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "device_problem.h"
#include "kda/harness/budget.h"
#include "kda/harness/inputs.h"

namespace kda::app {

// golden = fp64 per-token recurrence on fp64-normalized q; low = the same reference in fp32.
struct Golden {
  std::vector<double> out, final_state;
  std::vector<double> out_low, final_state_low;
  std::vector<double> q_hat, q_hat_low;  // l2norm(q) in fp64 / fp32 (for the l2norm pass)
  // How much the state carried between chunks moves `out` (the fp64 golden with the state reset
  // at every chunk start, kda::ref::chunk_local): a weak carry says the inputs cannot tell a
  // correct recurrence from one that drops the state (docs/checking.md).
  kda::harness::StateCarry carry;
  double seconds = 0.0;                  // wall time spent on the references
};
// With state_carry, also the carry figure (one more fp64 run; judged by `rule`).
Golden compute_golden(const kda::harness::HostInputs& inputs,
                      const kda::harness::BudgetRule& rule = {}, bool state_carry = false);

// Flat indices of output elements in rows at or after cu[N] (packed inputs only): those must be
// exactly zero.
int64_t count_nonzero_inactive(const kda::harness::HostInputs& inputs,
                               const std::vector<float>& out);

struct PathCheck {
  Path path = Path::fused;
  std::vector<float> out, final_state;  // what the path produced (first run)
  kda::harness::Judgement out_judgement;
  kda::harness::Judgement final_state_judgement;
  bool final_state_checked = false;
  int64_t inactive_nonzero = 0;  // non-zero elements in rows at or after cu[N]
  bool repeat_checked = false;
  bool repeat_bitwise = true;    // a second run gave the same bits
  bool passed() const;
  std::string verdict() const;   // "passed" or "failed: <first reason>"
};

// Poisons the outputs with NaN, runs `path` once (twice when check_repeat), downloads and judges
// with `rule`. For Path::l2norm the "out" tensor is q_hat.
PathCheck check_path(DeviceProblem& problem, Path path, const Golden& golden,
                     cudaStream_t stream, bool check_repeat,
                     const kda::harness::BudgetRule& rule = {});

// Soak (a long run for drift): re-runs `path` on NaN-poisoned outputs until `seconds` of wall
// time have passed (at least once) and compares every run's output (and final state) bit for
// bit with `first`, the run check_path judged. CUDA errors throw as everywhere else.
struct SoakResult {
  int64_t runs = 0;
  int64_t differing = 0;            // runs whose bits differ from the checked run
  int64_t first_differing_run = 0;  // 1-based; 0 when none
  double seconds = 0.0;
  bool passed() const { return runs > 0 && differing == 0; }
  std::string verdict() const;      // "passed: ..." or "failed: ..."
};
SoakResult soak_path(DeviceProblem& problem, Path path, const PathCheck& first,
                     cudaStream_t stream, double seconds);

// Widen to double for the budget functions.
std::vector<double> widen(const std::vector<float>& values);

}  // namespace kda::app
