// kda: CUDA kernels for the chunked KDA forward (Kimi Delta Attention) on Hopper (sm_90a).
//
// Plain C++ API: params structs of device pointers, sizes and strides, plus a stream. No Eigen,
// yaml, fmt or JSON here. Every entry point validates its arguments on the host and throws
// kda::Error with a message that says what was wrong and what to do; kernels never see
// out-of-contract arguments. Contract: ../shared/spec/kda-forward.md §9.1 (mirrored in
// docs/design.md).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace kda {

inline constexpr int kHeadDim = 128;        // K = V = 128: the only head size the kernels support
inline constexpr int kChunk = 64;           // tokens per chunk of the chunked algorithm
inline constexpr float kL2NormEps = 1e-6f;  // y = x / sqrt(sum x^2 + eps)
inline constexpr float kMaxLowerBound = 5.914855940778f;  // 128 / (15 log2 e), §3.1

enum class DType { bf16, f32 };
const char* to_string(DType dtype);

enum class ErrorCode {
  invalid_argument,  // the caller broke the contract (null pointer, bad size, bad offsets ...)
  unsupported,       // inside the contract of the math but not of these kernels (K != 128 ...)
  cuda,              // a CUDA call failed (no device, launch failure ...)
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

// ---------------------------------------------------------------------------------------------
// l2norm: y[r, :] = x[r, :] / sqrt(sum_d x[r, d]^2 + 1e-6), written as bf16.
// Exact for every finite row: rows are pre-scaled by a power of two, so huge rows (up to the
// largest finite float) give a unit vector and tiny rows lose nothing to underflow. A zero row
// gives a zero row; NaN/inf propagate.
struct L2NormParams {
  const void* x = nullptr;  // [rows, dim], bf16 or fp32
  DType x_dtype = DType::bf16;
  void* y = nullptr;  // [rows, dim], bf16
  int64_t rows = 0;
  int dim = kHeadDim;          // 128 only
  int64_t x_row_stride = 0;    // elements between rows; 0 = dim
  int64_t y_row_stride = 0;    // elements between rows; 0 = dim
};
void l2norm(const L2NormParams& params, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// gate_cumsum (§3.1): gamma = lb * sigmoid(exp(A_log[h]) * (raw + dt_bias[h, d])), then the
// inclusive prefix sum inside each 64-token chunk (restarting at every sequence start), times
// log2(e). Output fp32 [B, T, H, dim]. Rows at or after cu_seqlens[N] are written as zeros.
// chunk_forward with GateInput::raw computes exactly this, bit for bit, inside its first kernel.
struct GateCumsumParams {
  const void* raw_gate = nullptr;  // [B, T, H, dim], bf16 or fp32
  DType raw_gate_dtype = DType::bf16;
  const float* a_log = nullptr;    // fp32 [H]
  const float* dt_bias = nullptr;  // fp32 [H, dim]
  float* out = nullptr;            // fp32 [B, T, H, dim]
  int64_t batch = 0;
  int64_t tokens = 0;
  int heads = 0;
  int dim = kHeadDim;
  float lower_bound = -5.0f;  // in [-kMaxLowerBound, 0]
  // Packed sequences (then batch == 1): device offsets plus the same offsets on the host, which
  // are validated there (start at 0, non-decreasing, last <= tokens).
  const int32_t* cu_seqlens = nullptr;
  const int32_t* cu_seqlens_host = nullptr;
  int num_seqs = 0;
};
void gate_cumsum(const GateCumsumParams& params, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// chunk_forward: the KDA forward, output only or with states.
//   q, k, v bf16 [B, T, H, 128]; gate fp32 cumulative log2 [B, T, H, 128] or raw (GateInput);
//   beta [B, T, H] (BetaInput);
//   optional initial state fp32 [N, H, 128, 128] (row = key channel); optional cu_seqlens.
//   out bf16 [B, T, H, 128]; optional final state fp32 [N, H, 128, 128].
// scale = 1/sqrt(128). k must already be normalized unless fuse_k_l2norm. With fuse_q_l2norm the
// kernel normalizes raw q (the norm's factor folded into q's products in fp32: within the error
// budget of l2norm() then chunk_forward, not bit for bit) and never writes it to memory.
// The kernels (docs/design.md): a PREP kernel per 64-token chunk and head, a SCAN kernel per
// (sequence, head) on warpgroup MMA, fp16 records between them. The steps that led to them
// (v0_fp32 ... v2t_mma) are lab/'s kernel ladder, reached through the tools' --variant.

// How the gate and beta arrive. The attention-gym contract (kda-forward.md §9.1) is
// GateInput::chunk_log2 with BetaInput::probability: the caller ran gate_cumsum() and the sigmoid.
// Engines call the op on raw projections instead (FlashKDA, cuDNN-FE's raw mode, FLA's
// use_gate_in_kernel / use_beta_sigmoid_in_kernel): then the kernel does that work as it loads.
enum class GateInput {
  chunk_log2,  // fp32 cumulative log2 decay, restarting at every 64-token chunk: gate_cumsum()'s
               // output
  raw,         // the raw gate projection g (bf16 or fp32) with a_log [H], dt_bias [H, 128] and
               // lower_bound: gamma = lb * sigmoid(exp(A_log[h]) * (g + dt_bias[h, d])) and the
               // chunk cumsum times log2(e) in the kernel, bit for bit as gate_cumsum() computes
               // them. Bounded for any finite A_log / dt_bias: gamma lies in [lb, 0].
};
const char* to_string(GateInput input);
enum class BetaInput {
  probability,  // beta in [0, 1] (post-sigmoid)
  logits,       // beta = sigmoid(x), computed in the kernel in fp32
};
const char* to_string(BetaInput input);

// Dense batches: N = B sequences of T tokens. Packed: B == 1, N = num_seqs, sequence s owns tokens
// [cu[s], cu[s+1]); rows at or after cu[N] are written as zeros; empty sequences pass their state
// through. Results are bitwise identical run to run.
struct ForwardParams {
  const void* q = nullptr;
  DType q_dtype = DType::bf16;  // bf16 only (fused path refuses others: normalize or cast first)
  const void* k = nullptr;  // bf16; normalized unless fuse_k_l2norm
  const void* v = nullptr;
  // Gate [B, T, H, 128]: fp32 cumulative log2 (chunk_log2), or the raw projection (raw, bf16 or
  // fp32, with a_log / dt_bias / lower_bound; those three are refused with chunk_log2).
  const void* gate = nullptr;
  GateInput gate_input = GateInput::chunk_log2;
  DType gate_dtype = DType::f32;
  const float* a_log = nullptr;    // raw gate only: fp32 [H]
  const float* dt_bias = nullptr;  // raw gate only: fp32 [H, 128]
  float lower_bound = -5.0f;       // raw gate only: in [-kMaxLowerBound, 0]
  // Beta [B, T, H], fp32 or bf16: probabilities, or logits with the sigmoid in the kernel.
  const void* beta = nullptr;
  BetaInput beta_input = BetaInput::probability;
  DType beta_dtype = DType::f32;
  const float* initial_state = nullptr;  // nullable: zero state
  void* out = nullptr;
  float* final_state = nullptr;  // nullable: not written

  int64_t batch = 0;
  int64_t tokens = 0;
  int heads = 0;
  int key_dim = kHeadDim;
  int value_dim = kHeadDim;

  // Elements between consecutive tokens of q/k/v/out (heads must be compact); 0 = heads * 128.
  // Lets callers pass slices of one packed QKV projection without a copy.
  int64_t q_token_stride = 0;
  int64_t k_token_stride = 0;
  int64_t v_token_stride = 0;
  int64_t out_token_stride = 0;

  const int32_t* cu_seqlens = nullptr;       // device [num_seqs + 1]
  const int32_t* cu_seqlens_host = nullptr;  // host copy, required with cu_seqlens, validated
  int num_seqs = 0;

  bool fuse_q_l2norm = false;
  // Raw k, normalized in the kernel as fuse_q_l2norm normalizes q: the norm's factor folded into
  // k's products in fp32 (never a rounded normalized k), huge, tiny and zero rows taken as
  // l2norm() takes them; within the error budget of l2norm() then chunk_forward, not bit for bit.
  bool fuse_k_l2norm = false;

  void* workspace = nullptr;  // device, at least forward_workspace_bytes(params), 256-B aligned
  size_t workspace_bytes = 0;
};

// Device scratch the forward needs for these sizes (records passed between its kernels).
size_t forward_workspace_bytes(const ForwardParams& params);

// Runs the whole forward on `stream`.
void chunk_forward(const ForwardParams& params, cudaStream_t stream);

// The forward as separate stages, for per-kernel timing (kda-bench --stages). Running every
// stage in order is exactly chunk_forward().
int forward_stage_count();
const char* forward_stage_name(int stage);
void chunk_forward_stage(const ForwardParams& params, int stage, cudaStream_t stream);

// Validation alone (what every entry point runs first); throws kda::Error. Host only, no CUDA
// calls: unit-tested on machines without a GPU.
void validate(const L2NormParams& params);
void validate(const GateCumsumParams& params);
void validate(const ForwardParams& params);

}  // namespace kda
