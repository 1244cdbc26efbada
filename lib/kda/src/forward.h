// The host side of chunk_forward that every set of forward kernels shares (forward.cu): the
// sequences and record slots of a call, the kernel it runs (kernel_choice.h), the PREP, SCAN and
// one-pass arguments from the params, the stages and the tail zeroing. The library's
// chunk_forward runs its own kernels on them; the lab's variants (lab/src/registry.cu) run theirs.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common.cuh"
#include "kda/kda.h"
#include "kernel_choice.h"
#include "prep/prep.h"
#include "scan/scan.h"

namespace kda::detail {

// Stages (kda.h forward_stage_*): every forward runs these four in order; a call runs PREP and
// SCAN (the two-kernel forward) or ONE_PASS, and the other stages do nothing.
inline constexpr int kStagePrep = 0;
inline constexpr int kStageScan = 1;
inline constexpr int kStageOnePass = 2;
inline constexpr int kStageZeroTail = 3;
inline constexpr int kStageCount = 4;

// One set of forward kernels: its PREP and SCAN launches (ZERO_TAIL is everyone's), the one-pass
// launch if it has one, and how a call picks between them. Value-initialized members give a
// two-kernel forward (the lab's ladder).
struct Plan;
using StageLaunch = void (*)(const ForwardParams&, const Plan&, cudaStream_t);
enum class KernelChoice {
  two_kernel,  // always PREP then SCAN
  by_model,    // choose_forward_kernel (kernel_choice.h) on the device's SM count
  one_pass,    // always the one pass (params it does not read are refused at launch)
};
struct ForwardLaunches {
  StageLaunch prep;
  StageLaunch scan;
  StageLaunch one_pass;  // null: none
  KernelChoice choice;
};

struct Plan {
  Sequences seqs;
  int64_t capacity = 0;  // record slots per head (record.h chunk_capacity)
  bool packed = false;
  ForwardKernel kernel = ForwardKernel::two_kernel;
};
// The plan of a validated call for `kernels` (the device's SM count read when the choice needs it).
Plan make_plan(const ForwardParams& p, const ForwardLaunches& kernels);

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

// The entry points below run a set of kernels after the caller's validation, the library's for its
// own (forward.cu), the lab's for each of its steps (lab/src/registry.cu).
// The library's own launches (forward.cu), for the lab's variants that replace or force one.
void library_prep(const ForwardParams& p, const Plan& plan, cudaStream_t stream);
void library_scan(const ForwardParams& p, const Plan& plan, cudaStream_t stream);
// The one pass: the sequences' longest-first order into the workspace (packed inputs), then the
// kernel, its chain on the operands kernel_choice.h's one_pass_operands picks for the inputs, or
// the value-halves cluster where the plan's kernel is one_pass_halves.
// Throws unsupported for inputs it does not read (one_pass_reads).
void library_one_pass(const ForwardParams& p, const Plan& plan, cudaStream_t stream);
// The one pass with the chain's operands fixed for every call: bf16 (the lab's one_pass16_bf16:
// 4.0 - 4.3e-3 on the explicit and raw paths, above the long-memory bar), the state and V_new as
// bf16 hi + lo pairs (one_pass16_pairs: within the bar, but 1.5-1.7x the time on the H200), or
// fp16 under per-row power-of-two scales with fp16 record tiles (one_pass16_f16: within the bar,
// 1.19-1.28x the bf16 chain's time on an H100).
void one_pass_bf16(const ForwardParams& p, const Plan& plan, cudaStream_t stream);
void one_pass_operand_pairs(const ForwardParams& p, const Plan& plan, cudaStream_t stream);
void one_pass_f16_scaled(const ForwardParams& p, const Plan& plan, cudaStream_t stream);
// The one pass with bf16 operands and V_new as a bf16 hi + lo pair (the B phase's two products
// twice: record16.h ChainOperands::bf16_vnew_pairs); the lab's one_pass16_vpairs.
void one_pass_vnew_pairs(const ForwardParams& p, const Plan& plan, cudaStream_t stream);
// The one pass's value-halves cluster (onepass.h launch_value_halves: two CTAs per chain, six
// builders a chain): bf16 operands on the contract's inputs, V_new's bf16 pair on raw inputs.
void one_pass_value_halves(const ForwardParams& p, const Plan& plan, cudaStream_t stream);
// Throws unsupported (naming `where`) for inputs the one pass's staged value halves and helper
// clusters do not read: any raw input (raw_prep_args(p).any()). The lab's variants of them call
// it at validation too.
void refuse_raw_on_clusters(const ForwardParams& p, const char* where);
// The same with each build staged (onepass.h OnepassArgs::staged: three ring buffers serve six
// builders); the lab's one_pass16_halves_staged.
void one_pass_value_halves_staged(const ForwardParams& p, const Plan& plan, cudaStream_t stream);
// The one pass's helper cluster (onepass.h launch_helpers: three chain CTAs and a helper CTA
// whose builders lend each chain one build in four) on bf16 operands; the lab's
// one_pass16_helpers. Throws unsupported for raw inputs.
void one_pass_helpers(const ForwardParams& p, const Plan& plan, cudaStream_t stream);
// The one pass's L2 helpers (onepass.h launch_l2_helpers: the library's CTA per chain, helper CTAs
// on the SMs left, every builder claiming a chain's next sub-chunk; a helper's record through a
// global ring in the workspace) on bf16 operands, V_new's bf16 pair on raw inputs; the lab's
// one_pass16_l2_helpers. Throws invalid_argument for a workspace below
// l2_helpers_workspace_bytes.
void one_pass_l2_helpers(const ForwardParams& p, const Plan& plan, cudaStream_t stream);
// The same kernel with no helper CTA (the chains' own builders claim every sub-chunk: what runs
// when no helper becomes resident); the lab's one_pass16_l2_chains_alone, for the tests.
void one_pass_l2_chains_alone(const ForwardParams& p, const Plan& plan, cudaStream_t stream);
// The workspace the L2 helpers need: the library's, or the order and the ring if larger.
size_t l2_helpers_workspace_bytes(const ForwardParams& p);
// chunk_forward's body: every stage in order on one plan.
void run_forward(const ForwardParams& p, const ForwardLaunches& kernels, cudaStream_t stream);
// chunk_forward_stage's body (the stage already checked).
void run_forward_stage(const ForwardParams& p, const ForwardLaunches& kernels, int stage,
                       cudaStream_t stream);

}  // namespace kda::detail
