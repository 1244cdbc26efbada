// The raw-input activations (kda-forward.md §3.1): the bounded gate
//   gamma = lb * sigmoid(exp(A_log[h]) * (g + dt_bias[h, d])),   G = log2(e) * cumsum(gamma)
// (computed as lb log2(e) * cumsum(sigmoid): the constant factor moves out of the sum),
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

// One channel's constants: slope = -exp(A_log[h]) log2(e) and offset = dt_bias[h, d] slope, so
// that sigmoid(exp(A_log) (g + dt_bias)) = 1 / (1 + 2^(g slope + offset)): one FMA per element
// before the MUFU pair instead of an add and a multiply.
struct GateChannel {
  float slope;
  float offset;
};
__device__ __forceinline__ GateChannel gate_channel(float a_log, float dt_bias) {
  const float slope = __fmul_rn(-expf(a_log), kLog2e);
  return {slope, __fmul_rn(dt_bias, slope)};
}
__device__ __forceinline__ float gate_sigmoid(float raw, GateChannel c) {
  return rcp_approx(__fadd_rn(1.0f, ptx::ex2_approx(__fmaf_rn(raw, c.slope, c.offset))));
}

// The chunk cumsum's order, shared by both kernels: the chunk's first kGateHalf tokens' sigmoids
// are summed in order from 0, the rest in order from 0 again. G = lb log2(e) (sum + the first
// half's total) is one FMA per element: gate_log2(sum, scale, base) with scale = lb log2(e)
// (gate_scale) and base = -0 in the first half (x + -0 = x for every x, zeros of either sign
// included), scale times the first half's total in the second. (Two halves let PREP's raw-gate
// load run on all 256 threads, two per channel, the halves of a channel in one warp: the total is
// a shuffle away.) Rows past a sequence's end add nothing, so in PREP they repeat G_{n-1}.
inline constexpr int kGateHalf = 32;
__device__ __forceinline__ float gate_scale(float lower_bound) {
  return __fmul_rn(lower_bound, kLog2e);
}
__device__ __forceinline__ float gate_second_half_base(float scale, float first_half_total) {
  return __fmul_rn(scale, first_half_total);
}
__device__ __forceinline__ float gate_log2(float sum, float scale, float base) {
  return __fmaf_rn(scale, sum, base);
}

__device__ __forceinline__ float load_as_float(const __nv_bfloat16* p) {
  return __bfloat162float(*p);
}
__device__ __forceinline__ float load_as_float(const float* p) { return *p; }

}  // namespace kda::detail
