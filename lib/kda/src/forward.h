// The host side of chunk_forward that every set of forward kernels shares (forward.cu): the
// sequences and record slots of a call, the PREP and SCAN arguments from the params, the stages
// and the tail zeroing. The library's chunk_forward runs its own PREP and SCAN on them; the lab's
// variants (lab/src/registry.cu) run theirs.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common.cuh"
#include "kda/kda.h"
#include "prep/prep.h"
#include "scan/scan.h"

namespace kda::detail {

// Stages (kda.h forward_stage_*): every forward runs these three in order.
inline constexpr int kStagePrep = 0;
inline constexpr int kStageScan = 1;
inline constexpr int kStageZeroTail = 2;
inline constexpr int kStageCount = 3;

struct Plan {
  Sequences seqs;
  int64_t capacity = 0;  // record slots per head (record.h chunk_capacity)
  bool packed = false;
};
Plan make_plan(const ForwardParams& p);

// PREP's arguments: PrepArgs for the contract inputs (typed: gate and beta fp32), RawPrepArgs
// for the raw ones (read only by a PREP that takes them).
PrepArgs prep_args(const ForwardParams& p, const Plan& plan);
RawPrepArgs raw_prep_args(const ForwardParams& p);
// SCAN's arguments for records of `record_bytes`.
ScanArgs scan_args(const ForwardParams& p, const Plan& plan, int64_t record_bytes);
// ZERO_TAIL: packed inputs only, output rows at or after cu[N] become zeros.
void run_zero_tail(const ForwardParams& p, const Plan& plan, cudaStream_t stream);
// Throws invalid_argument unless 0 <= stage < kStageCount (`op` names the entry point).
void check_stage(const char* op, int stage);

// One set of forward kernels: its PREP and SCAN launches (ZERO_TAIL is everyone's). The entry
// points below run them after the caller's validation, the library's for its own kernels
// (forward.cu), the lab's for each of its steps (lab/src/registry.cu).
using StageLaunch = void (*)(const ForwardParams&, const Plan&, cudaStream_t);
struct ForwardLaunches {
  StageLaunch prep;
  StageLaunch scan;
};
// The library's own PREP and SCAN launches (forward.cu), for the lab's variants that replace one.
void library_prep(const ForwardParams& p, const Plan& plan, cudaStream_t stream);
void library_scan(const ForwardParams& p, const Plan& plan, cudaStream_t stream);
// chunk_forward's body: every stage in order on one plan.
void run_forward(const ForwardParams& p, const ForwardLaunches& kernels, cudaStream_t stream);
// chunk_forward_stage's body (the stage already checked).
void run_forward_stage(const ForwardParams& p, const ForwardLaunches& kernels, int stage,
                       cudaStream_t stream);

}  // namespace kda::detail
