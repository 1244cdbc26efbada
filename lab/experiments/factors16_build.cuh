// The 16-token factor build of one sub-chunk by one 128-thread warpgroup (factors16.h has the
// math): shared by the standalone builder (factors16.cu, one CTA per sub-chunk) and the one-kernel
// forward's builder warpgroups (fused16.cu), which differ only in where the record goes (global
// memory or a shared-memory ring buffer) and in the barrier that separates the phases (the CTA's
// or a named barrier of the warpgroup). Phases, a barrier between each:
//   1  q, k, v (bf16), G (fp32, rows >= n: G_{n-1}) and the gate row before the sub-chunk by
//      16-byte cp.async; beta; rows >= n of q, k, v zeros by selection (that memory belongs to the
//      next sequence or lies past the end)
//   1b thread d: the channel's anchors, cs = 2^(Gm - Gs), ce = 2^(Ge - Gm), A = 2^(Ge - Gs)
//   2  thread (row i = t / 8, channels 16 (t % 8) .. +15): the fused q norm's factor (8 lanes per
//      row), the two exponentials per element and every elementwise factor: the grams' operands
//      (bf16: k 2^(G - Gm), q 2^(G - Gm) rows over k and q in place, k 2^(Gm - G) columns), W's
//      right-hand side beta k 2^(G - Gs) (fp16), QP and KG (bf16, to the record)
//   3  grams on mma.sync: warp w runs k-steps 2w, 2w + 1 of both (16 x 16, shared column
//      operand); partials summed in warp order, beta / scale r folded in, AQK to the record
//   4  T = (I + A_kk)^-1 by forward substitution, lane j of warp 0 solving column j
//   5  W = T rhs (fp16 operands), U = beta v + (T - I) diag(beta) v (bf16 operands, the diagonal
//      term in fp32); warp w owns columns 32 w .. +31; U goes out transposed, in fp32
// Every sum has a fixed order: bitwise reproducible, and the same bits wherever the record goes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "device/ptx.cuh"
#include "factors16.h"
#include "l2norm_row.cuh"
#include "prep/prep_chunk.cuh"  // deferred_row_norm, load8_bf16, load8_f32, pack8_*

namespace kda::lab::factors16::build {

using namespace kda::detail::ptx;  // NOLINT: the PTX wrappers are this file's vocabulary

// ---- Shared memory (bytes). 16-bit tiles have 136-element rows (272 bytes): ldmatrix's 8 row
// addresses then fall in 8 distinct 16-byte bank groups. fp32 16 x 16 tiles have 24-float rows.
constexpr int kLd16 = 136;
constexpr int kLdG = 132;
constexpr int kLdS = 24;
constexpr int kTile16 = kSub * kLd16 * 2;  // 4,352
constexpr int kSQ = 0;                      // q bf16; the grams' q rows q 2^(G - Gm) after 2
constexpr int kSK = kSQ + kTile16;          // k bf16; the grams' k rows k 2^(G - Gm) after 2
constexpr int kSV = kSK + kTile16;          // v bf16
constexpr int kSG = kSV + kTile16;          // G fp32 [16][132]; the grams' partials after 2
constexpr int kSPart = kSG;                  // [4 warps][2 grams][16][16] fp32
constexpr int kSGs = kSG + kSub * kLdG * 4;  // the gate row before the sub-chunk [128]
constexpr int kSCs = kSGs + kDim * 4;        // 2^(Gm - Gs) [128]
constexpr int kSCe = kSCs + kDim * 4;        // 2^(Ge - Gm) [128]
constexpr int kSBeta = kSCe + kDim * 4;      // [16]
constexpr int kSQScale = kSBeta + kSub * 4;  // scale r_i [16]
constexpr int kSRowK = kSK;
constexpr int kSRowQ = kSQ;
constexpr int kSColK = kSQScale + kSub * 4;  // bf16 k 2^(Gm - G)
constexpr int kSRhsW = kSColK + kTile16;     // fp16 beta k 2^(G - Gs)
constexpr int kSA = kSRhsW + kTile16;        // A_kk fp32 [16][24]
constexpr int kST = kSA + kSub * kLdS * 4;   // T fp32 [16][24]
constexpr int kSBytes = kST + kSub * kLdS * 4;
static_assert(4 * 2 * kSub * kSub * 4 <= kSGs - kSG, "the partials fit in G's region");
static_assert(kSBytes == 34944, "six CTAs per SM");

__device__ __forceinline__ int s16(int region, int row, int col) {
  return region + 2 * (row * kLd16 + col);
}
__device__ __forceinline__ int sg(int row, int col) { return kSG + 4 * (row * kLdG + col); }
__device__ __forceinline__ int ss(int region, int row, int col) {
  return region + 4 * (row * kLdS + col);
}

struct SubChunk {
  int seq;
  int64_t first_token;
  int rows;       // n, 1..16
  bool at_chunk;  // the sub-chunk starts a 64-token chunk (its Gs is 0)
};

// The PREP's 8-value shared-memory loads and 16-bit packs (prep_chunk.cuh), and q's 16.
using kda::detail::prep::load8_bf16;
using kda::detail::prep::load8_f32;
__device__ __forceinline__ void load16_bf16(const unsigned char* s, int byte, float (&x)[16]) {
  float lo[8], hi[8];
  load8_bf16(s, byte, lo);
  load8_bf16(s, byte + 16, hi);
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    x[e] = lo[e];
    x[8 + e] = hi[e];
  }
}
// 8 values as bf16 (kF16 false) or fp16, one 16-byte store at `dst` (shared or global).
template <bool kF16>
__device__ __forceinline__ void store8(void* dst, const float (&x)[8]) {
  *reinterpret_cast<uint4*>(dst) =
      kF16 ? kda::detail::prep::pack8_f16(x) : kda::detail::prep::pack8_bf16(x);
}

// One sub-chunk's factors into `rec` (a record's 23,040 bytes, global or shared: the same bits),
// by the 128 threads tid = 0 .. 127 of a warpgroup, with `smem` its kSBytes of scratch (16-byte
// aligned) and `sync()` a barrier of exactly those threads. The scratch is free again once the
// caller's barrier after this call has passed; the record's writes are ordinary stores (a consumer
// that reads them through the async proxy needs a proxy fence first).
template <class Sync>
__device__ __forceinline__ void build_sub_chunk(const Args& a, const SubChunk& sc, int h, int tid,
                                                unsigned char* smem, unsigned char* rec,
                                                const Sync& sync) {
  const int lane = tid & 31, warp = tid >> 5;
  const int n = sc.rows;
  const int64_t head_offset = static_cast<int64_t>(h) * kDim;
  const int64_t gate_row = static_cast<int64_t>(a.heads) * kDim;

  // ---- 1: loads.
#pragma unroll
  for (int it = 0; it < 2; ++it) {  // q, k, v: 16 rows x 16 units, two units per thread
    const int u = tid + kThreads * it;
    const int i = u >> 4, c = 8 * (u & 15);
    const int64_t token = sc.first_token + i;
    if (i < n) {
      cp_async16(smem_u32(smem + s16(kSQ, i, c)), a.q + token * a.q_stride + head_offset + c);
      cp_async16(smem_u32(smem + s16(kSK, i, c)), a.k + token * a.k_stride + head_offset + c);
      cp_async16(smem_u32(smem + s16(kSV, i, c)), a.v + token * a.v_stride + head_offset + c);
    } else {
      const uint4 z = make_uint4(0u, 0u, 0u, 0u);
      *reinterpret_cast<uint4*>(smem + s16(kSQ, i, c)) = z;
      *reinterpret_cast<uint4*>(smem + s16(kSK, i, c)) = z;
      *reinterpret_cast<uint4*>(smem + s16(kSV, i, c)) = z;
    }
  }
#pragma unroll
  for (int it = 0; it < 4; ++it) {  // G: 16 rows x 32 units; rows >= n repeat row n - 1
    const int u = tid + kThreads * it;
    const int i = u >> 5, c = 4 * (u & 31);
    const int64_t token = sc.first_token + min(i, n - 1);
    cp_async16(smem_u32(smem + sg(i, c)), a.gate + token * gate_row + head_offset + c);
  }
  if (tid < 32) {  // the row before: Gs (0 at a 64-token chunk's start)
    const int c = 4 * tid;
    if (sc.at_chunk) {
      *reinterpret_cast<float4*>(smem + kSGs + 4 * c) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    } else {
      cp_async16(smem_u32(smem + kSGs + 4 * c),
                 a.gate + (sc.first_token - 1) * gate_row + head_offset + c);
    }
  }
  cp_async_commit();
  if (tid < kSub) {
    const float b = tid < n ? a.beta[(sc.first_token + tid) * a.heads + h] : 0.0f;
    *reinterpret_cast<float*>(smem + kSBeta + 4 * tid) = b;
  }
  cp_async_wait_all();
  sync();

  // ---- 1b: thread d's channel anchors.
  const int m = min(8, n - 1);
  {
    const int d = tid;
    const float gs = *reinterpret_cast<const float*>(smem + kSGs + 4 * d);
    const float gm = *reinterpret_cast<const float*>(smem + sg(m, d));
    const float ge = *reinterpret_cast<const float*>(smem + sg(n - 1, d));
    *reinterpret_cast<float*>(smem + kSCs + 4 * d) = ex2_approx(gm - gs);
    *reinterpret_cast<float*>(smem + kSCe + 4 * d) = ex2_approx(ge - gm);
    *reinterpret_cast<float*>(rec + rec_a(d)) = ex2_approx(ge - gs);
  }
  sync();

  // ---- 2: the elementwise factors of row i, channels d0 .. d0 + 15.
  {
    const int i = tid >> 3, d0 = 16 * (tid & 7);
    float q[16];
    load16_bf16(smem, s16(kSQ, i, d0), q);
    float qscale = kda::detail::kScale;
    if (a.fuse_q_l2norm) {  // uniform
      bool rescaled;
      qscale *= kda::detail::prep::deferred_row_norm<8, 16>(q, rescaled);  // huge rows: q rescaled
    }
    if ((tid & 7) == 0) *reinterpret_cast<float*>(smem + kSQScale + 4 * i) = qscale;
    const float beta = *reinterpret_cast<const float*>(smem + kSBeta + 4 * i);
#pragma unroll
    for (int u = 0; u < 2; ++u) {  // one 16-byte unit of every output at a time (registers)
      const int c0 = d0 + 8 * u;
      float k[8], g[8], gm[8], cs[8], ce[8];
      load8_bf16(smem, s16(kSK, i, c0), k);
      load8_f32(smem, sg(i, c0), g);
      load8_f32(smem, sg(m, c0), gm);
      load8_f32(smem, kSCs + 4 * c0, cs);
      load8_f32(smem, kSCe + 4 * c0, ce);
      float rk[8], rq[8], ck[8], rhs[8], qp[8], kg[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float x = g[e] - gm[e];
        const float fr = ex2_approx(x);   // 2^(G_i - Gm), within 2^+-68
        const float fc = ex2_approx(-x);  // 2^(Gm - G_i)
        const float qe = q[8 * u + e];
        rk[e] = k[e] * fr;
        rq[e] = qe * fr;
        ck[e] = k[e] * fc;
        const float gamma = fr * cs[e];  // 2^(G_i - Gs) <= 1
        rhs[e] = beta * (k[e] * gamma);
        qp[e] = qscale * (qe * gamma);
        kg[e] = k[e] * (fc * ce[e]);  // 2^(Ge - G_i) <= 1
      }
      store8<false>(smem + s16(kSRowK, i, c0), rk);  // over k's own unit, read above
      store8<false>(smem + s16(kSRowQ, i, c0), rq);  // over q's (q is in registers)
      store8<false>(smem + s16(kSColK, i, c0), ck);
      store8<true>(smem + s16(kSRhsW, i, c0), rhs);
      store8<false>(rec + rec_split(kRecQP, i, c0), qp);
      store8<false>(rec + rec_split(kRecKG, i, c0), kg);
    }
  }
  sync();

  // ---- 3: the grams' k-steps 2 warp, 2 warp + 1 (channels 32 warp .. +31).
  {
    float acck[2][4] = {}, accq[2][4] = {};
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int d0 = 32 * warp + 16 * s;
      uint32_t ak[4], aq[4], b[4];
      const int arow = lane & 15, acol = d0 + 8 * (lane >> 4);
      ldsm_x4(smem_u32(smem + s16(kSRowK, arow, acol)), ak);
      ldsm_x4(smem_u32(smem + s16(kSRowQ, arow, acol)), aq);
      // B = the column operand stored [j][d]: matrix mi = lane / 8 is (j 0-7 | 8-15 for mi / 2,
      // d 0-7 | 8-15 for mi % 2): registers b0, b1 of n tile 0, then of n tile 1.
      const int mi = lane >> 3;
      ldsm_x4(smem_u32(smem + s16(kSColK, (lane & 7) + 8 * (mi >> 1), d0 + 8 * (mi & 1))), b);
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        mma_bf16(acck[nt], ak, b[2 * nt], b[2 * nt + 1]);
        mma_bf16(accq[nt], aq, b[2 * nt], b[2 * nt + 1]);
      }
    }
    const int gr = lane >> 2, gc = 2 * (lane & 3);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int i = gr + 8 * half, j = 8 * nt + gc;
        float* pk = reinterpret_cast<float*>(smem + kSPart) + ((warp * 2 + 0) * kSub + i) * kSub + j;
        float* pq = reinterpret_cast<float*>(smem + kSPart) + ((warp * 2 + 1) * kSub + i) * kSub + j;
        *reinterpret_cast<float2*>(pk) = make_float2(acck[nt][2 * half], acck[nt][2 * half + 1]);
        *reinterpret_cast<float2*>(pq) = make_float2(accq[nt][2 * half], accq[nt][2 * half + 1]);
      }
    }
  }
  sync();
  {  // thread t: entries (i, 2 (t % 8) .. +1) of both grams, summed in warp order
    const int i = tid >> 3, j = 2 * (tid & 7);
    const float* part = reinterpret_cast<const float*>(smem + kSPart);
    float sk[2], sq[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      sk[e] = sq[e] = 0.0f;
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        sk[e] += part[((w * 2 + 0) * kSub + i) * kSub + j + e];
        sq[e] += part[((w * 2 + 1) * kSub + i) * kSub + j + e];
      }
    }
    const float beta = *reinterpret_cast<const float*>(smem + kSBeta + 4 * i);
    const float qscale = *reinterpret_cast<const float*>(smem + kSQScale + 4 * i);
    float out_q[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      *reinterpret_cast<float*>(smem + ss(kSA, i, j + e)) =
          (j + e < i && i < n) ? beta * sk[e] : 0.0f;
      out_q[e] = (j + e <= i && i < n) ? qscale * sq[e] : 0.0f;
    }
    *reinterpret_cast<uint32_t*>(rec + rec_aqk(i, j)) = pack_bf16(out_q[0], out_q[1]);
  }
  sync();

  // ---- 4: T = (I + A_kk)^-1 in 8 x 8 blocks (warp 0): the diagonal blocks by forward
  // substitution, lane j < 8 column j of T11, lane 8 + j column j of T22, side by side; then
  // T21 = -T22 A21 T11, lane l entries (8 + l / 8, l % 8) and (12 + l / 8, l % 8). Dependent depth
  // 28 + 8 + 8 FMAs instead of the 120 of one 16-row substitution.
  if (warp == 0) {
    const float* A = reinterpret_cast<const float*>(smem + kSA);
    float* T = reinterpret_cast<float*>(smem + kST);
    if (lane < kSub) {
      const int o = lane & 8, j = lane & 7;
      float x[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        float s = 0.0f;
#pragma unroll
        for (int r = 0; r < i; ++r) s = fmaf(A[(o + i) * kLdS + o + r], x[r], s);
        x[i] = (i == j ? 1.0f : 0.0f) - s;
        T[(o + i) * kLdS + o + j] = x[i];
        if (o == 0) T[i * kLdS + 8 + j] = 0.0f;  // T12
      }
    }
    __syncwarp();
    const int c = lane & 7;
    float y[8];  // y = A21 T11[:, c]
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      float s = 0.0f;
#pragma unroll
      for (int r = 0; r < 8; ++r) s = fmaf(A[(8 + k) * kLdS + r], T[r * kLdS + c], s);
      y[k] = s;
    }
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const int i = (lane >> 3) + 4 * q;  // row 8 + i
      float s = 0.0f;
#pragma unroll
      for (int k = 0; k < 8; ++k) s = fmaf(T[(8 + i) * kLdS + 8 + k], y[k], s);
      T[(8 + i) * kLdS + c] = -s;
    }
  }
  sync();

  // ---- 5: W and U, columns n0 .. n0 + 31 of warp `warp`.
  {
    const int gr = lane >> 2, gc = 2 * (lane & 3);
    uint32_t at[4], au[4];  // A fragments: T (fp16), (T - I) diag(beta) (bf16)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int i = gr + 8 * (r & 1), j = gc + 8 * (r >> 1);
      const float2 t = *reinterpret_cast<const float2*>(smem + ss(kST, i, j));
      const float b0 = *reinterpret_cast<const float*>(smem + kSBeta + 4 * j);
      const float b1 = *reinterpret_cast<const float*>(smem + kSBeta + 4 * (j + 1));
      at[r] = pack_f16(t.x, t.y);
      au[r] = pack_bf16((t.x - (i == j ? 1.0f : 0.0f)) * b0, (t.y - (i == j + 1 ? 1.0f : 0.0f)) * b1);
    }
    const int n0 = 32 * warp;
    float accw[4][4] = {}, accu[4][4] = {};
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // B = rhs / v stored [j][d]: ldmatrix .trans
      const int row = (lane & 7) + 8 * ((lane >> 3) & 1);
      const int col = n0 + 16 * half + 8 * (lane >> 4);
      uint32_t bw[4], bv[4];
      ldsm_x4_trans(smem_u32(smem + s16(kSRhsW, row, col)), bw);
      ldsm_x4_trans(smem_u32(smem + s16(kSV, row, col)), bv);
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        mma_f16(accw[2 * half + t], at, bw[2 * t], bw[2 * t + 1]);
        mma_bf16(accu[2 * half + t], au, bv[2 * t], bv[2 * t + 1]);
      }
    }
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int col = n0 + 8 * nt + gc;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int i = gr + 8 * half;
        *reinterpret_cast<uint32_t*>(rec + rec_split(kRecW, i, col)) =
            pack_bf16(accw[nt][2 * half], accw[nt][2 * half + 1]);
        const float beta = *reinterpret_cast<const float*>(smem + kSBeta + 4 * i);
        const float2 vv =
            unpack_bf16(*reinterpret_cast<const uint32_t*>(smem + s16(kSV, i, col)));
        *reinterpret_cast<float*>(rec + rec_ut(col, i)) = fmaf(beta, vv.x, accu[nt][2 * half]);
        *reinterpret_cast<float*>(rec + rec_ut(col + 1, i)) =
            fmaf(beta, vv.y, accu[nt][2 * half + 1]);
      }
    }
  }
}

}  // namespace kda::lab::factors16::build
