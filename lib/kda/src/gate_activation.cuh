// The raw-input activations (kda-forward.md §3.1): the bounded gate
//   gamma = lb * sigmoid(exp(A_log[h]) * (g + dt_bias[h, d])),   G = log2(e) * cumsum(gamma),
// and beta = sigmoid(logit). One definition for the gate_cumsum kernel and for PREP's raw-input
// load (chunk_forward with GateInput::raw / BetaInput::logits), so both produce the same bits:
// every operation is an explicit intrinsic (no FMA contraction or reassociation left to the
// compiler) and the cumsum adds a chunk's tokens in one fixed order (kGateHalf below).
//
// The sigmoid is 1 / (1 + 2^(-x log2 e)) on the MUFU unit (ex2.approx, rcp.approx: relative
// error below 2^-21 together), ~5 instructions instead of expf's range reduction and an IEEE
// division (~25): PREP evaluates it 8,192 times per chunk. The error is far below what the
// forward makes of G (its 2^(G_i - G_j) factors are rounded to bf16 / fp16) and of beta.
// Limits: x = -inf or a 2^(...) that overflows gives 1 / inf = 0, x = +inf gives 1, NaN stays
// NaN; so gamma lies in [lb, 0] for any finite A_log and dt_bias.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "device/ptx.cuh"

namespace kda::detail {

// log2(e) rounded to float (= 1.4426950216..., the RCP_LN2 of the peers).
inline constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float sigmoid_fast(float x) {
  const float e = ptx::ex2_approx(__fmul_rn(-x, kLog2e));
  return rcp_approx(__fadd_rn(1.0f, e));
}

// The per-token natural-log decay of one channel: rate = expf(A_log[h]), bias = dt_bias[h, d].
__device__ __forceinline__ float gate_gamma(float raw, float rate, float bias, float lower_bound) {
  return __fmul_rn(lower_bound, sigmoid_fast(__fmul_rn(rate, __fadd_rn(raw, bias))));
}

// The chunk cumsum's order, shared by both kernels: the chunk's first kGateHalf tokens are summed
// in order from 0, the rest in order from 0 again plus the first half's total; G = log2(e) times
// that natural-log sum. (Two halves let PREP's raw-gate load run on all 256 threads, two per
// channel, with one barrier.)
inline constexpr int kGateHalf = 32;
__device__ __forceinline__ float gate_log2(float natural) { return __fmul_rn(natural, kLog2e); }

__device__ __forceinline__ float load_as_float(const __nv_bfloat16* p) {
  return __bfloat162float(*p);
}
__device__ __forceinline__ float load_as_float(const float* p) { return *p; }

}  // namespace kda::detail
