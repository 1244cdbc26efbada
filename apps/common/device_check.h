// One checked run of a path on the GPU, shared by kda-check, kda-bench and kda-gbench: the outputs
// poisoned with NaN, the path run (twice with check_repeat), downloaded and handed to the CPU
// verification of the harness (kda/harness/verify.h), which judges them.
#pragma once

#include <cuda_runtime_api.h>

#include "device_problem.h"
#include "kda/harness/budget.h"
#include "kda/harness/verify.h"

namespace kda::app {

using kda::harness::Golden;
using kda::harness::PathCheck;
using kda::harness::SoakResult;

// Poisons the outputs with NaN, runs `path` once (twice when check_repeat), downloads and judges
// with `rule`. For Path::l2norm the "out" tensor is q_hat.
PathCheck check_path(DeviceProblem& problem, Path path, const Golden& golden,
                     cudaStream_t stream, bool check_repeat,
                     const kda::harness::BudgetRule& rule = {});

// Soak (a long run for drift): re-runs `path` on NaN-poisoned outputs until `seconds` of wall
// time have passed (at least once) and compares every run's output (and final state) bit for
// bit with `first`, the run check_path judged. CUDA errors throw as everywhere else.
SoakResult soak_path(DeviceProblem& problem, Path path, const PathCheck& first,
                     cudaStream_t stream, double seconds);

}  // namespace kda::app
