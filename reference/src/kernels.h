// The reference's hot loops: the recurrence's state sweeps and the chunked algorithm's small
// GEMMs and forward substitution. kernels.cpp compiles each for several instruction sets
// (AVX-512, AVX2, the x86-64 baseline) and picks one at run time (kda/ref/reference.h, Isa).
//
// Why every instruction set gives the same bits: each output element is computed by one fixed
// sequence of IEEE operations, written out below per kernel. The loops are vectorized across the
// output column only, never across a sum, and kda_ref compiles with -ffp-contract=off (no fused
// multiply-add contraction), so a wider vector only computes more elements side by side. Register
// blocking (rows per block, columns per vector) differs per instruction set and changes nothing
// either, because no element's operation sequence depends on it.
#pragma once

#include <cstdint>

namespace kda::ref::detail {

// Tokens of one (sequence, head) that the recurrence runs in one call, with their per-token
// operands already formed in precision S. Row-major, token-major: token t's key row is
// k[t * K .. t * K + K).
template <class S>
struct RecurrentTokens {
  int64_t tokens = 0, key_dim = 0, value_dim = 0;
  const S* decay = nullptr;  // tokens x K: 2^gamma_t
  const S* k = nullptr;      // tokens x K
  const S* sq = nullptr;     // tokens x K: scale * q_hat_t
  const S* beta = nullptr;   // tokens
  const S* v = nullptr;      // tokens x V
  S* out = nullptr;          // tokens rows of V, out_stride apart
  int64_t out_stride = 0;
};

// Runs §2.1 for the given tokens on `state` (K x V row-major, updated in place). Per token t and
// value column c, with rows r taken in ascending order:
//   sweep 1, per r:  S[r][c] = S[r][c] * decay[r];   p[c] = p[c] + k[r] * S[r][c]   (p from +0)
//   delta[c] = beta * (v[c] - p[c])
//   sweep 2, per r:  S[r][c] = S[r][c] + k[r] * delta[c];   o[c] = o[c] + sq[r] * S[r][c]  (o from +0)
// Value columns are independent, so the state is swept in column slices that stay in L1 across
// all the tokens of the call.
template <class S>
void recurrent_tokens(const RecurrentTokens<S>& tokens, S* state);

// C = A · B with A(i, d) = a[i * a_row + d * a_col] (any strides: a transposed operand is
// a_row = 1), B row-major (ldb), C row-major (ldc), i < rows, c < cols, d < depth(i):
//   C[i][c] = (((+0 + A(i,0) B[0][c]) + A(i,1) B[1][c]) + ...)   ascending d
// depth(i) = inner, or min(inner, i + 1) when `lower` (A inclusive lower triangular: the
// products past the diagonal are skipped, not added as zeros).
template <class S>
struct Gemm {
  int64_t rows = 0, cols = 0, inner = 0;
  const S* a = nullptr;
  int64_t a_row = 0, a_col = 1;
  const S* b = nullptr;
  int64_t ldb = 0;
  S* c = nullptr;
  int64_t ldc = 0;
  bool lower = false;
};

template <class S>
void gemm(const Gemm<S>& g);

// T = (I + A)^-1 for A strictly lower triangular (n x n, row-major, lda), by forward
// substitution row by row, T row-major (ldt), upper part set to 0:
//   T[i][c] = (((e_i[c] - A[i][0] T[0][c]) - A[i][1] T[1][c]) - ...)   j ascending, j < i
template <class S>
void unit_lower_inverse(int64_t n, const S* a, int64_t lda, S* t, int64_t ldt);

// max |x[i]| over i < n (exact whatever the order) and whether every x[i] is finite.
float max_abs(const float* x, int64_t n, bool* finite);

// l2norm_rows' simple case for `rows` rows of `dim` at once (l2norm.cpp): per row r, in order,
//   ssq = ((+0 + x'[0]^2) + x'[1]^2) + ...,  x'[d] = S(x[r][d]) * unit[r]
//   y[r][d] = x'[d] * (1 / sqrt(ssq + eps_scaled[r])),
// the rows' sums interleaved (independent chains). rows <= 8.
template <class S>
void scaled_unit_rows(const float* x, S* y, int rows, int64_t dim, const S* unit,
                      const S* eps_scaled);

// dst[i] = S(src[i]) for i < n (exact).
template <class S>
void widen(const float* src, S* dst, int64_t n);

// dst[i] = S(gate[i]) - S(previous[i]), or S(gate[i]) when previous is null: the per-token log2
// decay from the chunk-local cumulative gate.
template <class S>
void gate_difference(const float* gate, const float* previous, S* dst, int64_t n);

// y[i] = 2^x[i] for i < n (y == x allowed), +0 where 2^x underflows to zero (x < -1075 in double, -150 in float),
// NaN for NaN, +inf above the range. float: std::exp2 per element (exp2_or_zero). double: a
// fixed polynomial evaluation, vectorized: x = m + f with m = round(x), f in [-0.5, 0.5] exact,
// 2^f = sum_{k<=13} (f ln2)^k / k! by Horner (truncation < 5e-18), times 2^m built in the exponent
// field; within 2 ulp of the true value (test Exp2Array: max relative error 2.2e-16 vs exp2l), and
// the same bits on every instruction set. Results outside the normal range (x < -1022 or > 1023)
// come from std::exp2.
template <class S>
void exp2_array(const S* x, S* y, int64_t n);

}  // namespace kda::ref::detail
