// Host-side argument validation for every kda entry point (no CUDA calls: unit-tested without a
// GPU). Each message names the entry point, says what was wrong and what to do instead.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

#include "validate.h"

#include "kda/kda.h"
#include "record.h"

namespace kda {

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return "bf16";
    case DType::f32:
      return "f32";
  }
  return "unknown";
}

const char* to_string(GateInput input) {
  switch (input) {
    case GateInput::chunk_log2:
      return "chunk_log2";
    case GateInput::raw:
      return "raw";
  }
  return "unknown";
}

const char* to_string(BetaInput input) {
  switch (input) {
    case BetaInput::probability:
      return "probability";
    case BetaInput::logits:
      return "logits";
  }
  return "unknown";
}

namespace {

// Largest element count (and element offset) any tensor may have: the kernels index with int64
// and form products such as token * stride + channel, which must not overflow.
constexpr int64_t kMaxElements = int64_t{1} << 62;
constexpr int64_t kMaxGridX = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxGridY = 65535;

[[noreturn]] void fail(ErrorCode code, const std::string& message) { throw Error(code, message); }

std::string pointer_text(const void* p) {
  std::ostringstream out;
  out << p;
  return out.str();
}

std::string float_text(double value) {
  std::ostringstream out;
  out.precision(12);
  out << value;
  return out.str();
}

// a * b, or fails (unsupported) when the product overflows int64 or reaches kMaxElements.
int64_t checked_mul(const std::string& op, const std::string& what, int64_t a, int64_t b) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product) || product >= kMaxElements) {
    fail(ErrorCode::unsupported,
         op + ": " + what + " = " + std::to_string(a) + " * " + std::to_string(b) +
             " elements exceeds 2^62, more than the kernels' 64-bit indexing allows: split the "
             "problem into smaller calls");
  }
  return product;
}

void require_pointer(const std::string& op, const char* field, const void* p, const char* what) {
  if (p == nullptr) fail(ErrorCode::invalid_argument, op + ": " + field + " is null: pass " + what);
}

void require_aligned(const std::string& op, const char* field, const void* p, size_t alignment) {
  if (reinterpret_cast<uintptr_t>(p) % alignment != 0) {
    fail(ErrorCode::invalid_argument,
         op + ": " + field + " = " + pointer_text(p) + " is not " + std::to_string(alignment) +
             "-byte aligned: the kernels use " + std::to_string(alignment) +
             "-byte accesses; pass a pointer from cudaMalloc or offset it by a multiple of " +
             std::to_string(alignment) + " bytes");
  }
}

void check_positive(const std::string& op, const char* field, int64_t value) {
  if (value <= 0) {
    fail(ErrorCode::invalid_argument,
         op + ": " + field + " = " + std::to_string(value) + " must be >= 1");
  }
}

// Resolves a token/row stride in elements (0 = compact) and checks it: at least `compact`, a
// multiple of `multiple` elements (16-byte rows), and in range for 64-bit indexing over `rows`.
int64_t resolve_stride(const std::string& op, const char* field, int64_t stride, int64_t compact,
                       const char* compact_text, int64_t multiple, int64_t rows) {
  if (stride < 0) {
    fail(ErrorCode::invalid_argument, op + ": " + field + " = " + std::to_string(stride) +
                                          " must be >= 0 (0 means compact, " + compact_text + ")");
  }
  const int64_t resolved = stride == 0 ? compact : stride;
  if (resolved < compact) {
    fail(ErrorCode::invalid_argument,
         op + ": " + field + " = " + std::to_string(resolved) + " is smaller than " + compact_text +
             " = " + std::to_string(compact) +
             ": rows must not overlap (heads are compact within a token), so consecutive rows "
             "are at least that many elements apart");
  }
  if (resolved % multiple != 0) {
    fail(ErrorCode::invalid_argument,
         op + ": " + field + " = " + std::to_string(resolved) + " is not a multiple of " +
             std::to_string(multiple) +
             " elements: the kernels access 16-byte rows; pad the stride to a multiple of " +
             std::to_string(multiple));
  }
  checked_mul(op, std::string("rows * ") + field, rows, resolved);
  return resolved;
}

// The sequence description shared by gate_cumsum and chunk_forward. Returns N (the number of
// sequences, i.e. of state rows).
int64_t check_sequences(const std::string& op, int64_t batch, int64_t tokens,
                        const int32_t* cu_seqlens, const int32_t* cu_seqlens_host, int num_seqs) {
  check_positive(op, "batch", batch);
  check_positive(op, "tokens", tokens);
  checked_mul(op, "batch * tokens", batch, tokens);
  if (cu_seqlens == nullptr) {
    if (cu_seqlens_host != nullptr) {
      fail(ErrorCode::invalid_argument,
           op + ": cu_seqlens_host is set but cu_seqlens is null: pass the device offsets too "
                "(or neither, for dense batches)");
    }
    if (num_seqs != 0 && num_seqs != batch) {
      fail(ErrorCode::invalid_argument,
           op + ": num_seqs = " + std::to_string(num_seqs) +
               " without cu_seqlens: a dense batch has N = batch = " + std::to_string(batch) +
               " sequences; leave num_seqs = 0 or pass cu_seqlens");
    }
    if (batch > kMaxGridX) {
      fail(ErrorCode::unsupported, op + ": batch = " + std::to_string(batch) +
                                       " exceeds 2^31 - 1 sequences, the kernels' grid limit");
    }
    return batch;
  }
  if (batch != 1) {
    fail(ErrorCode::invalid_argument,
         op + ": cu_seqlens requires batch == 1 (got batch = " + std::to_string(batch) +
             "): pack the sequences into one row of tokens");
  }
  if (cu_seqlens_host == nullptr) {
    fail(ErrorCode::invalid_argument,
         op + ": cu_seqlens is set but cu_seqlens_host is null: pass the host copy of the "
              "offsets too (they are validated on the host)");
  }
  if (num_seqs < 1) {
    fail(ErrorCode::invalid_argument,
         op + ": num_seqs = " + std::to_string(num_seqs) +
             " with cu_seqlens: need at least one sequence (cu_seqlens holds num_seqs + 1 "
             "offsets)");
  }
  require_aligned(op, "cu_seqlens", cu_seqlens, alignof(int32_t));
  if (cu_seqlens_host[0] != 0) {
    fail(ErrorCode::invalid_argument,
         op + ": cu_seqlens_host[0] = " + std::to_string(cu_seqlens_host[0]) +
             " must be 0: offsets start at the first token");
  }
  for (int i = 1; i <= num_seqs; ++i) {
    if (cu_seqlens_host[i] < cu_seqlens_host[i - 1]) {
      fail(ErrorCode::invalid_argument,
           op + ": cu_seqlens_host decreases at index " + std::to_string(i) + " (cu[" +
               std::to_string(i - 1) + "] = " + std::to_string(cu_seqlens_host[i - 1]) + " > cu[" +
               std::to_string(i) + "] = " + std::to_string(cu_seqlens_host[i]) +
               "): offsets must be non-decreasing");
    }
  }
  if (cu_seqlens_host[num_seqs] > tokens) {
    fail(ErrorCode::invalid_argument, op + ": cu_seqlens_host[" + std::to_string(num_seqs) +
                                          "] = " + std::to_string(cu_seqlens_host[num_seqs]) +
                                          " exceeds tokens = " + std::to_string(tokens) +
                                          ": the last offset must be <= tokens");
  }
  return num_seqs;
}

// Checks the per-head chunk grid of PREP / gate_cumsum and returns its capacity.
int64_t check_chunk_grid(const std::string& op, int64_t total_tokens, int64_t num_seqs,
                         int64_t heads) {
  if (heads > kMaxGridY) {
    fail(ErrorCode::unsupported,
         op + ": heads = " + std::to_string(heads) + " exceeds 65535, the kernels' grid limit");
  }
  const int64_t capacity = detail::chunk_capacity(total_tokens, num_seqs);
  if (capacity > kMaxGridX) {
    fail(ErrorCode::unsupported,
         op + ": " + std::to_string(capacity) +
             " chunk slots per head exceed 2^31 - 1, the kernels' grid limit: split the call");
  }
  return capacity;
}

void check_head_dim(const std::string& op, const char* field, int value) {
  if (value != kHeadDim) {
    fail(ErrorCode::unsupported,
         op + ": " + field + " = " + std::to_string(value) +
             " is not supported: the GPU kernels support K = V = 128 only (use the CPU reference "
             "for other sizes)");
  }
}

void check_heads(const std::string& op, int heads) {
  if (heads <= 0) {
    fail(ErrorCode::invalid_argument, op + ": heads = " + std::to_string(heads) + " must be >= 1");
  }
}

// Workspace bytes for N sequences: one record per (head, chunk slot). Checks the sizes it uses.
// The gate producer's lower bound (gate_cumsum, and chunk_forward's raw gate): written so that
// NaN fails too.
void check_lower_bound(const std::string& op, float lower_bound) {
  if (!(lower_bound >= -kMaxLowerBound && lower_bound <= 0.0f)) {
    fail(ErrorCode::invalid_argument,
         op + ": lower_bound = " + float_text(lower_bound) + " must lie in [-" +
             float_text(kMaxLowerBound) +
             ", 0] (finite): per-token log2 decays must stay within the bounded-gate contract "
             "(kda-forward.md §3.1)");
  }
}

size_t forward_bytes(const ForwardParams& p, int64_t num_states,
                     const detail::ForwardKernels& kernels) {
  const std::string op = "chunk_forward";
  const int64_t total_tokens = checked_mul(op, "batch * tokens", p.batch, p.tokens);
  const int64_t capacity = check_chunk_grid(op, total_tokens, num_states, p.heads);
  if (num_states > kMaxGridX / kernels.scan_ctas_per_chain) {
    fail(ErrorCode::unsupported, op + ": " + std::to_string(num_states) +
                                     " sequences exceed the scan grid limit of (2^31 - 1) / " +
                                     std::to_string(kernels.scan_ctas_per_chain) +
                                     ": split the call");
  }
  const int64_t records =
      checked_mul(op, "workspace records (heads * chunk slots)", p.heads, capacity);
  return static_cast<size_t>(
      checked_mul(op, "workspace bytes", records, kernels.record_bytes));
}

void check_forward_dims(const ForwardParams& p) {
  const std::string op = "chunk_forward";
  check_head_dim(op, "key_dim", p.key_dim);
  check_head_dim(op, "value_dim", p.value_dim);
  check_heads(op, p.heads);
}

// The raw-input options (kda.h GateInput, BetaInput, fuse_k_l2norm): enums in range, dtypes the
// kernels read, the gate parameters present exactly when the raw gate reads them, and a PREP that
// reads them.
void check_raw_inputs(const ForwardParams& p, const detail::ForwardKernels& kernels) {
  const std::string op = "chunk_forward";
  if (p.gate_input != GateInput::chunk_log2 && p.gate_input != GateInput::raw) {
    fail(ErrorCode::invalid_argument,
         op + ": gate_input = " + std::to_string(static_cast<int>(p.gate_input)) +
             " is not a GateInput: use GateInput::chunk_log2 or GateInput::raw");
  }
  if (p.beta_input != BetaInput::probability && p.beta_input != BetaInput::logits) {
    fail(ErrorCode::invalid_argument,
         op + ": beta_input = " + std::to_string(static_cast<int>(p.beta_input)) +
             " is not a BetaInput: use BetaInput::probability or BetaInput::logits");
  }
  if (p.beta_dtype != DType::bf16 && p.beta_dtype != DType::f32) {
    fail(ErrorCode::invalid_argument,
         op + ": beta_dtype = " + std::to_string(static_cast<int>(p.beta_dtype)) +
             " is not a DType: beta must be f32 or bf16");
  }
  if (p.gate_dtype != DType::bf16 && p.gate_dtype != DType::f32) {
    fail(ErrorCode::invalid_argument,
         op + ": gate_dtype = " + std::to_string(static_cast<int>(p.gate_dtype)) +
             " is not a DType: the gate must be f32 (chunk_log2) or bf16 / f32 (raw)");
  }
  const bool raw_gate = p.gate_input == GateInput::raw;
  if (raw_gate) {
    require_pointer(op, "a_log", p.a_log, "a device pointer to fp32 [H] (GateInput::raw)");
    require_pointer(op, "dt_bias", p.dt_bias,
                    "a device pointer to fp32 [H, 128] (GateInput::raw)");
    check_lower_bound(op, p.lower_bound);
  } else {
    if (p.gate_dtype != DType::f32) {
      fail(ErrorCode::invalid_argument,
           op + ": gate_dtype = " + to_string(p.gate_dtype) +
               " with GateInput::chunk_log2: the cumulative log2 gate is fp32 (pass the raw "
               "projection with GateInput::raw, or run gate_cumsum first)");
    }
    if (p.a_log != nullptr || p.dt_bias != nullptr) {
      fail(ErrorCode::invalid_argument,
           op + ": a_log / dt_bias are set but gate_input is GateInput::chunk_log2, which never "
                "reads them: set gate_input = GateInput::raw to pass the raw gate, or leave them "
                "null");
    }
  }
  const bool raw_any = raw_gate || p.beta_input == BetaInput::logits || p.fuse_k_l2norm ||
                       p.beta_dtype != DType::f32;
  if (raw_any && kernels.contract_only != nullptr) {
    fail(ErrorCode::unsupported,
         op + ": raw inputs (GateInput::raw, BetaInput::logits, bf16 beta, fuse_k_l2norm) " +
             kernels.contract_only);
  }
}

}  // namespace

// Depends on the sizes only (never reads the offsets), so it can be called before the offsets
// exist: N = num_seqs with cu_seqlens, else batch (or num_seqs if that is larger, for callers that
// size the workspace before setting cu_seqlens).
size_t detail::forward_workspace_bytes(const ForwardParams& params,
                                       const detail::ForwardKernels& kernels) {
  const std::string op = "chunk_forward";
  check_forward_dims(params);
  check_positive(op, "batch", params.batch);
  check_positive(op, "tokens", params.tokens);
  const int64_t n = params.cu_seqlens != nullptr ? params.num_seqs
                                                 : std::max<int64_t>(params.batch, params.num_seqs);
  if (n < 1) {
    fail(ErrorCode::invalid_argument,
         op + ": num_seqs = " + std::to_string(n) +
             " with cu_seqlens: need at least one sequence (cu_seqlens holds num_seqs + 1 "
             "offsets)");
  }
  return forward_bytes(params, n, kernels);
}

size_t forward_workspace_bytes(const ForwardParams& params) {
  return detail::forward_workspace_bytes(params, detail::kLibraryKernels);
}

void validate(const L2NormParams& p) {
  const std::string op = "l2norm";
  if (p.x_dtype != DType::bf16 && p.x_dtype != DType::f32) {
    fail(ErrorCode::invalid_argument,
         op + ": x_dtype = " + std::to_string(static_cast<int>(p.x_dtype)) +
             " is not a DType: x must be bf16 or f32");
  }
  check_head_dim(op, "dim", p.dim);
  if (p.rows < 0) {
    fail(ErrorCode::invalid_argument,
         op + ": rows = " + std::to_string(p.rows) + " must be >= 0 (0 is a no-op)");
  }
  if (p.rows == 0) return;
  require_pointer(op, "x", p.x, "a device pointer to [rows, dim] bf16 or f32");
  require_pointer(op, "y", p.y, "a device pointer to [rows, dim] bf16");
  require_aligned(op, "x", p.x, 16);
  require_aligned(op, "y", p.y, 16);
  const int64_t x_multiple = p.x_dtype == DType::bf16 ? 8 : 4;
  resolve_stride(op, "x_row_stride", p.x_row_stride, p.dim, "dim", x_multiple, p.rows);
  resolve_stride(op, "y_row_stride", p.y_row_stride, p.dim, "dim", 8, p.rows);
}

void validate(const GateCumsumParams& p) {
  const std::string op = "gate_cumsum";
  check_head_dim(op, "dim", p.dim);
  check_heads(op, p.heads);
  check_lower_bound(op, p.lower_bound);
  const int64_t n =
      check_sequences(op, p.batch, p.tokens, p.cu_seqlens, p.cu_seqlens_host, p.num_seqs);
  const int64_t total_tokens = p.batch * p.tokens;
  check_chunk_grid(op, total_tokens, n, p.heads);
  checked_mul(op, "batch * tokens * heads * dim",
              checked_mul(op, "batch * tokens * heads", total_tokens, p.heads), kHeadDim);
  if (p.raw_gate_dtype != DType::bf16 && p.raw_gate_dtype != DType::f32) {
    fail(ErrorCode::invalid_argument,
         op + ": raw_gate_dtype = " + std::to_string(static_cast<int>(p.raw_gate_dtype)) +
             " is not a DType: the raw gate must be bf16 or f32");
  }
  require_pointer(op, "raw_gate", p.raw_gate, "a device pointer to bf16 or f32 [B, T, H, 128]");
  require_pointer(op, "a_log", p.a_log, "a device pointer to fp32 [H]");
  require_pointer(op, "dt_bias", p.dt_bias, "a device pointer to fp32 [H, 128]");
  require_pointer(op, "out", p.out, "a device pointer to fp32 [B, T, H, 128]");
  require_aligned(op, "raw_gate", p.raw_gate, 16);
  require_aligned(op, "a_log", p.a_log, 4);
  require_aligned(op, "dt_bias", p.dt_bias, 4);
  require_aligned(op, "out", p.out, 16);
}

void detail::validate(const ForwardParams& p, const detail::ForwardKernels& kernels) {
  const std::string op = "chunk_forward";
  check_forward_dims(p);
  // bf16 q is part of the contract (kda-forward.md §9.1: the fused path refuses other dtypes),
  // so another dtype is a caller error, not a kernel limitation.
  if (p.q_dtype != DType::bf16) {
    if (p.fuse_q_l2norm) {
      fail(ErrorCode::invalid_argument,
           op + ": fuse_q_l2norm requires bf16 q (got " + to_string(p.q_dtype) +
               "): normalize q with kda::l2norm first or cast it to bf16");
    }
    fail(ErrorCode::invalid_argument,
         op + ": q_dtype = " + to_string(p.q_dtype) +
             ": q must be bf16 (kda::l2norm writes normalized q as bf16; cast other dtypes first)");
  }
  const int64_t n =
      check_sequences(op, p.batch, p.tokens, p.cu_seqlens, p.cu_seqlens_host, p.num_seqs);
  const size_t needed = forward_bytes(p, n, kernels);
  const int64_t total_tokens = p.batch * p.tokens;
  const int64_t row = int64_t{p.heads} * kHeadDim;  // elements of one token's heads
  checked_mul(op, "batch * tokens * heads * 128", total_tokens, row);
  checked_mul(op, "state elements (N * heads * 128 * 128)",
              checked_mul(op, "N * heads", n, p.heads), int64_t{kHeadDim} * kHeadDim);

  require_pointer(op, "q", p.q, "a device pointer to bf16 [B, T, H, 128]");
  require_pointer(op, "k", p.k, "a device pointer to bf16 [B, T, H, 128]");
  require_pointer(op, "v", p.v, "a device pointer to bf16 [B, T, H, 128]");
  check_raw_inputs(p, kernels);
  require_pointer(op, "gate", p.gate,
                  p.gate_input == GateInput::raw
                      ? "a device pointer to the raw gate, bf16 or f32 [B, T, H, 128]"
                      : "a device pointer to fp32 [B, T, H, 128] (gate_cumsum's output)");
  require_pointer(op, "beta", p.beta, "a device pointer to fp32 or bf16 [B, T, H]");
  require_pointer(op, "out", p.out, "a device pointer to bf16 [B, T, H, 128]");
  require_aligned(op, "q", p.q, 16);
  require_aligned(op, "k", p.k, 16);
  require_aligned(op, "v", p.v, 16);
  require_aligned(op, "gate", p.gate, 16);
  require_aligned(op, "beta", p.beta, p.beta_dtype == DType::bf16 ? 2 : 4);
  if (p.gate_input == GateInput::raw) {
    require_aligned(op, "a_log", p.a_log, 4);
    require_aligned(op, "dt_bias", p.dt_bias, 4);
  }
  require_aligned(op, "out", p.out, 16);
  require_aligned(op, "initial_state", p.initial_state, 16);
  require_aligned(op, "final_state", p.final_state, 16);

  resolve_stride(op, "q_token_stride", p.q_token_stride, row, "heads * 128", 8, total_tokens);
  resolve_stride(op, "k_token_stride", p.k_token_stride, row, "heads * 128", 8, total_tokens);
  resolve_stride(op, "v_token_stride", p.v_token_stride, row, "heads * 128", 8, total_tokens);
  resolve_stride(op, "out_token_stride", p.out_token_stride, row, "heads * 128", 8, total_tokens);

  if (p.workspace == nullptr) {
    fail(ErrorCode::invalid_argument,
         op + ": workspace is null: allocate forward_workspace_bytes(params) = " +
             std::to_string(needed) + " bytes of device memory (256-byte aligned)");
  }
  require_aligned(op, "workspace", p.workspace, 256);
  if (p.workspace_bytes < needed) {
    fail(ErrorCode::invalid_argument,
         op + ": workspace_bytes = " + std::to_string(p.workspace_bytes) +
             " is too small: these sizes need " + std::to_string(needed) +
             " bytes (forward_workspace_bytes(params))");
  }
}

void validate(const ForwardParams& p) { detail::validate(p, detail::kLibraryKernels); }

}  // namespace kda
