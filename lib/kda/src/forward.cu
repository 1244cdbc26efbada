// chunk_forward: either the two-kernel forward, PREP (prep/) then SCAN (scan/), communicating
// through one record per (head, chunk slot) in the workspace (record.h), or the one-pass forward
// (onepass/), whose 16-token records never leave the SM; kernel_choice.h picks per call. Then a
// tail zeroing kernel for packed inputs (common.cu).
//
//   PREP      grid (chunk slots, H), 256 threads: one 64-token chunk of one head. Loads q, k, v,
//             the gate and beta (raw inputs activated as they load), builds the anchored grams
//             A_kk and A_qk on tensor cores, inverts (I + A_kk) blockwise in fp32, forms W and U
//             on tensor cores and writes the record W, U, q', kg, A_qk, a, U's bounds (fp16).
//   SCAN      grid (N, H), 256 threads: one (sequence, head) chain, the transposed fp32 state in
//             wgmma accumulators, walking the sequence's chunks in order: V_new = U - W S;
//             O = q' S + A_qk V_new; S <- diag(a) S + kg^T V_new. Writes O (bf16) and the final
//             state.
//   ONE_PASS  grid (N, H) longest sequence first, 512 threads: one (sequence, head) chain, a
//             warpgroup holding the fp32 state in wgmma accumulators beside three builder
//             warpgroups that build each 16-token sub-chunk's factors into a shared-memory ring.
//   ZERO_TAIL packed inputs only: output rows at or after cu[N] become zeros.
//
// Every reduction has a fixed order (plain k-loops, no atomics, no split-K), so results are
// bitwise reproducible. docs/design.md has the design; lab/ the kernels that led to these.
#include <algorithm>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "forward.h"
#include "onepass/onepass.h"

namespace kda::detail {

namespace {
// How many value-halves clusters the current device runs at once (onepass.h
// value_halves_resident_clusters), queried once per device, then cached.
int value_halves_clusters(const char* where) {
  static std::mutex mutex;
  static std::vector<std::pair<int, int>> known;
  const int device = current_device(where);
  const std::lock_guard<std::mutex> lock(mutex);
  for (const auto& [d, clusters] : known) {
    if (d == device) return clusters;
  }
  const int clusters = onepass::value_halves_resident_clusters();
  known.emplace_back(device, clusters);
  return clusters;
}
}  // namespace

Plan make_plan(const ForwardParams& p, const ForwardLaunches& kernels) {
  Plan plan;
  plan.packed = p.cu_seqlens != nullptr;
  plan.seqs.cu = p.cu_seqlens;
  plan.seqs.seq_len = p.tokens;
  plan.seqs.num_seqs = plan.packed ? p.num_seqs : static_cast<int>(p.batch);
  plan.capacity = chunk_capacity(p.batch * p.tokens, plan.seqs.num_seqs);
  switch (kernels.one_pass == nullptr ? KernelChoice::two_kernel : kernels.choice) {
    case KernelChoice::two_kernel: plan.kernel = ForwardKernel::two_kernel; break;
    case KernelChoice::one_pass: plan.kernel = ForwardKernel::one_pass; break;
    case KernelChoice::by_model: {
      // The clusters are asked for only where the value halves could run.
      const int clusters = kLibraryTakesValueHalves && value_halves_run(p)
                               ? value_halves_clusters("chunk_forward")
                               : 0;
      plan.kernel = choose_forward_kernel(p, multiprocessor_count("chunk_forward"),
                                          dram_bandwidth("chunk_forward"), clusters);
      break;
    }
  }
  return plan;
}

namespace {

int64_t resolved(int64_t stride, int heads) {
  return stride == 0 ? static_cast<int64_t>(heads) * kHeadDim : stride;
}

}  // namespace

PrepArgs prep_args(const ForwardParams& p, const Plan& plan) {
  PrepArgs args;
  args.q = static_cast<const __nv_bfloat16*>(p.q);
  args.k = static_cast<const __nv_bfloat16*>(p.k);
  args.v = static_cast<const __nv_bfloat16*>(p.v);
  // Typed for the contract kernels; the raw-input kernel reads RawPrepArgs' instead.
  args.gate = static_cast<const float*>(p.gate);
  args.beta = static_cast<const float*>(p.beta);
  args.q_stride = resolved(p.q_token_stride, p.heads);
  args.k_stride = resolved(p.k_token_stride, p.heads);
  args.v_stride = resolved(p.v_token_stride, p.heads);
  args.heads = p.heads;
  args.capacity = plan.capacity;
  args.seqs = plan.seqs;
  args.records = p.workspace;
  args.fuse_q_l2norm = p.fuse_q_l2norm;
  return args;
}

RawPrepArgs raw_prep_args(const ForwardParams& p) {
  RawPrepArgs raw;
  raw.gate = p.gate;
  raw.beta = p.beta;
  raw.raw_gate = p.gate_input == GateInput::raw;
  raw.gate_bf16 = p.gate_dtype == DType::bf16;
  raw.beta_bf16 = p.beta_dtype == DType::bf16;
  raw.beta_logits = p.beta_input == BetaInput::logits;
  raw.fuse_k_l2norm = p.fuse_k_l2norm;
  raw.a_log = p.a_log;
  raw.dt_bias = p.dt_bias;
  raw.lower_bound = p.lower_bound;
  return raw;
}

ScanArgs scan_args(const ForwardParams& p, const Plan& plan, int64_t record_bytes) {
  ScanArgs args;
  args.records = p.workspace;
  args.out = static_cast<__nv_bfloat16*>(p.out);
  args.out_stride = resolved(p.out_token_stride, p.heads);
  args.initial_state = p.initial_state;
  args.final_state = p.final_state;
  args.heads = p.heads;
  args.capacity = plan.capacity;
  args.seqs = plan.seqs;
  args.record_bytes = record_bytes;
  return args;
}

void run_zero_tail(const ForwardParams& p, const Plan& plan, cudaStream_t stream) {
  if (!plan.packed) return;  // dense batches have no rows after the last sequence
  const int64_t pitch = resolved(p.out_token_stride, p.heads) * 2;  // bytes
  const int64_t vec16 = static_cast<int64_t>(p.heads) * kHeadDim * 2 / 16;
  launch_zero_tail(p.out, pitch, vec16, p.tokens, p.cu_seqlens, p.num_seqs, stream,
                   "chunk_forward: zero_tail");
}

void check_stage(const char* op, int stage) {
  if (stage < 0 || stage >= kStageCount) {
    throw Error(ErrorCode::invalid_argument,
                std::string(op) + ": stage = " + std::to_string(stage) +
                    " is out of range: there are forward_stage_count() = " +
                    std::to_string(kStageCount) + " stages");
  }
}

namespace {

constexpr const char* kStageNames[kStageCount] = {"prep", "scan", "one_pass", "zero_tail"};

void run_stage(const ForwardParams& p, const Plan& plan, const ForwardLaunches& kernels, int stage,
               cudaStream_t stream) {
  const bool two_kernel = plan.kernel == ForwardKernel::two_kernel;
  switch (stage) {
    case kStagePrep:
      if (two_kernel) kernels.prep(p, plan, stream);
      break;
    case kStageScan:
      if (two_kernel) kernels.scan(p, plan, stream);
      break;
    case kStageOnePass:
      if (!two_kernel) kernels.one_pass(p, plan, stream);
      break;
    case kStageZeroTail: run_zero_tail(p, plan, stream); break;
    default: break;
  }
}

}  // namespace

void library_prep(const ForwardParams& p, const Plan& plan, cudaStream_t stream) {
  launch_prep(prep_args(p, plan), raw_prep_args(p), stream);
}
void library_scan(const ForwardParams& p, const Plan& plan, cudaStream_t stream) {
  launch_scan(scan_args(p, plan, kRecordBytes), stream);
}

namespace {

// Which one-pass kernel: the library's, its value-halves cluster (onepass.h
// launch_value_halves: bf16 operands and the contract's inputs only), its builds unstaged or
// staged (OnepassArgs::staged), the helper cluster (launch_helpers: the same inputs), or the L2
// helpers (launch_l2_helpers: the same inputs, a ring in the workspace).
enum class OnePassForm { single, value_halves, value_halves_staged, helpers, l2_helpers };

// Where the L2 helpers' ring starts in the workspace: after the longest-first order.
int64_t l2_ring_offset(int64_t num_seqs) { return (num_seqs * 4 + 255) / 256 * 256; }

// The L2 helpers on `a`, their ring after the order in the workspace (onepass.h
// launch_l2_helpers prepares it), `helper_ctas` helper CTAs (< 0: the SMs the chains leave).
cudaError_t launch_l2_helpers(const ForwardParams& p, const onepass::OnepassArgs& a,
                              int helper_ctas, cudaStream_t stream) {
  const int64_t chains = static_cast<int64_t>(a.in.num_seqs) * a.in.heads;
  const int64_t need = l2_ring_offset(a.in.num_seqs) + onepass::l2_helpers_bytes(chains);
  if (p.workspace_bytes < static_cast<size_t>(need)) {
    throw Error(ErrorCode::invalid_argument,
                "chunk_forward: one_pass (L2 helpers): workspace_bytes = " +
                    std::to_string(p.workspace_bytes) + " is below the " + std::to_string(need) +
                    " bytes its ring needs: size it with the variant's workspace query");
  }
  return onepass::launch_l2_helpers(
      a, static_cast<unsigned char*>(p.workspace) + l2_ring_offset(a.in.num_seqs), helper_ctas,
      stream);
}

// The one pass on `operands` in `form`.
void run_one_pass(const ForwardParams& p, const Plan& plan, onepass::ChainOperands operands,
                  cudaStream_t stream, OnePassForm form = OnePassForm::single,
                  int l2_helper_ctas = -1) {
  constexpr const char* kWhere = "chunk_forward: one_pass";
  if (!one_pass_reads(p)) {
    throw Error(ErrorCode::unsupported,
                std::string(kWhere) +
                    ": the one-pass kernel addresses 16 token rows with 32-bit offsets, so token "
                    "strides must stay below 2^26 elements: run the library's chunk_forward, which "
                    "picks the two-kernel forward for these");
  }
  // PREP's contract arguments are the builders' inputs, less the records.
  const PrepArgs pa = prep_args(p, plan);
  onepass::OnepassArgs a{};
  a.in = {pa.q,
          pa.k,
          pa.v,
          pa.gate,
          pa.beta,
          pa.q_stride,
          pa.k_stride,
          pa.v_stride,
          pa.heads,
          pa.seqs.cu,
          pa.seqs.seq_len,
          pa.seqs.num_seqs,
          pa.fuse_q_l2norm};
  a.out = static_cast<__nv_bfloat16*>(p.out);
  a.out_stride = resolved(p.out_token_stride, p.heads);
  a.initial_state = p.initial_state;
  a.final_state = p.final_state;
  a.raw = raw_prep_args(p);
  a.operands = operands;
  a.staged = form == OnePassForm::value_halves_staged;
  // The unstaged value halves and the L2 helpers take raw inputs (on V_new's bf16 pair, the
  // caller's operands); the other few-chain forms read the contract's inputs only.
  if (form == OnePassForm::value_halves_staged || form == OnePassForm::helpers) {
    refuse_raw_on_clusters(p, kWhere);
  }
  // Packed sequences run longest first (dense ones are all the same length): their order goes
  // to the workspace's first num_seqs int32 (validation sized it for the records, far more).
  if (plan.packed) {
    int32_t* order = static_cast<int32_t*>(p.workspace);
    const cudaError_t e =
        onepass::launch_order_by_length(plan.seqs.cu, plan.seqs.num_seqs, order, stream);
    if (e != cudaSuccess) throw_cuda(std::string(kWhere) + " (order_by_length)", e);
    a.order = order;
  }
  const cudaError_t e = form == OnePassForm::single    ? onepass::launch(a, stream)
                        : form == OnePassForm::helpers ? onepass::launch_helpers(a, stream)
                        : form == OnePassForm::l2_helpers
                            ? launch_l2_helpers(p, a, l2_helper_ctas, stream)
                            : onepass::launch_value_halves(a, stream);
  if (e != cudaSuccess) throw_cuda(kWhere, e);
}

}  // namespace

namespace {
// The few-chain forms' chain operands (value halves, L2 helpers): bf16 on the contract's inputs,
// V_new's bf16 pair on raw inputs (the raw path's 4e-3 bar: the bf16 chain's raw rows measured
// 4.01e-3 on long memory).
onepass::ChainOperands few_chain_operands(const ForwardParams& p) {
  return raw_prep_args(p).any() ? onepass::ChainOperands::bf16_vnew_pairs
                                : onepass::ChainOperands::bf16;
}
}  // namespace

void library_one_pass(const ForwardParams& p, const Plan& plan, cudaStream_t stream) {
  if (plan.kernel == ForwardKernel::one_pass_halves) {
    // The plan takes the value halves only where they run (kernel_choice.h value_halves_run:
    // the fused q norm, on the one pass's own operands, bf16 or V_new's bf16 pair).
    if (!value_halves_run(p)) {
      throw Error(ErrorCode::unsupported,
                  "chunk_forward: the plan took the value halves for inputs they do not run "
                  "(the explicit path's fp16 chain): report this as a bug");
    }
    run_one_pass(p, plan, one_pass_operands(p), stream, OnePassForm::value_halves);
  } else {
    run_one_pass(p, plan, one_pass_operands(p), stream);
  }
}
void one_pass_bf16(const ForwardParams& p, const Plan& plan, cudaStream_t stream) {
  run_one_pass(p, plan, onepass::ChainOperands::bf16, stream);
}
void one_pass_operand_pairs(const ForwardParams& p, const Plan& plan, cudaStream_t stream) {
  run_one_pass(p, plan, onepass::ChainOperands::bf16_pairs, stream);
}
void one_pass_f16_scaled(const ForwardParams& p, const Plan& plan, cudaStream_t stream) {
  run_one_pass(p, plan, onepass::ChainOperands::f16_scaled, stream);
}
void one_pass_vnew_pairs(const ForwardParams& p, const Plan& plan, cudaStream_t stream) {
  run_one_pass(p, plan, onepass::ChainOperands::bf16_vnew_pairs, stream);
}
void refuse_raw_on_clusters(const ForwardParams& p, const char* where) {
  if (raw_prep_args(p).any()) {
    throw Error(ErrorCode::unsupported,
                std::string(where) +
                    ": the one pass's staged value halves and helper clusters read the "
                    "contract's inputs only (a cumulative log2 gate, beta probabilities in fp32, "
                    "normalized k): run one_pass16, one_pass16_halves, one_pass16_l2_helpers or "
                    "the library's chunk_forward for raw inputs");
  }
}
void one_pass_value_halves(const ForwardParams& p, const Plan& plan, cudaStream_t stream) {
  run_one_pass(p, plan, few_chain_operands(p), stream, OnePassForm::value_halves);
}
void one_pass_value_halves_staged(const ForwardParams& p, const Plan& plan, cudaStream_t stream) {
  run_one_pass(p, plan, onepass::ChainOperands::bf16, stream, OnePassForm::value_halves_staged);
}
void one_pass_helpers(const ForwardParams& p, const Plan& plan, cudaStream_t stream) {
  run_one_pass(p, plan, onepass::ChainOperands::bf16, stream, OnePassForm::helpers);
}
void one_pass_l2_helpers(const ForwardParams& p, const Plan& plan, cudaStream_t stream) {
  run_one_pass(p, plan, few_chain_operands(p), stream, OnePassForm::l2_helpers);
}
void one_pass_l2_chains_alone(const ForwardParams& p, const Plan& plan, cudaStream_t stream) {
  run_one_pass(p, plan, few_chain_operands(p), stream, OnePassForm::l2_helpers, 0);
}
size_t l2_helpers_workspace_bytes(const ForwardParams& p) {
  const size_t library = kda::forward_workspace_bytes(p);
  // N as forward_workspace_bytes counts it (validate.cpp): dense callers may size before cu.
  const int64_t seqs =
      p.cu_seqlens != nullptr ? p.num_seqs : std::max<int64_t>(p.batch, p.num_seqs);
  const int64_t need = l2_ring_offset(seqs) +
                       onepass::l2_helpers_bytes(seqs * static_cast<int64_t>(p.heads));
  return std::max(library, static_cast<size_t>(need));
}

namespace {
constexpr ForwardLaunches kLibraryLaunches{library_prep, library_scan, library_one_pass,
                                           KernelChoice::by_model};
}  // namespace

ForwardKernel library_forward_kernel(const ForwardParams& p) {
  current_device("library_forward_kernel");
  return make_plan(p, kLibraryLaunches).kernel;
}

void run_forward(const ForwardParams& p, const ForwardLaunches& kernels, cudaStream_t stream) {
  current_device("chunk_forward");
  const Plan plan = make_plan(p, kernels);
  for (int stage = 0; stage < kStageCount; ++stage) run_stage(p, plan, kernels, stage, stream);
}

void run_forward_stage(const ForwardParams& p, const ForwardLaunches& kernels, int stage,
                       cudaStream_t stream) {
  current_device("chunk_forward");
  run_stage(p, make_plan(p, kernels), kernels, stage, stream);
}

}  // namespace kda::detail

namespace kda {

int forward_stage_count() { return detail::kStageCount; }

const char* forward_stage_name(int stage) {
  detail::check_stage("forward_stage_name", stage);
  return detail::kStageNames[stage];
}

void chunk_forward_stage(const ForwardParams& params, int stage, cudaStream_t stream) {
  detail::check_stage("chunk_forward_stage", stage);
  validate(params);
  detail::run_forward_stage(params, detail::kLibraryLaunches, stage, stream);
}

void chunk_forward(const ForwardParams& params, cudaStream_t stream) {
  validate(params);
  detail::run_forward(params, detail::kLibraryLaunches, stream);
}

}  // namespace kda
