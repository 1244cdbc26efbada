// PREP: one chunk's factors (kda-forward.md §2.2) from q, k, v, the gate and beta, with the two
// expensive parts off long dependent fp32 chains:
//   grams A_kk, A_qk   mma.sync m16n8k16 (bf16 operands, fp32 accumulation), 16x16 block pairs
//                      with per-column-block anchors (kernel-design §7.1);
//   T = (I + A_kk)^-1  fp32 on CUDA cores, blocked: 4 diagonal 16x16 forward substitutions, then
//                      the 6 off-diagonal blocks by Schur formulas, level by level (§7.2);
//   W = T (beta k Gamma), U = beta v + (T - I) diag(beta) v
//                      mma.sync: fp16 operands for W (both factors bounded by ~1), bf16 for U
//                      (v is unbounded user data, taken as it is: beta goes into T's columns and
//                      the dominant diagonal term is added in fp32), fp32 accumulation, rounded
//                      once into the record: fp16 with U scaled per value column (record.h;
//                      docs/precision.md).
// One CTA per (64-token chunk, head), 256 threads (8 warps), prep_layout.h kSBytes (107 KB) of
// shared memory and at most 128 registers: two CTAs per SM. Every address / fragment map comes
// from prep_layout.h and device/fragments.h (shared with the CPU emulation test). Fixed orders,
// no atomics: bitwise reproducible.
//
// Who uses what: the library's kernels (prep.cu) run the channel-halves PREP (halves_chunk.cuh:
// the same factors in 75 KB, three CTAs per SM), which reuses this file's helpers and its phases
// 4 and 5 on its own regions (prep_layout.h TailRegions); prep_chunk itself, the whole chunk in
// this layout, is the lab's v2 PREP (lab/src/prep_v2.cu, with the bf16 v1 record its SCANs read).
// A header because the chunk's code is a template on where the factors go (the record writer,
// F16Record below, or the lab's).
//
// Phases (barriers between them):
//   1  load q, k, v (bf16), G (fp32), beta; rows >= n: zeros by selection, G = G_{n-1}
//   2a the fused path's row factors r_i = 1 / |q_i| (deferred: q itself is never normalized), each
//      warp on its own 8 rows of q, before the load barrier (k, v, G still in flight); raw k's
//      the same way (fuse_k_l2norm, the raw-input kernel: k's factors go in with k in 2, 3, 4a)
//   2  q' = (scale r_i) q Gamma, kg = k 2^(G_{n-1} - G), a = 2^(G_{n-1}), the grams' column
//      operands, zero upper blocks of A_qk
//   3  grams: warp w runs block pairs w and w + 8 (prep_layout.h); A_qk -> record, A_kk -> smem
//      fp32
//   4  inverse: diagonal blocks (warps 0..3, lane = column), Schur levels 1..3
//   5  W, U: warp w owns columns 16w..16w+15, T fragments read from the fp32 inverse
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "config.h"
#include "device/fragments.h"
#include "device/ptx.cuh"
#include "gate_activation.cuh"
#include "l2norm_row.cuh"
#include "prep/prep.h"
#include "prep/prep_layout.h"
#include "record.h"

namespace kda::detail::prep {

using namespace ptx;  // NOLINT: the PTX wrappers are this file's vocabulary (the layout's too)
using mma::c_col;
using mma::c_row;

// Where PREP puts each factor, and as what: the library's record (record.h), fp16 factors and U
// stored per value column against its bounds. A record writer is a type with these members; the
// lab's v1 record (bf16, no bounds) is the other one (lab/src/prep_v2.cu).
struct F16Record {
  static constexpr int64_t kBytes = kRecordBytes;
  static constexpr bool kF16 = true;      // fp16 factors (else bf16)
  static constexpr bool kUBounds = true;  // U column d as U * 2^15 / U_BOUND[d], with the bounds
  KDA_HD static constexpr int64_t w(int i, int d) { return rec_w(i, d); }
  KDA_HD static constexpr int64_t qp(int i, int d) { return rec_qp(i, d); }
  KDA_HD static constexpr int64_t kg(int i, int d) { return rec_kg(i, d); }
  KDA_HD static constexpr int64_t aqk(int i, int j) { return rec_aqk(i, j); }
  KDA_HD static constexpr int64_t u(int i, int d) { return rec_u(i, d); }
  KDA_HD static constexpr int64_t a(int d) { return rec_a(d); }
};

// ------------------------------------------------------------------------------------------------
// Shared-memory accessors (byte offsets from prep_layout.h).

__device__ __forceinline__ float ldf(const unsigned char* s, int byte) {
  return *reinterpret_cast<const float*>(s + byte);
}
__device__ __forceinline__ float2 ldf2(const unsigned char* s, int byte) {
  return *reinterpret_cast<const float2*>(s + byte);
}
__device__ __forceinline__ float2 ldh2(const unsigned char* s, int byte) {  // a bf16 pair
  return unpack_bf16(*reinterpret_cast<const uint32_t*>(s + byte));
}
__device__ __forceinline__ void stf(unsigned char* s, int byte, float x) {
  *reinterpret_cast<float*>(s + byte) = x;
}

__device__ __forceinline__ void put_pair(char* rec, int64_t byte, uint32_t bits) {
  *reinterpret_cast<uint32_t*>(rec + byte) = bits;
}

// 8 consecutive fp32 / bf16 values at a 16-byte aligned smem byte offset.
__device__ __forceinline__ void load8_f32(const unsigned char* s, int byte, float (&x)[8]) {
  const float4 a = *reinterpret_cast<const float4*>(s + byte);
  const float4 b = *reinterpret_cast<const float4*>(s + byte + 16);
  x[0] = a.x; x[1] = a.y; x[2] = a.z; x[3] = a.w;
  x[4] = b.x; x[5] = b.y; x[6] = b.z; x[7] = b.w;
}
__device__ __forceinline__ void load8_bf16(const unsigned char* s, int byte, float (&x)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(s + byte);
  const float2 p0 = unpack_bf16(raw.x), p1 = unpack_bf16(raw.y);
  const float2 p2 = unpack_bf16(raw.z), p3 = unpack_bf16(raw.w);
  x[0] = p0.x; x[1] = p0.y; x[2] = p1.x; x[3] = p1.y;
  x[4] = p2.x; x[5] = p2.y; x[6] = p3.x; x[7] = p3.y;
}
__device__ __forceinline__ uint4 pack8_bf16(const float (&x)[8]) {
  return make_uint4(pack_bf16(x[0], x[1]), pack_bf16(x[2], x[3]), pack_bf16(x[4], x[5]),
                    pack_bf16(x[6], x[7]));
}
// Two fp32 -> fp16 pairs hi + lo with x = hi + lo to ~2^-22 relative (lo = fp16(x - hi)).
__device__ __forceinline__ void split_f16(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const __half2 h = __floats2half2_rn(x0, x1);
  const float2 back = __half22float2(h);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = pack_f16(x0 - back.x, x1 - back.y);
}
__device__ __forceinline__ uint4 pack8_f16(const float (&x)[8]) {
  return make_uint4(pack_f16(x[0], x[1]), pack_f16(x[2], x[3]), pack_f16(x[4], x[5]),
                    pack_f16(x[6], x[7]));
}

// Record values: fp16 (the library's record) or bf16 (the lab's v1 record), pairs and groups of 8.
template <bool kF16>
__device__ __forceinline__ uint32_t pack_record(float lo, float hi) {
  return kF16 ? pack_f16(lo, hi) : pack_bf16(lo, hi);
}
template <bool kF16>
__device__ __forceinline__ uint4 pack8_record(const float (&x)[8]) {
  return kF16 ? pack8_f16(x) : pack8_bf16(x);
}

// One thread's share of a row's sum of squares: 4 partial sums (ILP), added in a fixed order.
template <int kN>
__device__ __forceinline__ float partial_ssq(const float (&x)[kN]) {
  float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int c = 0; c < kN; ++c) part[c & 3] = fmaf(x[c], x[c], part[c & 3]);
  return (part[0] + part[1]) + (part[2] + part[3]);
}

// The fused q norm, deferred (kda-forward.md §4.4): returns r = 1 / sqrt(sum x^2 + 1e-6) for the
// row held by kLanes consecutive threads, and leaves x as it is, or, when the plain fp32 sum of
// squares overflows on a finite row (max|x| >~ 2^63), scaled by the exact power of two 2^-e
// (max|x| = f 2^e, f in [0.5, 1)) with r computed for the scaled row, so that r x is the
// normalized row either way and r stays a normal float. A NaN anywhere gives r = NaN (the whole
// row NaN, as the reference); an inf gives r = 0 (inf 0 = NaN there, 0 elsewhere, as the
// reference). Tiny rows need no scaling: their sum of squares is negligible against 1e-6.
// All 32 lanes of the warp must call it (the shuffles sit outside the row-dependent branches).
// `rescaled` says whether x changed (uniform in the group).
template <int kLanes, int kN>
__device__ __forceinline__ float deferred_row_norm(float (&x)[kN], bool& rescaled) {
  auto row_ssq = [&x] { return group_sum<kLanes>(partial_ssq(x)); };
  float ssq = row_ssq();
  float eps = kL2NormEps;
  rescaled = false;
  if (__any_sync(0xffffffffu, isinf(ssq))) {  // rare: huge or non-finite rows in this warp
    bool finite;
    float largest;
    group_finite_max<kLanes>(x, finite, largest);
    const bool rescale = finite && isinf(ssq);  // uniform in the group
    rescaled = rescale;
    int e = 0;
    frexpf(largest, &e);
    const float down = rescale ? exact_pow2(-e) : 1.0f;  // e in [64, 128] when rescaling
#pragma unroll
    for (int c = 0; c < kN; ++c) x[c] *= down;  // exact (bf16 values times a power of two)
    const float rescaled = row_ssq();
    if (rescale) {
      ssq = rescaled;
      eps = 0.0f;  // 1e-6 * 2^-2e < 2^-147: nothing against ssq >= 0.25
    }
  }
  return __frsqrt_rn(ssq + eps);
}

// The deferred row norm of the warp's 8 rows ssq_row(warp, 0..7) of the bf16 region `region`
// (kSQ: the fused q norm; kSK: raw k's): factors[i] = scale / |x_i| (deferred_row_norm's
// semantics, huge rows rescaled in place by a power of two), the rows left as they are. The
// warp's copies of its rows have landed and the warp is synchronized (rows >= n: zeros).
__device__ __forceinline__ void deferred_row_factors(unsigned char* smem, int region, int factors,
                                                     float scale, int warp, int lane) {
  // The warp's 8 rows' sums of squares as the diagonal of X X^T on the tensor cores, X = the
  // rows [8][128] (bf16 products are exact in the fp32 accumulation; prep_layout.h ssq_*): per
  // k16 step one ldmatrix.x4 gives the A fragment (a0 = cols 2t, 2t + 1 of row g, a2 = cols
  // 8 + 2t, +1; rows 8..15 scrambled, their C rows unused), and registers 0, 1 are B's b0,
  // b1 (B = X^T: k 2t, 2t + 1 of column n = g). Four accumulators (k-steps ks % 4), added in
  // a fixed order. The factor takes the MUFU rsqrt (relative error < 2^-22, far below the
  // bf16 rounding of the operands that follow) instead of the correctly rounded one's ~20
  // instructions (docs/perf-notes.md v2.7 - v2.9).
  float diag[kSsqChains][4] = {};
#pragma unroll
  for (int ks = 0; ks < kD / 16; ++ks) {
    uint32_t x[4];
    ldsm_x4(smem_u32(smem + ssq_ldsm(warp, lane, ks, region)), x);
    mma_bf16(diag[ks % kSsqChains], x, x[0], x[1]);
  }
  const bool odd = ssq_diagonal_reg(lane) != 0;  // selects, not an index: no local memory
  const bool holds_diagonal = ssq_holds_diagonal(lane);
  float part[kSsqChains];
#pragma unroll
  for (int c = 0; c < kSsqChains; ++c) part[c] = odd ? diag[c][1] : diag[c][0];
  const float ssq = (part[0] + part[1]) + (part[2] + part[3]);
  // Rare: a huge or non-finite row in this warp (an fp32 sum of squares that overflowed):
  // the half-warp path that rescales such rows by a power of two, on the same 8 rows (half
  // warp h takes the warp's rows 2 k + h, the ones its lanes loaded).
  if (__any_sync(0xffffffffu, holds_diagonal && isinf(ssq))) {
#pragma unroll 1
    for (int it = 0; it < kC / 8 / 2; ++it) {
      const int i = q_load_row(warp, lane, it);
      const int c = q_load_col(lane);
      float qv[8];
      load8_bf16(smem, s16(region, i, c), qv);
      bool rescaled = false;
      const float factor = scale * deferred_row_norm<16>(qv, rescaled);  // same sums
      if ((lane & 15) == 0) stf(smem, factors + 4 * i, factor);
      if (rescaled) *reinterpret_cast<uint4*>(smem + s16(region, i, c)) = pack8_bf16(qv);
    }
  } else if (holds_diagonal) {
    stf(smem, factors + 4 * ssq_row(warp, lane >> 2), scale * rsqrtf(ssq + kL2NormEps));
  }
}

// The record's U column bounds (record.h rec_u_bound): warp w holds U's columns
// n0 .. n0 + 15 over all 64 rows in its accumulators acc[m tile][n tile][C register]; each lane's
// columns are n0 + 8 nt + c_col(lane, e), its rows 16 mt + c_row(lane, 2 half). Rows >= n are
// exactly 0 there (beta, v and T - I vanish on them), so the column max is a max over the lane's
// 8 rows, then over the 8 row groups (lane bits 2..4). From the max's exponent field f (max in
// [2^(f-127), 2^(f-126))): bound = 2^(f-126) > max and multiplier 2^(141-f) = 2^15 / bound, so the
// stored column stays below 2^15; f is clamped to [27, 253] so both are normal floats (a column
// below 2^-100 is scaled by 2^114; a max >= 2^127 would reach fp16's inf). An all-zero column has
// bound 0; a non-finite max (an inf input; fmaxf drops NaNs) bound 1 and multiplier 1, so it
// propagates.
//   The row-group reduction is a reduce-scatter: the lane's four columns (slot k = 2 nt + e) are
// halved across lane bit 4 (slots 2 b4 + {0, 1} stay), then across bit 3 (slot 2 b4 + b3 stays),
// then the last value is max-reduced across bit 2. Each lane then holds one column's max (two
// lanes per column), computes that column's bound and multiplier once, and fetches its four
// multipliers from the lanes that own them: 4 + 10 + 4 warp instructions for the four columns
// instead of 4 x (6 + 10). A max does not depend on the order of its operands: same bits.
__device__ __forceinline__ void u_column_scales(char* rec, int n0, int lane,
                                                const float (&acc)[4][2][4],
                                                float (&u_mult)[2][2]) {
  float m[4];  // slot 2 nt + e: the lane's 8 rows of column n0 + 8 nt + c_col(lane, e)
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float x = 0.0f;
#pragma unroll
      for (int mt = 0; mt < kC / 16; ++mt) {
        x = fmaxf(x, fmaxf(fabsf(acc[mt][nt][e]), fabsf(acc[mt][nt][2 + e])));
      }
      m[2 * nt + e] = x;
    }
  }
  const bool b4 = (lane & 16) != 0;
  const bool b3 = (lane & 8) != 0;
  // Across bit 4: keep slots 2 b4 + {0, 1}, send the other pair.
  const float keep0 = b4 ? m[2] : m[0];
  const float keep1 = b4 ? m[3] : m[1];
  const float w0 = fmaxf(keep0, __shfl_xor_sync(0xffffffffu, b4 ? m[0] : m[2], 16));
  const float w1 = fmaxf(keep1, __shfl_xor_sync(0xffffffffu, b4 ? m[1] : m[3], 16));
  // Across bit 3: keep slot 2 b4 + b3.
  float mx = fmaxf(b3 ? w1 : w0, __shfl_xor_sync(0xffffffffu, b3 ? w0 : w1, 8));
  // Across bit 2: the column's max over all 64 rows, in both lanes of the pair.
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
  const int field = static_cast<int>(__float_as_uint(mx) >> 23);  // mx >= 0: no sign bit
  const int f = min(max(field, 27), 253);
  const bool finite = field < 255;
  const float bound = !finite ? 1.0f : mx == 0.0f ? 0.0f : __uint_as_float((f + 1) << 23);
  const float mult = finite && mx != 0.0f ? __uint_as_float((268 - f) << 23) : 1.0f;
  if ((lane & 4) == 0) {  // one lane of the pair writes: column n0 + 8 b4 + c_col(lane, b3)
    *reinterpret_cast<float*>(rec + rec_u_bound(n0 + 8 * b4 + 2 * (lane & 3) + b3)) = bound;
  }
  // Slot 2 nt + e of this lane's column class (lane & 3) is held by lane (lane & 3) + 8 e + 16 nt.
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      u_mult[nt][e] = __shfl_sync(0xffffffffu, mult, (lane & 3) + 8 * e + 16 * nt);
    }
  }
}

// Phase 1's copies of k (unless load_k is false) and v (bf16, 16-byte cp.async; the validated
// strides keep every row 16-byte aligned) and of G (fp32; rows >= n: G_{n-1}), shared by the
// contract and the raw-input load. Rows >= n of k and v are zeros by selection: the memory there
// belongs to the next sequence or lies past the end.
__device__ __forceinline__ void load_k_v(const PrepArgs& args, const ChunkRef& chunk, int h,
                                         unsigned char* smem, bool load_k) {
  const int n = chunk.rows;
  const int64_t head_offset = static_cast<int64_t>(h) * kD;
  for (int e = threadIdx.x; e < kC * (kD / 8); e += kThreads) {  // 16 units of 8 bf16 per row
    const int i = e >> 4;
    const int c = (e & 15) * 8;
    const int64_t token = chunk.first_token + i;
    if (i < n) {
      if (load_k) {
        cp_async16(smem_u32(smem + sk(i, c)), args.k + token * args.k_stride + head_offset + c);
      }
      cp_async16(smem_u32(smem + sv(i, c)), args.v + token * args.v_stride + head_offset + c);
    } else {
      if (load_k) *reinterpret_cast<uint4*>(smem + sk(i, c)) = make_uint4(0u, 0u, 0u, 0u);
      *reinterpret_cast<uint4*>(smem + sv(i, c)) = make_uint4(0u, 0u, 0u, 0u);
    }
  }
}
__device__ __forceinline__ void load_gate(const float* gate, const PrepArgs& args,
                                          const ChunkRef& chunk, int h, unsigned char* smem) {
  const int n = chunk.rows;
  for (int e = threadIdx.x; e < kC * (kD / 4); e += kThreads) {  // 32 units of 4 floats per row
    const int i = e >> 5;
    const int c = (e & 31) * 4;
    const int64_t g_token = chunk.first_token + min(i, n - 1);
    cp_async16(smem_u32(smem + sg(i, c)), gate + (g_token * args.heads + h) * kD + c);
  }
}

// Phase 1 for raw inputs (kda.h GateInput::raw, BetaInput::logits, bf16 beta, fuse_k_l2norm;
// each a uniform runtime branch here), in steps so that the raw gate's arithmetic and the norms
// run while the later loads are still in flight and no step needs a CTA barrier. Four cp.async
// groups, in this order: the raw gate, q, raw k, then k (unless fuse_k_l2norm) / v / G (a
// contract gate):
//   issue_raw_gate_loads, before q's loads: the raw gate's group;
//   load_raw_inputs, after q's: raw k's group (fuse_k_l2norm: into k's place), then the k / v /
//     G group; then the raw gate's activation and cumsum, once its group landed;
//   after the fused q norm (its group the second), raw_k_row_factors: raw k's deferred norm (its
//     row factors), once its group landed;
// beta and the channel parameters are read into registers before all of them (load_raw_scalars)
// and beta reaches shared memory just before the load barrier (store_raw_beta).
// They leave shared memory as the contract load does, k aside: k (raw, with its row factors in
// kSKScale; with fuse_k_l2norm off, as given, factors 1), v, G (rows >= n: G_{n-1}), beta (rows
// >= n: 0), for the caller's cp_async_wait_all and CTA barrier.
//
// The raw gate, thread (d, half) = (16 warp + lane % 16, lane / 16): warp w owns channels
// 16w .. 16w + 15 of every row, lanes 0 - 15 rows 0 - 31 and lanes 16 - 31 rows 32 - 63. The warp
// stages its own channels' raw values inside its own 64-byte strip of G's rows (bf16: half 0's at
// the strip's bytes 0 - 31, half 1's at 32 - 63, so the halves read different banks; fp32: the
// whole strip, each value where its G goes), reads them into registers, and writes G over them:
// no other warp touches the strip, so the warp's cp.async wait and a __syncwarp order everything.
// Each thread takes its 32 sigmoids (independent: the MUFU latencies overlap) and the half's
// running sum in registers: the cumsum order of gate_activation.cuh, which gate_cumsum uses too
// (bit for bit); the second half starts from the first's total, a shuffle away. Rows >= n add
// nothing, so they repeat G_{n-1}.
//   Where the strips lie is a type: this layout's (8 warps, all 128 channels) or the channel halves'
// (halves_chunk.cuh: warps 0..3, the 64 channels of one half); `channel0` is the first channel the
// strips hold.
struct PairGateStrips {
  static constexpr int kStripWarps = kWarps;  // warps that own strips
  __device__ static int strip(int row, int warp) { return sg(row, 16 * warp); }
  __device__ static int g(int row, int c) { return sg(row, c); }  // c: channel - channel0
};
__device__ __forceinline__ int raw_gate_channel(int warp, int lane) { return 16 * warp + (lane & 15); }

template <class S>
__device__ __forceinline__ void issue_raw_gate_loads(const PrepArgs& args, const RawPrepArgs& raw,
                                                     const ChunkRef& chunk, int h, int channel0,
                                                     unsigned char* smem) {
  const int warp = threadIdx.x >> 5;
  if (raw.raw_gate && warp < S::kStripWarps) {  // uniform
    const int n = chunk.rows;
    const int lane = threadIdx.x & 31;
    const int64_t row0 = (chunk.first_token * args.heads + h) * kD + channel0 + 16 * warp;
    const int64_t token_step = static_cast<int64_t>(args.heads) * kD;
    if (raw.gate_bf16) {  // per row 2 units of 8 channels: 4 per lane
      const auto* gate = static_cast<const __nv_bfloat16*>(raw.gate);
#pragma unroll
      for (int it = 0; it < 4; ++it) {
        const int row = 16 * it + (lane >> 1);
        const int unit = lane & 1;
        if (row < n) {
          cp_async16(smem_u32(smem + S::strip(row, warp) + 32 * (row >> 5) + 16 * unit),
                     gate + row0 + row * token_step + 8 * unit);
        }
      }
    } else {  // per row 4 units of 4 channels: 8 per lane
      const auto* gate = static_cast<const float*>(raw.gate);
#pragma unroll
      for (int it = 0; it < 8; ++it) {
        const int row = 8 * it + (lane >> 2);
        const int unit = lane & 3;
        if (row < n) {
          cp_async16(smem_u32(smem + S::strip(row, warp) + 16 * unit),
                     gate + row0 + row * token_step + 4 * unit);
        }
      }
    }
  }
  cp_async_commit();  // (an empty group for a contract gate: the later waits count groups)
}

// Raw k's group (empty without fuse_k_l2norm): each warp copies its own 8 rows into k's place,
// in q's pattern, so that raw_k_row_factors needs only the warp's wait and a __syncwarp. (The
// same loop as q's in load_chunk. One function for both was tried: ptxas then schedules both
// kernels' load code differently, so it waits for a device call to time it.)
__device__ __forceinline__ void issue_raw_k_loads(const PrepArgs& args, const RawPrepArgs& raw,
                                                  const ChunkRef& chunk, int h,
                                                  unsigned char* smem) {
  if (raw.fuse_k_l2norm) {  // uniform
    const int n = chunk.rows;
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
#pragma unroll
    for (int it = 0; it < kC / 8 / 2; ++it) {
      const int i = q_load_row(warp, lane, it);
      const int c = q_load_col(lane);
      if (i < n) {
        cp_async16(smem_u32(smem + sk(i, c)), args.k + (chunk.first_token + i) * args.k_stride +
                                                  static_cast<int64_t>(h) * kD + c);
      } else {
        *reinterpret_cast<uint4*>(smem + sk(i, c)) = make_uint4(0u, 0u, 0u, 0u);
      }
    }
  }
  cp_async_commit();
}

// The raw gate's activation and cumsum over the warp's strips (staged by issue_raw_gate_loads,
// its group landed and the warp synchronized); kAllRows: n = 64.
template <bool kAllRows, class S>
__device__ __forceinline__ void activate_raw_gate(const RawPrepArgs& raw, unsigned char* smem,
                                                  int n, GateChannel channel) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int d = raw_gate_channel(warp, lane);
  const int half = lane >> 4;
  const int rows = kAllRows ? kGateHalf : min(max(n - kGateHalf * half, 0), kGateHalf);
  float part[kGateHalf];  // the raw values, then the half's running sums of sigmoids
#pragma unroll
  for (int r = 0; r < kGateHalf; ++r) {
    const int row = kGateHalf * half + r;
    part[r] = 0.0f;
    if (kAllRows || r < rows) {
      part[r] = raw.gate_bf16
                    ? load_as_float(reinterpret_cast<const __nv_bfloat16*>(
                          smem + S::strip(row, warp) + 32 * half + 2 * (lane & 15)))
                    : ldf(smem, S::g(row, d));
    }
  }
  __syncwarp();  // every lane has read its raw values before any G overwrites the strip
  float running = 0.0f;
#pragma unroll
  for (int r = 0; r < kGateHalf; ++r) {
    if (kAllRows || r < rows) running = __fadd_rn(running, gate_sigmoid(part[r], channel));
    part[r] = running;
  }
  const float scale = gate_scale(raw.lower_bound);
  const float first_total = __shfl_sync(0xffffffffu, part[kGateHalf - 1], lane & 15);
  const float base = half ? gate_second_half_base(scale, first_total) : -0.0f;
#pragma unroll
  for (int r = 0; r < kGateHalf; ++r) {
    stf(smem, S::g(kGateHalf * half + r, d), gate_log2(part[r], scale, base));
  }
}

// The raw path's per-thread scalars, read from global memory at the kernel's start so that their
// latency passes under the cp.async traffic: beta (threads < 64: row tid; 0 past the sequence;
// still a logit if beta_logits) and the raw gate's channel parameters (thread (d, half) of
// activate_raw_gate: A_log[h], dt_bias[h, d]). Used late, by then they have long landed: the
// channel by the gate's activation, beta by store_raw_beta just before the load barrier (read
// where they are used, the loads would sit behind a cp.async wait's memory clobber and stall
// warps 0 and 1, the beta rows' threads, before their share of the gate work).
struct RawScalars {
  float beta;
  float a_log;
  float dt_bias;
};
// S: the raw gate's strips (its warps read the channel parameters; the halves': warps 0..3, of
// half 0's channels).
template <class S>
__device__ __forceinline__ RawScalars load_raw_scalars(const PrepArgs& args,
                                                       const RawPrepArgs& raw,
                                                       const ChunkRef& chunk, int h) {
  const int tid = threadIdx.x;
  RawScalars x{0.0f, 0.0f, 0.0f};
  if (tid < kC && tid < chunk.rows) {
    const int64_t at = (chunk.first_token + tid) * args.heads + h;
    x.beta = raw.beta_bf16 ? load_as_float(static_cast<const __nv_bfloat16*>(raw.beta) + at)
                           : load_as_float(static_cast<const float*>(raw.beta) + at);
  }
  constexpr bool kEveryWarp = S::kStripWarps == kWarps;  // then no warp test (as it was)
  if (raw.raw_gate && (kEveryWarp || (tid >> 5) < S::kStripWarps)) {  // uniform per warp
    x.a_log = raw.a_log[h];
    x.dt_bias = raw.dt_bias[h * kD + raw_gate_channel(tid >> 5, tid & 31)];
  }
  return x;
}
__device__ __forceinline__ void store_raw_beta(const RawPrepArgs& raw, const RawScalars& x,
                                               int n, unsigned char* smem) {
  const int tid = threadIdx.x;
  if (tid < kC) {  // rows >= n: 0
    float b = 0.0f;
    if (tid < n) b = raw.beta_logits ? sigmoid_fast(x.beta) : x.beta;
    stf(smem, kSBeta + 4 * tid, b);
  }
}

__device__ __forceinline__ void load_raw_inputs(const PrepArgs& args, const RawPrepArgs& raw,
                                                const RawScalars& scalars, const ChunkRef& chunk,
                                                int h, unsigned char* smem) {
  const int n = chunk.rows;
  const bool raw_gate = raw.raw_gate;
  issue_raw_k_loads(args, raw, chunk, h, smem);
  load_k_v(args, chunk, h, smem, /*load_k=*/!raw.fuse_k_l2norm);
  if (!raw_gate) load_gate(static_cast<const float*>(raw.gate), args, chunk, h, smem);  // uniform
  cp_async_commit();
  if (!raw_gate) return;  // uniform

  const GateChannel channel = gate_channel(scalars.a_log, scalars.dt_bias);
  // The gate's group is the oldest of four (gate, q, raw k, k/v): wait for it alone.
  cp_async_wait_pending<3>();
  __syncwarp();
  if (n == kC) {  // uniform: whole chunks, the common case, need no row predicates
    activate_raw_gate<true, PairGateStrips>(raw, smem, n, channel);
  } else {
    activate_raw_gate<false, PairGateStrips>(raw, smem, n, channel);
  }
}

// Raw k's deferred norm (fuse_k_l2norm): its row factors r_i = 1 / |k_i| into kSKScale, k left
// raw in shared memory (huge rows rescaled in place), as the fused q norm does for q; phases 2, 3
// and 4a multiply them in where k first meets fp32 arithmetic (kg and the grams' column
// operands, the A_kk rows, W's right-hand side), before any rounding. Without fuse_k_l2norm the
// factors are 1 (exact). Raw k's group is the third of four (gate, q, raw k, k/v): the warp's
// copies of its rows have landed after this wait and the __syncwarp, while v is still in flight.
__device__ __forceinline__ void raw_k_row_factors(const RawPrepArgs& raw, int warp, int lane,
                                                  unsigned char* smem) {
  if (!raw.fuse_k_l2norm) {  // uniform
    if (threadIdx.x < kC) stf(smem, kSKScale + 4 * threadIdx.x, 1.0f);
    return;
  }
  cp_async_wait_pending<1>();
  __syncwarp();
  deferred_row_factors(smem, kSK, kSKScale, 1.0f, warp, lane);
}

// Phase 1 (and 2a): the chunk's inputs into shared memory and q's row factors, up to the load
// barrier.
template <bool kRawInputs>
__device__ __forceinline__ void load_chunk(const PrepArgs& args, const RawPrepArgs& raw,
                                           const ChunkRef& chunk, int h, int n, int tid, int lane,
                                           int warp, unsigned char* smem) {
  // ---- 1. Load. q, k, v (bf16, kept as bf16: exact) and G (fp32) go straight to shared memory
  // with 16-byte cp.async (the validated strides keep every row 16-byte aligned); rows >= n: q,
  // k, v zero by selection, G = G_{n-1}. q arrives un-normalized on the fused path too. Each warp
  // loads its own 8 rows of q first, in a cp.async group of their own, so that the fused norm's
  // pass 2a runs on them while k, v and G are still in flight.
  const int64_t head_offset = static_cast<int64_t>(h) * kD;
  RawScalars scalars{};
  if constexpr (kRawInputs) {
    scalars = load_raw_scalars<PairGateStrips>(args, raw, chunk, h);
    issue_raw_gate_loads<PairGateStrips>(args, raw, chunk, h, 0, smem);
  }
#pragma unroll
  for (int it = 0; it < kC / 8 / 2; ++it) {  // 4 loads per lane: 2 rows of 16 units each
    const int i = q_load_row(warp, lane, it);
    const int c = q_load_col(lane);
    if (i < n) {
      const int64_t token = chunk.first_token + i;
      cp_async16(smem_u32(smem + sq(i, c)), args.q + token * args.q_stride + head_offset + c);
    } else {
      *reinterpret_cast<uint4*>(smem + sq(i, c)) = make_uint4(0u, 0u, 0u, 0u);
    }
  }
  cp_async_commit();
  if constexpr (kRawInputs) {
    load_raw_inputs(args, raw, scalars, chunk, h, smem);
  } else {
    load_k_v(args, chunk, h, smem, /*load_k=*/true);
    load_gate(args.gate, args, chunk, h, smem);
    cp_async_commit();
    if (tid < kC) {
      stf(smem, kSBeta + 4 * tid,
          tid < n ? args.beta[(chunk.first_token + tid) * args.heads + h] : 0.0f);
    }
  }

  // ---- 2a. Row factors scale r_i of q, one per row, read by phase 2 after the load barrier.
  //   The fused q norm is deferred: q stays as loaded (or, for a row whose fp32 sum of squares
  // overflows, scaled by an exact power of two and written back for phase 2 and the grams) and
  // its factor scale r_i multiplies q' in phase 2 and the A_qk row in phase 3, in fp32 before
  // their bf16 rounding. The explicit path's factor is scale (r_i = 1: q arrives normalized).
  // Rows >= n hold zeros: their r_i = 1e3 multiplies nothing.
  if (args.fuse_q_l2norm) {  // uniform
    // Only this warp's rows are read, and this warp loaded them: its group's wait and a
    // __syncwarp order the copies (and the zero stores of rows >= n) before the ldmatrix. (q's
    // group is the first of two, or the second of four with raw inputs.)
    cp_async_wait_pending<kRawInputs ? 2 : 1>();
    __syncwarp();
    deferred_row_factors(smem, kSQ, kSQScale, kScale, warp, lane);
  } else if (tid < kC) {
    stf(smem, kSQScale + 4 * tid, kScale);
  }
  if constexpr (kRawInputs) {
    raw_k_row_factors(raw, warp, lane, smem);
    store_raw_beta(raw, scalars, n, smem);
  }
  cp_async_wait_all();
  __syncthreads();
}

// This CTA's record: head h, chunk slot blockIdx.x.
template <class Record>
__device__ __forceinline__ char* chunk_record(const PrepArgs& args, int h) {
  return static_cast<char*>(args.records) +
         (static_cast<int64_t>(h) * args.capacity + blockIdx.x) * Record::kBytes;
}

// Phase 2's zero upper blocks of A_qk (the 16x16 blocks above the diagonal), 8 columns a store.
template <class Record>
__device__ __forceinline__ void zero_aqk_upper_blocks(int tid, char* rec) {
  for (int u = tid; u < kC * kC / 8; u += kThreads) {  // 8 groups of 8 columns per row
    const int i = u >> 3;
    const int j0 = 8 * (u & 7);
    if ((i >> 4) < (j0 >> 4)) {
      *reinterpret_cast<uint4*>(rec + Record::aqk(i, j0)) = make_uint4(0u, 0u, 0u, 0u);
    }
  }
}

// Phase 2: q', kg and a into the record, the grams' column operands into shared memory.
// kKFactors (the raw-input kernel): k's row factors (kSKScale) multiply k first.
template <class Record, bool kKFactors>
__device__ __forceinline__ void store_factors(int n, int tid, unsigned char* smem, char* rec) {
  // ---- 2. q' = (scale r_i) q Gamma, kg = k 2^(G_{n-1} - G), a = 2^(G_{n-1}); the column
  // operands of the grams; the zero upper blocks of A_qk. One unit = one row and 8 consecutive
  // channels (16-byte loads, 16-byte record stores: a swizzle group is 8 channels).
#pragma unroll 1
  for (int u = tid; u < kC * kD / 8; u += kThreads) {
    const int i = u >> 4;
    const int d0 = 8 * (u & 15);
    const float rq = ldf(smem, kSQScale + 4 * i);  // 2a, before the load barrier
    float qv[8];
    load8_bf16(smem, sq(i, d0), qv);
    uint4 qp_bits = make_uint4(0u, 0u, 0u, 0u);
    uint4 kg_bits = qp_bits;
    uint4 col_bits = qp_bits;
    if (i < n) {  // rows >= n: zeros (their G is G_{n-1}: 2^(G_m - G) could overflow there)
      const int m = anchor(i >> 4, n);
      float g[8], gl[8], gm[8], kv[8];
      load8_f32(smem, sg(i, d0), g);
      load8_f32(smem, sg(n - 1, d0), gl);
      load8_f32(smem, sg(m, d0), gm);
      load8_bf16(smem, sk(i, d0), kv);
      if constexpr (kKFactors) {
        const float rk = ldf(smem, kSKScale + 4 * i);
#pragma unroll
        for (int e = 0; e < 8; ++e) kv[e] *= rk;
      }
      float qp[8], kg[8], col[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        qp[e] = rq * qv[e] * ex2_approx(g[e]);
        kg[e] = kv[e] * ex2_approx(gl[e] - g[e]);
        col[e] = kv[e] * ex2_approx(gm[e] - g[e]);
      }
      qp_bits = pack8_record<Record::kF16>(qp);
      kg_bits = pack8_record<Record::kF16>(kg);
      col_bits = pack8_bf16(col);
    }
    // (The library's record keeps W, q', kg split into key halves: record.h rec_split.)
    const int64_t qp_at = Record::qp(i, d0);
    const int64_t kg_at = Record::kg(i, d0);
    *reinterpret_cast<uint4*>(rec + qp_at) = qp_bits;
    *reinterpret_cast<uint4*>(rec + kg_at) = kg_bits;
    *reinterpret_cast<uint4*>(smem + scol(i, d0)) = col_bits;
  }
  if (tid < kD) *reinterpret_cast<float*>(rec + Record::a(tid)) = exp2f(ldf(smem, sg(n - 1, tid)));
  zero_aqk_upper_blocks<Record>(tid, rec);
  __syncthreads();
}

// ------------------------------------------------------------------------------------------------
// Phases 3 to 5, one function each, called by prep_chunk with the CTA barriers between them. The
// register arrays of phases 3, 4a, 5a and 5 are prep_chunk's own, passed in by reference (see
// prep_chunk for why); each function's comment says what it reads and writes in shared memory.

// ---- 3. Grams on tensor cores: warp w runs block pairs w and w + 8 (prep_layout.h). Block pair
// (p, c), anchor m = m_c:
//   A[i][j] = sum_d bf16(x_i[d] 2^(G_i[d] - G_m[d])) bf16(k_j[d] 2^(G_m[d] - G_j[d])),
// each operand's factor in fp32 and the product rounded once. Then A_kk = beta_i A (j < i),
// A_qk = scale A (j <= i); rows >= n zero. Reads q, k, G, the column operands (scol), beta and
// the q row factors from shared memory; A_qk goes into the record, A_kk stays in akk (its smem
// region is q's, which other warps may still be reading: store_akk after the barrier).
// kKFactors: k's row factors (the column operands carry the columns') scale A_kk's rows with beta.
// acck, accq: the accumulators of one block pair, zeroed per pair.
// One k-step of one block pair (p, c): the A fragments ak (k) and aq (q) of row block p against
// column block c's operands (bf16 at Col(row, col): this layout's scol or the halves'), both n
// tiles, into acck / accq.
template <int (*Col)(int, int)>
__device__ __forceinline__ void gram_block_step(int lane, int c, int d0, const unsigned char* smem,
                                                const uint32_t (&ak)[4], const uint32_t (&aq)[4],
                                                float (&acck)[2][4], float (&accq)[2][4]) {
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
    const int j = 16 * c + 8 * nt + b_n(lane);
    uint32_t b[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      b[r] = *reinterpret_cast<const uint32_t*>(smem + Col(j, d0 + b_k(lane, r, 0)));
    }
    mma_bf16(acck[nt], ak, b[0], b[1]);
    mma_bf16(accq[nt], aq, b[0], b[1]);
  }
}

template <class Record, bool kKFactors>
__device__ __forceinline__ void compute_grams(int n, int lane, int warp, const unsigned char* smem,
                                              char* rec, float (&akk)[2][2][4], float (&acck)[2][4],
                                              float (&accq)[2][4]) {
#pragma unroll
  for (int slot = 0; slot < 2; ++slot) {
    const int task = warp + 8 * slot;
    if (task >= kGramTasks) break;  // warp-uniform
    const int p = gram_p(task);
    const int c = gram_c(task);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int reg = 0; reg < 4; ++reg) acck[nt][reg] = accq[nt][reg] = 0.0f;
    }
    if (16 * c < n && 16 * p < n) {  // uniform; otherwise the block is zero
      const int m = anchor(c, n);
#pragma unroll 2
      for (int ks = 0; ks < kD / 16; ++ks) {
        const int d0 = 16 * ks;
        uint32_t ak[4], aq[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int row = 16 * p + a_row(lane, r);
          const int col = d0 + a_col(lane, r, 0);
          const float2 gi = ldf2(smem, sg(row, col));
          const float2 gm = ldf2(smem, sg(m, col));
          const float2 kk = ldh2(smem, sk(row, col));
          const float2 qq = ldh2(smem, sq(row, col));
          const float f0 = ex2_approx(gi.x - gm.x);
          const float f1 = ex2_approx(gi.y - gm.y);
          ak[r] = pack_bf16(kk.x * f0, kk.y * f1);
          aq[r] = pack_bf16(qq.x * f0, qq.y * f1);
        }
        gram_block_step<scol>(lane, c, d0, smem, ak, aq, acck, accq);
      }
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int i = 16 * p + c_row(lane, 2 * half);
        const float b = kKFactors ? ldf(smem, kSBeta + 4 * i) * ldf(smem, kSKScale + 4 * i)
                                  : ldf(smem, kSBeta + 4 * i);
        const float rq = ldf(smem, kSQScale + 4 * i);  // scale * r_i
        float out_q[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int j = 16 * c + 8 * nt + c_col(lane, e);
          const int reg = 2 * half + e;
          akk[slot][nt][reg] = (j < i && i < n) ? b * acck[nt][reg] : 0.0f;
          out_q[e] = (j <= i && i < n) ? rq * accq[nt][reg] : 0.0f;
        }
        put_pair(rec, Record::aqk(i, 16 * c + 8 * nt + c_col(lane, 0)),
                 pack_record<Record::kF16>(out_q[0], out_q[1]));
      }
    }
  }
}

// Phase 3's A_kk from akk into shared memory (sa: fp32, over the dead q region).
__device__ __forceinline__ void store_akk(int lane, int warp, const float (&akk)[2][2][4],
                                          unsigned char* smem) {
#pragma unroll
  for (int slot = 0; slot < 2; ++slot) {
    const int task = warp + 8 * slot;
    if (task >= kGramTasks) break;
    const int p = gram_p(task);
    const int c = gram_c(task);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int reg = 0; reg < 4; ++reg) {
        stf(smem, sa(16 * p + c_row(lane, reg), 16 * c + 8 * nt + c_col(lane, reg)),
            akk[slot][nt][reg]);
      }
    }
  }
}

// ---- 4a (warps 0..3). Diagonal blocks of X = (I + A_kk)^-1: lane jj < 16 of warp p solves
// column jj of block p by forward substitution, x_i = delta_ij - sum_{r<i} A[i][r] x_r (fixed
// order), x its column. Reads A_kk (sa); writes the block into the fp32 inverse (sx).
template <class L>
__device__ __forceinline__ void invert_diagonal_blocks(int lane, int warp, unsigned char* smem,
                                                       float (&x)[16]) {
  if (lane < 16) {
    const int base = 16 * warp;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      float s = 0.0f;
#pragma unroll
      for (int r = 0; r < i; ++r) s = fmaf(ldf(smem, sa(base + i, base + r)), x[r], s);
      x[i] = (i == lane ? 1.0f : 0.0f) - s;
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) stf(smem, L::x(base + i, base + lane), x[i]);
  }
}

// ---- 4a (warps 4..7, idle otherwise). W's right-hand side (prep_layout.h): beta k Gamma (fp16,
// the v0 expression) into rhs_w; U's is v itself (beta goes into T). Reads G, k and beta from
// shared memory and writes none: row t's fp16 output lands in the bytes of G row t / 2, so no
// output is stored before every G value has been read; store_w_rhs stores the thread's 8 rows
// after the CTA barrier that ends this phase (G is read by nobody after it). kKFactors: k's row
// factors go into beta. g, kv, kt: one row's 8 values.
template <bool kKFactors>
__device__ __forceinline__ void compute_w_rhs(int tid, const unsigned char* smem,
                                              uint4 (&rhs_w)[kC / 8], float (&g)[8], float (&kv)[8],
                                              float (&kt)[8]) {
  const int t4 = tid - 4 * 32;
#pragma unroll
  for (int batch = 0; batch < kC / 8; ++batch) {
    const int t = 8 * batch + (t4 >> 4);
    const int d0 = 8 * (t4 & 15);
    load8_f32(smem, sg(t, d0), g);
    load8_bf16(smem, sk(t, d0), kv);
    float b = ldf(smem, kSBeta + 4 * t);  // 0 for rows >= n (k = v = 0 there too)
    if constexpr (kKFactors) b *= ldf(smem, kSKScale + 4 * t);
#pragma unroll
    for (int e = 0; e < 8; ++e) kt[e] = b * kv[e] * ex2_approx(g[e]);
    rhs_w[batch] = pack8_f16(kt);
  }
}

// Phase 4a's beta k Gamma from rhs_w (warps 4..7) into shared memory (skt, over the dead G
// region), read by phase 5, barriers later.
__device__ __forceinline__ void store_w_rhs(int tid, int warp, const uint4 (&rhs_w)[kC / 8],
                                            unsigned char* smem) {
  if (warp >= 4) {
    const int t4 = tid - 4 * 32;
#pragma unroll
    for (int batch = 0; batch < kC / 8; ++batch) {
      *reinterpret_cast<uint4*>(smem + skt(8 * batch + (t4 >> 4), 8 * (t4 & 15))) = rhs_w[batch];
    }
  }
}

// ---- 4b. One level l = p - c (1, 2, 3) of X's off-diagonal blocks on tensor cores. Warp u of
// the level (u < schur_units(l) = 2 (4 - l): the caller's test) owns 8 columns (n tile u % 2) of
// block u / 2:
//   Y     = sum_{c <= r < p} A_pr X_rc   (r ascending)
//   X_pc  = -X_pp Y
// fp16 operands, fp32 accumulation. A_kk in plain fp16 (|A| <= 1 and already carrying the
// bf16 grams' 2^-9); X and Y, which carry the inverse from level to level, as hi + lo fp16
// pairs (x = hi + lo to ~2^-22), so T keeps ~fp32 accuracy until phase 5 rounds it once.
// Reads A_kk (sa) and the blocks of X that phase 4a and the earlier levels wrote (sx); writes
// X_pc into sx. Y moves from the C to the B layout through the warp's own scratch tile sy(u) (a
// __syncwarp, not a CTA barrier); the next level reads blocks other warps wrote: a CTA barrier
// after each level.
template <class L>
__device__ __forceinline__ void invert_off_diagonal_level(int level, int lane, int warp,
                                                          unsigned char* smem) {
  const int e = schur_block(warp);
  const int p = schur_p(level, e);
  const int c = schur_c(level, e);
  const int n0 = 16 * c + 8 * schur_ntile(warp);
  float y[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 1
  for (int r = c; r < p; ++r) {
    uint32_t a[4];
#pragma unroll
    for (int reg = 0; reg < 4; ++reg) {
      const float2 v = ldf2(smem, sa(16 * p + a_row(lane, reg), 16 * r + a_col(lane, reg, 0)));
      a[reg] = pack_f16(v.x, v.y);
    }
    uint32_t bhi[2], blo[2];
#pragma unroll
    for (int reg = 0; reg < 2; ++reg) {
      split_f16(ldf(smem, L::x(16 * r + b_k(lane, reg, 0), n0 + b_n(lane))),
                ldf(smem, L::x(16 * r + b_k(lane, reg, 1), n0 + b_n(lane))), bhi[reg], blo[reg]);
    }
    mma_f16(y, a, bhi[0], bhi[1]);
    mma_f16(y, a, blo[0], blo[1]);
  }
#pragma unroll
  for (int reg = 0; reg < 4; ++reg) {
    stf(smem, L::y(warp, c_row(lane, reg), c_col(lane, reg)), y[reg]);
  }
  __syncwarp();
  uint32_t xhi[4], xlo[4];
#pragma unroll
  for (int reg = 0; reg < 4; ++reg) {
    const float2 v = ldf2(smem, L::x(16 * p + a_row(lane, reg), 16 * p + a_col(lane, reg, 0)));
    split_f16(v.x, v.y, xhi[reg], xlo[reg]);
  }
  uint32_t yhi[2], ylo[2];
#pragma unroll
  for (int reg = 0; reg < 2; ++reg) {
    split_f16(ldf(smem, L::y(warp, b_k(lane, reg, 0), b_n(lane))),
              ldf(smem, L::y(warp, b_k(lane, reg, 1), b_n(lane))), yhi[reg], ylo[reg]);
  }
  float x[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  mma_f16(x, xhi, yhi[0], yhi[1]);
  mma_f16(x, xhi, ylo[0], ylo[1]);
  mma_f16(x, xlo, yhi[0], yhi[1]);
#pragma unroll
  for (int reg = 0; reg < 4; ++reg) {
    stf(smem, L::x(16 * p + c_row(lane, reg), n0 + c_col(lane, reg)), -x[reg]);
  }
}

// ---- 5a. T -> fp16 (for W) and (T - I) diag(beta) -> bf16 (for U) copies for ldmatrix (lower
// blocks only: phase 5 reads no other). U = (T - I) diag(beta) v + beta v: beta goes into T's
// columns and v stays as loaded, and the diagonal term beta_i v_i, which dominates U_i, is
// added in fp32 by phase 5 instead of being rounded (a bf16 beta v operand, or beta_i as a bf16
// entry of T diag(beta), would round every U_i by up to 2^-9: docs/precision.md). Reads the
// fp32 inverse (sx) and beta; writes st16 and stb (over the dead A_kk region). t, b, tb: one
// unit's 8 values of T, beta and T diag(beta).
template <class L>
__device__ __forceinline__ void copy_t_operands(int tid, unsigned char* smem, float (&t)[8],
                                                float (&b)[8], float (&tb)[8]) {
  for (int u = tid; u < kC * kC / 8; u += kThreads) {  // row i, 8 columns
    const int i = u >> 3;
    const int j0 = 8 * (u & 7);
    if ((j0 >> 4) <= (i >> 4)) {
      load8_f32(smem, L::x(i, j0), t);
      load8_f32(smem, L::beta(j0), b);
#pragma unroll
      for (int e = 0; e < 8; ++e) tb[e] = i == j0 + e ? 0.0f : t[e] * b[e];
      *reinterpret_cast<uint4*>(smem + st16(i, j0)) = pack8_f16(t);
      *reinterpret_cast<uint4*>(smem + stb(i, j0)) = pack8_bf16(tb);
    }
  }
}

// The record bits of phase 5's accumulator pair (m tile mt, n tile nt, row c_row(lane, 2 half)):
// times the column multipliers (1 for W), zero for rows >= n, packed as the record's 16-bit pair.
template <class Record>
__device__ __forceinline__ uint32_t w_u_record_pair(int n, int lane, int mt, int nt, int half,
                                                    const float (&acc)[4][2][4],
                                                    const float (&u_mult)[2][2]) {
  const bool valid = 16 * mt + c_row(lane, 2 * half) < n;
  return pack_record<Record::kF16>(valid ? acc[mt][nt][2 * half] * u_mult[nt][0] : 0.0f,
                                   valid ? acc[mt][nt][2 * half + 1] * u_mult[nt][1] : 0.0f);
}

// Phase 5's record tiles through shared memory (multiply_w_u's kStagedStores): this warp's 16
// columns of W (is_w) or U, all 64 rows (rows >= n zero), as fp16 pairs into the record's byte
// image at the staging region (W: L::kSX, U: L::kSKT), by stmatrix: matrix (lane >> 3) is rows
// 16 mt + 8 ((lane >> 3) & 1) .. +7 of columns n0 + 8 (lane >> 4) .. +7, one 16-byte unit of
// the record's rows (rec_w and rec_u keep 8 aligned columns of a row in one unit). Then every
// thread's writes are fenced for the async proxy, one CTA barrier (after it KT is dead, all W
// passes having read it), and thread 0 issues the tile's bulk store; after U's it waits for the
// stores' shared-memory reads, so the CTA may exit.
template <class Record, class L>
__device__ __forceinline__ void stage_w_u_tile(int n, int lane, int warp, bool is_w,
                                               unsigned char* smem, char* rec,
                                               const float (&acc)[4][2][4],
                                               const float (&u_mult)[2][2]) {
  constexpr int kTileBytes = kC * kHeadDim * 2;  // 16 KB, W and U alike
  const int n0 = wu_n0(warp);
  const int matrix = lane >> 3;
  const int row = (lane & 7) + 8 * (matrix & 1);
  const int col = n0 + 8 * (matrix >> 1);
  const int base = is_w ? L::kSX : L::kSKT;
  const int64_t first = is_w ? kRecW : kRecU;
  const int64_t at = (is_w ? Record::w(row, col) : Record::u(row, col)) - first;
  static_assert(L::kSX % 16 == 0 && L::kSKT % 16 == 0, "16-byte aligned staging");
  // 16 rows further is a fixed step in both images (their swizzles read only row bits 0..2):
  // one address per lane and pass. W: 128-byte half rows; U: 64-byte slice rows.
  static_assert(rec_w(16, 0) - rec_w(0, 0) == 16 * 128, "W: 16 rows = 2 KB");
  static_assert(rec_u(16, 0) - rec_u(0, 0) == 16 * 64, "U: 16 rows = 1 KB");
  const int row_block = is_w ? 16 * 128 : 16 * 64;
  const uint32_t addr = smem_u32(smem + base + at);
#pragma unroll
  for (int mt = 0; mt < kC / 16; ++mt) {
    uint32_t r[4];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        r[2 * nt + half] = w_u_record_pair<Record>(n, lane, mt, nt, half, acc, u_mult);
      }
    }
    stsm_x4(addr + mt * row_block, r);
  }
  fence_proxy_async_shared();
  __syncthreads();
  if (threadIdx.x == 0) {
    bulk_store_to_global(rec + first, smem_u32(smem + base), kTileBytes);
    bulk_commit();
    if (!is_w) bulk_wait_reads();
  }
}

// ---- 5. W = T (beta k Gamma) (fp16 operands), then U = beta v + (T - I) diag(beta) v (bf16
// operands onto the fp32 diagonal term), into the record. Warp w: columns n0 .. n0 + 15, all 64
// rows (acc: the accumulators of the 4 m tiles, zeroed per pass); k-steps in ascending order,
// only blocks ks <= mt (T is lower triangular). Every operand by ldmatrix: the right-hand side
// tile (.trans) once per k-step, the T tile once per (m tile, k-step). Reads beta k Gamma (skt),
// v (sv), beta and the copies of T (st16, stb); writes no shared memory. u_mult: U's column
// multipliers (u_column_scales).
// kUnrolled: the two passes as straight code (the halves PREP at 80 registers: as a loop, ptxas
// hoists U's 32 store addresses above it and spills them) or as a loop (prep_chunk's kernels).
// kStagedStores (the halves PREP, L = halves::Tail, F16Record): instead of 32 four-byte global
// stores per thread, each with its swizzled 64-bit address, every warp writes its W tile into the
// dead X region and its U tile into the KT region (dead once every warp's W pass has read it: the
// barrier between the passes) in the record's exact byte image, four stmatrix per pass, and
// thread 0 moves each 16 KB tile to the record with one bulk store.
template <class Record, class L, bool kUnrolled, bool kStagedStores = false>
__device__ __forceinline__ void multiply_w_u(int n, int lane, int warp, unsigned char* smem,
                                             char* rec, float (&acc)[4][2][4],
                                             float (&u_mult)[2][2]) {
  static_assert(!kStagedStores || (kUnrolled && Record::kF16 && Record::kUBounds),
                "staged stores: the halves PREP's F16Record");
#pragma unroll(kUnrolled ? 2 : 1)
  for (int pass = 0; pass < 2; ++pass) {
    const bool is_w = pass == 0;  // warp-uniform
    const int n0 = wu_n0(warp);
    const uint32_t rhs = smem_u32(smem + (is_w ? L::kSKT : L::kSV));  // both [64][kLdH] 16-bit
    const uint32_t tmat = smem_u32(smem + (is_w ? kST16 : kSTB));
#pragma unroll
    for (int mt = 0; mt < kC / 16; ++mt) {
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int reg = 0; reg < 4; ++reg) acc[mt][nt][reg] = 0.0f;
      }
    }
    if (!is_w) {
      // U's diagonal term beta_i v_i in fp32 (phase 5a left it out of the bf16 T copy). The v
      // tile of rows 16 mt .., columns n0 .. n0 + 15 by one ldmatrix.x4: register 2 nt + half is
      // the C fragment (n tile nt, rows c_row(lane, 2 half)) the accumulators need.
#pragma unroll
      for (int mt = 0; mt < kC / 16; ++mt) {
        uint32_t vv[4];
        ldsm_x4(smem_u32(smem + L::v(16 * mt + ldsm_a_row(lane), n0 + ldsm_a_col(lane))), vv);
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const float b = ldf(smem, L::beta(16 * mt + c_row(lane, 2 * half)));
#pragma unroll
          for (int nt = 0; nt < 2; ++nt) {
            const float2 v2 = unpack_bf16(vv[2 * nt + half]);
            acc[mt][nt][2 * half] = b * v2.x;
            acc[mt][nt][2 * half + 1] = b * v2.y;
          }
        }
      }
    }
#pragma unroll
    for (int ks = 0; ks < kC / 16; ++ks) {
      uint32_t b[4];  // b0, b1 of n tile 0, then of n tile 1
      ldsm_x4_trans(rhs + 2 * ((16 * ks + ldsm_bt_row(lane)) * kLdH + n0 + ldsm_bt_col(lane)), b);
      const uint32_t b0[2] = {b[0], b[1]};
      const uint32_t b1[2] = {b[2], b[3]};
#pragma unroll
      for (int mt = ks; mt < kC / 16; ++mt) {
        uint32_t ta[4];
        ldsm_x4(tmat + 2 * mma::swz64(16 * mt + ldsm_a_row(lane), 16 * ks + ldsm_a_col(lane)), ta);
        if (is_w) {
          mma_f16(acc[mt][0], ta, b0[0], b0[1]);
          mma_f16(acc[mt][1], ta, b1[0], b1[1]);
        } else {
          mma_bf16(acc[mt][0], ta, b0[0], b0[1]);
          mma_bf16(acc[mt][1], ta, b1[0], b1[1]);
        }
      }
    }
    // The record: U column d as fp16 U * 2^15 / U_BOUND[d] (record.h), U_BOUND a power of two
    // above the column's max |U|, so the fp16 values stay below 2^15 for any scale of v.
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) u_mult[nt][e] = 1.0f;  // [n tile][column of the pair]
    }
    if (Record::kUBounds && !is_w) u_column_scales(rec, n0, lane, acc, u_mult);
    if constexpr (kStagedStores) {
      stage_w_u_tile<Record, L>(n, lane, warp, is_w, smem, rec, acc, u_mult);
      continue;
    }
#pragma unroll
    for (int mt = 0; mt < kC / 16; ++mt) {
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int i = 16 * mt + c_row(lane, 2 * half);
          const int d = n0 + 8 * nt + c_col(lane, 0);
          const int64_t w_at = Record::w(i, d);
          put_pair(rec, is_w ? w_at : Record::u(i, d),
                   w_u_record_pair<Record>(n, lane, mt, nt, half, acc, u_mult));
        }
      }
    }
  }
}

// One chunk of PREP, inlined into the library's two kernels (prep.cu) and the lab's. kRawInputs:
// raw inputs are read (load_raw_inputs); otherwise the contract load, whose code, with the
// contract kernel's parameters, is what it was before raw inputs existed (cuobjdump: identical
// SASS), so adding them cannot slow the contract path.
// The body is the phases in order, one force-inlined function each, with the CTA barriers
// between them. The register arrays of phases 3, 4a, 5a and 5 are declared here and passed by
// reference: declared inside the phase functions (tried), they compile to the same instructions
// in another order. The PTX then numbers the loop-carried and branch-merged values of those
// arrays, and of arrays in other phases (phase 1's among them), in another order, and ptxas
// allocates and schedules them differently; the likely cause is that a function's own arrays are
// promoted to registers when it is optimized on its own, before it is inlined. Declared here,
// all four PREP kernels' SASS is identical to the single-body version's (scripts/sass_compare.py).
// The Schur level's own arrays make no such difference and stay in invert_off_diagonal_level.
template <class Record, bool kRawInputs>
__device__ __forceinline__ void prep_chunk(const PrepArgs& args, const RawPrepArgs& raw) {
  extern __shared__ __align__(128) unsigned char smem[];

  ChunkRef chunk;
  if (!find_chunk(args.seqs, blockIdx.x, chunk)) return;  // unused slot
  const int h = blockIdx.y;
  const int n = chunk.rows;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  char* const rec = chunk_record<Record>(args, h);

  load_chunk<kRawInputs>(args, raw, chunk, h, n, tid, lane, warp, smem);  // ends in a barrier
  store_factors<Record, kRawInputs>(n, tid, smem, rec);                  // ends in a barrier

  // 3. The grams: A_qk into the record, A_kk into shared memory once q is dead.
  float akk[2][2][4];            // [task slot][n tile][C register]
  float acck[2][4], accq[2][4];  // [n tile][C register]
  compute_grams<Record, kRawInputs>(n, lane, warp, smem, rec, akk, acck, accq);
  __syncthreads();  // q is dead: its region becomes A_kk
  store_akk(lane, warp, akk, smem);
  __syncthreads();

  // 4a. X's diagonal blocks (warps 0..3) while warps 4..7 build W's right-hand side. (No named
  // barrier: an earlier version ordered the in-place G overwrite with bar.sync 1, 128, correct,
  // but compute-sanitizer's racecheck then reported hazards between phases 5a and 5.)
  uint4 rhs_w[kC / 8];  // warps 4..7: beta k Gamma (fp16) of rows 8 b + tid / 16 - 8, b = 0..7
  if (warp < 4) {
    float x[16];
    invert_diagonal_blocks<PairTail>(lane, warp, smem, x);
  } else {
    float g[8], kv[8], kt[8];
    compute_w_rhs<kRawInputs>(tid, smem, rhs_w, g, kv, kt);
  }
  __syncthreads();  // G is dead
  store_w_rhs(tid, warp, rhs_w, smem);

  // 4b. X's off-diagonal blocks, level by level (the next level reads blocks other warps wrote).
  // The warp test stays here: inside the function, ptxas inverts one compare and branch.
#pragma unroll 1
  for (int level = 1; level <= 3; ++level) {
    if (warp < schur_units(level)) {  // uniform
      invert_off_diagonal_level<PairTail>(level, lane, warp, smem);
    }
    __syncthreads();
  }

  // 5a. T's fp16 and bf16 copies for phase 5's ldmatrix.
  float t[8], b[8], tb[8];
  copy_t_operands<PairTail>(tid, smem, t, b, tb);
  __syncthreads();

  // 5. W and U into the record.
  float acc[4][2][4];  // [m tile][n tile][C register]
  float u_mult[2][2];  // [n tile][column of the pair]
  multiply_w_u<Record, PairTail, false>(n, lane, warp, smem, rec, acc, u_mult);
}

}  // namespace kda::detail::prep
