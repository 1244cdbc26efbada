// The row normalization y = x / sqrt(sum x^2 + 1e-6), rounded to bf16, for one 128-element row
// held by one warp (lane l owns elements 4l .. 4l+3).
//
// Used by the l2norm kernel AND by the forward's PREP kernel when fuse_q_l2norm is set, so both
// paths produce bitwise-identical normalized q. Every operation is an explicit round-to-nearest
// intrinsic (no FMA contraction or reassociation left to the compiler) and the sum uses a fixed
// butterfly order, so the result depends only on the row's values.
//
// Exact for every finite row (kda-forward.md §9.1): the row is scaled by the power of two 2^-e
// with max|x| = f * 2^e, f in [0.5, 1) (exact), so the sum of squares lies in [0.25, 128] and
// neither overflows (rows up to FLT_MAX) nor loses tiny rows to underflow:
//   x / sqrt(ssq + eps) = x' / sqrt(ssq' + eps * 2^-2e),   x' = x * 2^-e.
// When eps * 2^-2e overflows (max|x| < ~2^-74), eps dominates ssq by > 2^120 and the unscaled
// formula is exact to rounding. Non-finite rows use the unscaled formula too, which propagates:
// any NaN makes the whole row NaN; an inf entry gives inf * 0 = NaN (finite entries 0). This is
// what the CPU reference (kda::ref::l2norm_rows) does.
#pragma once

#include <cuda_bf16.h>

#include "kda/kda.h"

namespace kda::detail {

__device__ __forceinline__ float warp_sum_butterfly(float v) {
  // Every lane ends with the same bits: at each level the two partners add the same two values.
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum of squares of the warp's 128 values, fixed order.
__device__ __forceinline__ float warp_sum_squares(const float (&x)[4]) {
  float s = __fmul_rn(x[0], x[0]);
  s = __fmaf_rn(x[1], x[1], s);
  s = __fmaf_rn(x[2], x[2], s);
  s = __fmaf_rn(x[3], x[3], s);
  return warp_sum_butterfly(s);
}

// All 32 lanes of the warp must call this (it shuffles); every branch below is warp-uniform.
__device__ __forceinline__ void l2norm_row_bf16(const float (&x)[4], __nv_bfloat16 (&y)[4]) {
  bool finite = true;
  float largest = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    finite = finite && isfinite(x[i]);
    largest = fmaxf(largest, fabsf(x[i]));
  }
  finite = __all_sync(0xffffffffu, finite);

  float scaled[4] = {x[0], x[1], x[2], x[3]};
  float eps = kL2NormEps;
  if (finite) {
    largest = warp_max(largest);  // exact, identical in every lane
    if (largest == 0.0f) {
#pragma unroll
      for (int i = 0; i < 4; ++i) y[i] = __float2bfloat16_rn(0.0f);
      return;
    }
    int e = 0;
    frexpf(largest, &e);
    const float eps_scaled = ldexpf(kL2NormEps, -2 * e);
    if (isfinite(eps_scaled)) {
#pragma unroll
      for (int i = 0; i < 4; ++i) scaled[i] = ldexpf(x[i], -e);
      eps = eps_scaled;
    }
  }
  const float ssq = warp_sum_squares(scaled);
  const float rstd = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(ssq, eps)));
#pragma unroll
  for (int i = 0; i < 4; ++i) y[i] = __float2bfloat16_rn(__fmul_rn(scaled[i], rstd));
}

}  // namespace kda::detail
