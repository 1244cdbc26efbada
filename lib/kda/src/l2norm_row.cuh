// The row normalization y = x / sqrt(sum x^2 + 1e-6), rounded to bf16, for one 128-element row
// held by a group of threads (below).
//
// Used by the l2norm kernel and by the lab's v0/v1 PREP for q (their fused path is bitwise the
// explicit one; the library's PREP defers the q and raw-k norms instead, prep_chunk.cuh). Every
// operation is an explicit round-to-nearest intrinsic (no FMA contraction or reassociation left
// to the compiler) and the sum uses a fixed butterfly order, so the result depends only on the
// row's values.
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

// A row is held by a group of kLanes consecutive threads of a warp (kLanes = 4: 32 elements per
// thread; kLanes = 32: 4 elements per lane). Reductions are xor butterflies inside the group: at
// each level the two partners add the same two values, so every thread of the group ends with
// the same bits, and the order is fixed. Groups never talk to each other, so one warp can
// normalize 32 / kLanes rows at once (the memory-level parallelism the l2norm pass needs).
template <int kLanes>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset >>= 1)
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

template <int kLanes>
__device__ __forceinline__ float group_max(float v) {
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

template <int kLanes>
__device__ __forceinline__ bool group_all(bool b) {
  int v = b ? 1 : 0;
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset >>= 1)
    v &= __shfl_xor_sync(0xffffffffu, v, offset);
  return v != 0;
}

// Whether every element of the group's row is finite, and max|x| over the row: the same bits in
// every thread of the group. All 32 lanes of the warp must call it (it shuffles).
template <int kLanes, int kN>
__device__ __forceinline__ void group_finite_max(const float (&x)[kN], bool& finite,
                                                 float& largest) {
  finite = true;
  largest = 0.0f;
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    finite = finite && isfinite(x[i]);
    largest = fmaxf(largest, fabsf(x[i]));
  }
  finite = group_all<kLanes>(finite);
  largest = group_max<kLanes>(largest);  // exact, identical in every thread of the group
}

// 2^k as a float, exactly, for k in [-149, 127] (subnormal below -126).
__device__ __forceinline__ float exact_pow2(int k) {
  return k >= -126 ? __int_as_float((k + 127) << 23) : __int_as_float(1 << (k + 149));
}

// All 32 lanes of the warp must call this (it shuffles); branches are uniform within a group,
// and the shuffles sit outside them. kN = 128 / kLanes elements per thread, consecutive channels.
template <int kLanes, int kN>
__device__ __forceinline__ void l2norm_row_bf16(const float (&x)[kN], __nv_bfloat16 (&y)[kN]) {
  static_assert(kLanes * kN == kHeadDim, "a group holds one 128-element row");
  bool finite;
  float largest;
  group_finite_max<kLanes>(x, finite, largest);

  float scaled[kN];
  float eps = kL2NormEps;
  int e = 0;
  frexpf(largest, &e);
  const float eps_scaled = ldexpf(kL2NormEps, -2 * e);
  const bool rescale = finite && largest != 0.0f && isfinite(eps_scaled);
  // Multiplying by the exact power of two rounds exactly like ldexpf (only an underflowing
  // result rounds, to nearest even, in both), at one instruction instead of a library routine
  // per element. With rescale, -e lies in [-128, 74), inside exact_pow2's range.
  const float down = rescale ? exact_pow2(-e) : 1.0f;
#pragma unroll
  for (int i = 0; i < kN; ++i) scaled[i] = __fmul_rn(x[i], down);
  if (rescale) eps = eps_scaled;

  // Sum of squares: sequential inside the thread, then the group butterfly; fixed order.
  float s = __fmul_rn(scaled[0], scaled[0]);
#pragma unroll
  for (int i = 1; i < kN; ++i) s = __fmaf_rn(scaled[i], scaled[i], s);
  const float ssq = group_sum<kLanes>(s);
  const float rstd = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(ssq, eps)));
  const bool zero_row = finite && largest == 0.0f;
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    y[i] = __float2bfloat16_rn(zero_row ? 0.0f : __fmul_rn(scaled[i], rstd));
  }
}

// The quad layout used by the l2norm kernel and by PREP: 4 threads per row, each holding a run of
// 32 consecutive elements (64 B of bf16 or 128 B of fp32: 16-byte loads and stores).
inline constexpr int kRowRun = 32;

__device__ __forceinline__ void load_run(const __nv_bfloat16* p, float (&x)[kRowRun]) {
#pragma unroll
  for (int v = 0; v < kRowRun / 8; ++v) {
    const uint4 raw = reinterpret_cast<const uint4*>(p)[v];
    const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      x[8 * v + 2 * i] = __low2float(pairs[i]);
      x[8 * v + 2 * i + 1] = __high2float(pairs[i]);
    }
  }
}

__device__ __forceinline__ void load_run(const float* p, float (&x)[kRowRun]) {
#pragma unroll
  for (int v = 0; v < kRowRun / 4; ++v) {
    const float4 f = reinterpret_cast<const float4*>(p)[v];
    x[4 * v] = f.x;
    x[4 * v + 1] = f.y;
    x[4 * v + 2] = f.z;
    x[4 * v + 3] = f.w;
  }
}

__device__ __forceinline__ void store_run(__nv_bfloat16* p, const __nv_bfloat16 (&y)[kRowRun]) {
#pragma unroll
  for (int v = 0; v < kRowRun / 8; ++v) {
    uint4 raw;
    __nv_bfloat162* pairs = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) pairs[i] = __halves2bfloat162(y[8 * v + 2 * i], y[8 * v + 2 * i + 1]);
    reinterpret_cast<uint4*>(p)[v] = raw;
  }
}

// One warp per row, lane l owns elements 4l .. 4l+3.
__device__ __forceinline__ void l2norm_row_bf16(const float (&x)[4], __nv_bfloat16 (&y)[4]) {
  l2norm_row_bf16<32, 4>(x, y);
}

}  // namespace kda::detail
