// The 16-token factor builder (factors16.h has the math). One CTA = one warpgroup = kPair
// (16-token sub-chunk, head)s, 1 or 2 (Args::pair), interleaved phase by phase so that each
// thread has kPair independent streams of work; phases, CTA barriers between them:
//   1  q, k, v (bf16), G (fp32, rows >= n: G_{n-1}) and the gate row before the sub-chunk by
//      16-byte cp.async; beta; rows >= n of q, k, v zeros by selection (that memory belongs to the
//      next sequence or lies past the end)
//   1b thread d: the channel's anchors, cs = 2^(Gm - Gs), ce = 2^(Ge - Gm), A = 2^(Ge - Gs)
//   2  thread (row i = t / 8, channels 16 (t % 8) .. +15): the fused q norm's factor (8 lanes per
//      row), the two exponentials per element and every elementwise factor: the grams' operands
//      (bf16: k 2^(G - Gm), q 2^(G - Gm) rows over k and q in place, k 2^(Gm - G) columns), W's
//      right-hand side beta k 2^(G - Gs) (fp16), QP and KG (bf16, to the record)
//   3  grams on mma.sync: warp w runs gram w / 2 (A_kk, A_qk) for the 8 columns 8 (w % 2) ..,
//      all 8 k-steps in order; beta / scale r folded in, AQK to the record
//   4  T = (I + A_kk)^-1 in 8 x 8 blocks, warp s for sub-chunk s
//   5  W = T rhs (fp16 operands), U = beta v + (T - I) diag(beta) v (bf16 operands, the diagonal
//      term in fp32); warp w owns columns 32 w .. +31; U goes out transposed, in fp32
// Every sum has a fixed order: bitwise reproducible.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "device/ptx.cuh"
#include "factors16.h"
#include "l2norm_row.cuh"
#include "prep/prep_chunk.cuh"  // deferred_row_norm

namespace kda::lab::factors16 {
namespace {

using namespace kda::detail::ptx;  // NOLINT: the PTX wrappers are this file's vocabulary

// ---- Shared memory (bytes). 16-bit tiles have 136-element rows (272 bytes): ldmatrix's 8 row
// addresses then fall in 8 distinct 16-byte bank groups. fp32 16 x 16 tiles have 24-float rows.
constexpr int kLd16 = 136;
constexpr int kLdG = 132;
constexpr int kLdS = 24;
constexpr int kTile16 = kSub * kLd16 * 2;  // 4,352
// Per sub-chunk of the CTA: a work region, then its input buffer; kPair of both.
constexpr int kSCs = 0;                      // 2^(Gm - Gs) [128]
constexpr int kSCe = kSCs + kDim * 4;        // 2^(Ge - Gm) [128]
constexpr int kSQScale = kSCe + kDim * 4;    // scale r_i [16]
constexpr int kSColK = kSQScale + kSub * 4;  // bf16 k 2^(Gm - G)
constexpr int kSRhsW = kSColK + kTile16;     // fp16 beta k 2^(G - Gs)
constexpr int kSA = kSRhsW + kTile16;        // A_kk fp32 [16][24]
constexpr int kST = kSA + kSub * kLdS * 4;   // T fp32 [16][24]
constexpr int kWorkBytes = kST + kSub * kLdS * 4;
// The input buffer (offsets from its base):
constexpr int kSQ = 0;                       // q bf16; the grams' q rows q 2^(G - Gm) after 2
constexpr int kSK = kSQ + kTile16;           // k bf16; the grams' k rows k 2^(G - Gm) after 2
constexpr int kSV = kSK + kTile16;           // v bf16
constexpr int kSG = kSV + kTile16;           // G fp32 [16][132]
constexpr int kSGs = kSG + kSub * kLdG * 4;  // the gate row before the sub-chunk [128]
constexpr int kSBeta = kSGs + kDim * 4;      // [16]
constexpr int kSRowK = kSK;
constexpr int kSRowQ = kSQ;
constexpr int kInBytes = kSBeta + kSub * 4;
constexpr int kSubBytes = kWorkBytes + kInBytes;  // 34,944
static_assert(kInBytes % 16 == 0 && kWorkBytes % 16 == 0, "16-byte aligned regions");
static_assert(kSubBytes == 34944, "six CTAs per SM with one sub-chunk, three with two");
template <int kPair>
constexpr int shared_bytes() { return kPair * kSubBytes; }
template <int kPair>
constexpr int ctas_per_sm() { return kPair == 1 ? 6 : 3; }
static_assert(6 * (shared_bytes<1>() + 1024) <= 228 * 1024, "six CTAs per SM");
static_assert(3 * (shared_bytes<2>() + 1024) <= 228 * 1024, "three CTAs per SM");

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

// Slot -> sub-chunk (factors16.h slot_capacity); false when no sequence owns the slot.
__device__ __forceinline__ bool find_sub_chunk(const Args& a, int64_t slot, SubChunk& out) {
  auto begin = [&](int s) {
    return a.cu != nullptr ? static_cast<int64_t>(a.cu[s]) : static_cast<int64_t>(s) * a.seq_len;
  };
  int lo = 0, hi = a.num_seqs - 1;  // the largest s with begin(s) / 16 + s <= slot
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (begin(mid) / kSub + mid <= slot) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const int64_t b = begin(lo), e = begin(lo + 1);
  const int64_t local = slot - (b / kSub + lo);
  if (local < 0 || local * kSub >= e - b) return false;
  out.seq = lo;
  out.first_token = b + local * kSub;
  const int64_t left = e - out.first_token;
  out.rows = left < kSub ? static_cast<int>(left) : kSub;
  out.at_chunk = (local & 3) == 0;
  return true;
}

// 16 (8) consecutive bf16 / fp32 values at a 16-byte aligned shared byte offset.
__device__ __forceinline__ void load16_bf16(const unsigned char* s, int byte, float (&x)[16]) {
#pragma unroll
  for (int u = 0; u < 2; ++u) {
    const uint4 w = *reinterpret_cast<const uint4*>(s + byte + 16 * u);
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const float2 f = unpack_bf16(words[p]);
      x[8 * u + 2 * p] = f.x;
      x[8 * u + 2 * p + 1] = f.y;
    }
  }
}
__device__ __forceinline__ void load8_bf16(const unsigned char* s, int byte, float (&x)[8]) {
  const uint4 w = *reinterpret_cast<const uint4*>(s + byte);
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    const float2 f = unpack_bf16(words[p]);
    x[2 * p] = f.x;
    x[2 * p + 1] = f.y;
  }
}
__device__ __forceinline__ void load8_f32(const unsigned char* s, int byte, float (&x)[8]) {
#pragma unroll
  for (int u = 0; u < 2; ++u) {
    const float4 w = *reinterpret_cast<const float4*>(s + byte + 16 * u);
    x[4 * u] = w.x;
    x[4 * u + 1] = w.y;
    x[4 * u + 2] = w.z;
    x[4 * u + 3] = w.w;
  }
}
// 8 values as bf16 (kF16 false) or fp16, one 16-byte store at `dst` (shared or global).
template <bool kF16>
__device__ __forceinline__ void store8(void* dst, const float (&x)[8]) {
  uint32_t w[4];
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    w[p] = kF16 ? pack_f16(x[2 * p], x[2 * p + 1]) : pack_bf16(x[2 * p], x[2 * p + 1]);
  }
  *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
}

// 4-byte cp.async (beta's rows are heads apart in memory).
__device__ __forceinline__ void cp_async4(uint32_t smem_dst, const void* gmem_src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_dst), "l"(gmem_src)
               : "memory");
}

// The SM this thread runs on (the on-chip timing mode's record).
__device__ __forceinline__ uint32_t sm_id() {
  uint32_t id;
  asm volatile("mov.u32 %0, %%smid;\n" : "=r"(id));
  return id;
}

// Phase 1 for sub-chunk `sc` into the input buffer `in`, by cp.async (the caller commits).
__device__ __forceinline__ void load_inputs(const Args& a, int h, const SubChunk& sc,
                                            unsigned char* in) {
  const int tid = threadIdx.x;
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
      cp_async16(smem_u32(in + s16(kSQ, i, c)), a.q + token * a.q_stride + head_offset + c);
      cp_async16(smem_u32(in + s16(kSK, i, c)), a.k + token * a.k_stride + head_offset + c);
      cp_async16(smem_u32(in + s16(kSV, i, c)), a.v + token * a.v_stride + head_offset + c);
    } else {
      const uint4 z = make_uint4(0u, 0u, 0u, 0u);
      *reinterpret_cast<uint4*>(in + s16(kSQ, i, c)) = z;
      *reinterpret_cast<uint4*>(in + s16(kSK, i, c)) = z;
      *reinterpret_cast<uint4*>(in + s16(kSV, i, c)) = z;
    }
  }
#pragma unroll
  for (int it = 0; it < 4; ++it) {  // G: 16 rows x 32 units; rows >= n repeat row n - 1
    const int u = tid + kThreads * it;
    const int i = u >> 5, c = 4 * (u & 31);
    const int64_t token = sc.first_token + min(i, n - 1);
    cp_async16(smem_u32(in + sg(i, c)), a.gate + token * gate_row + head_offset + c);
  }
  if (tid < 32) {  // the row before: Gs (0 at a 64-token chunk's start)
    const int c = 4 * tid;
    if (sc.at_chunk) {
      *reinterpret_cast<float4*>(in + kSGs + 4 * c) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    } else {
      cp_async16(smem_u32(in + kSGs + 4 * c),
                 a.gate + (sc.first_token - 1) * gate_row + head_offset + c);
    }
  }
  if (tid < kSub) {  // beta: 4-byte copies (tokens are heads apart); rows >= n zero
    if (tid < n) {
      cp_async4(smem_u32(in + kSBeta + 4 * tid), a.beta + (sc.first_token + tid) * a.heads + h);
    } else {
      *reinterpret_cast<float*>(in + kSBeta + 4 * tid) = 0.0f;
    }
  }
}

// Phases 1b .. 5 of the CTA's kPair sub-chunks (slots slot[s] of head h), their inputs landed in
// in[s]; work[s] their work regions; ok[s] false for a slot no sequence owns (CTA-uniform).
// Each phase runs every sub-chunk's share back to back (the loops over s are unrolled), so a
// thread's instructions for the two are independent and interleave.
template <int kPair>
__device__ __forceinline__ void build_factors(const Args& a, int h, const int64_t (&slots)[kPair],
                                              const SubChunk (&sc)[kPair], const bool (&ok)[kPair],
                                              unsigned char* const (&in)[kPair],
                                              unsigned char* const (&work)[kPair]) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int gr = lane >> 2, gc = 2 * (lane & 3);
  char* rec[kPair];
  int n[kPair], m[kPair];
#pragma unroll
  for (int s = 0; s < kPair; ++s) {
    const int64_t own = static_cast<int64_t>(h) * a.capacity + slots[s];
    const int64_t slot =
        a.on_chip ? (int64_t{sm_id()} * 8 + (slots[s] & 7)) % (a.capacity * a.heads) : own;
    rec[s] = a.records + slot * kRecordBytes;
    n[s] = sc[s].rows;
    m[s] = min(8, n[s] - 1);
  }

  // ---- 1b: thread d's channel anchors.
#pragma unroll
  for (int s = 0; s < kPair; ++s) {
    if (!ok[s]) continue;
    const int d = tid;
    const float gs = *reinterpret_cast<const float*>(in[s] + kSGs + 4 * d);
    const float gm = *reinterpret_cast<const float*>(in[s] + sg(m[s], d));
    const float ge = *reinterpret_cast<const float*>(in[s] + sg(n[s] - 1, d));
    *reinterpret_cast<float*>(work[s] + kSCs + 4 * d) = ex2_approx(gm - gs);
    *reinterpret_cast<float*>(work[s] + kSCe + 4 * d) = ex2_approx(ge - gm);
    *reinterpret_cast<float*>(rec[s] + rec_a(d)) = ex2_approx(ge - gs);
  }
  __syncthreads();

  // ---- 2: the elementwise factors of row i, channels d0 .. d0 + 15.
#pragma unroll
  for (int s = 0; s < kPair; ++s) {
    if (!ok[s]) continue;
    const int i = tid >> 3, d0 = 16 * (tid & 7);
    float q[16];
    load16_bf16(in[s], s16(kSQ, i, d0), q);
    float qscale = kda::detail::kScale;
    if (a.fuse_q_l2norm) {  // uniform
      bool rescaled;
      qscale *= kda::detail::prep::deferred_row_norm<8, 16>(q, rescaled);  // huge rows: q rescaled
    }
    if ((tid & 7) == 0) *reinterpret_cast<float*>(work[s] + kSQScale + 4 * i) = qscale;
    const float beta = *reinterpret_cast<const float*>(in[s] + kSBeta + 4 * i);
#pragma unroll
    for (int u = 0; u < 2; ++u) {  // one 16-byte unit of every output at a time (registers)
      const int c0 = d0 + 8 * u;
      float k[8], g[8], gm[8], cs[8], ce[8];
      load8_bf16(in[s], s16(kSK, i, c0), k);
      load8_f32(in[s], sg(i, c0), g);
      load8_f32(in[s], sg(m[s], c0), gm);
      load8_f32(work[s], kSCs + 4 * c0, cs);
      load8_f32(work[s], kSCe + 4 * c0, ce);
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
      store8<false>(in[s] + s16(kSRowK, i, c0), rk);  // over k's own unit, read above
      store8<false>(in[s] + s16(kSRowQ, i, c0), rq);  // over q's (q is in registers)
      store8<false>(work[s] + s16(kSColK, i, c0), ck);
      store8<true>(work[s] + s16(kSRhsW, i, c0), rhs);
      store8<false>(rec[s] + rec_split(kRecQP, i, c0), qp);
      store8<false>(rec[s] + rec_split(kRecKG, i, c0), kg);
    }
  }
  __syncthreads();

  // ---- 3: gram warp / 2 (0: A_kk from the k rows, 1: A_qk from the q rows), columns
  // 8 (warp % 2) .. + 7, the 8 k-steps in order into one accumulator.
#pragma unroll
  for (int s = 0; s < kPair; ++s) {
    if (!ok[s]) continue;
    const bool qk = warp >= 2;
    const int nt = warp & 1;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int kp = 0; kp < 4; ++kp) {  // k-steps 2 kp, 2 kp + 1
      // B = the column operand stored [j][d]: matrix mi = lane / 8 is (k-step 2 kp + mi / 2,
      // d 0-7 | 8-15 for mi % 2) of rows j = 8 nt .. + 7: registers b0, b1 of each k-step.
      const int mi = lane >> 3;
      uint32_t b[4];
      ldsm_x4(smem_u32(work[s] + s16(kSColK, 8 * nt + (lane & 7), 32 * kp + 16 * (mi >> 1) +
                                                                      8 * (mi & 1))),
              b);
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2) {
        uint32_t x[4];
        ldsm_x4(smem_u32(in[s] + s16(qk ? kSRowQ : kSRowK, lane & 15,
                                     32 * kp + 16 * h2 + 8 * (lane >> 4))),
                x);
        mma_bf16(acc, x, b[2 * h2], b[2 * h2 + 1]);
      }
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int i = gr + 8 * half, j = 8 * nt + gc;
      const float beta = *reinterpret_cast<const float*>(in[s] + kSBeta + 4 * i);
      const float qscale = *reinterpret_cast<const float*>(work[s] + kSQScale + 4 * i);
      if (qk) {
        const float o0 = (j <= i && i < n[s]) ? qscale * acc[2 * half] : 0.0f;
        const float o1 = (j + 1 <= i && i < n[s]) ? qscale * acc[2 * half + 1] : 0.0f;
        *reinterpret_cast<uint32_t*>(rec[s] + rec_aqk(i, j)) = pack_bf16(o0, o1);
      } else {
        *reinterpret_cast<float2*>(work[s] + ss(kSA, i, j)) =
            make_float2((j < i && i < n[s]) ? beta * acc[2 * half] : 0.0f,
                        (j + 1 < i && i < n[s]) ? beta * acc[2 * half + 1] : 0.0f);
      }
    }
  }
  __syncthreads();

  // ---- 4: T = (I + A_kk)^-1 in 8 x 8 blocks (warp s for sub-chunk s): the diagonal blocks by
  // forward substitution, lane j < 8 column j of T11, lane 8 + j column j of T22, side by side;
  // then T21 = -T22 A21 T11, lane l entries (8 + l / 8, l % 8) and (12 + l / 8, l % 8). Dependent
  // depth 28 + 8 + 8 FMAs instead of the 120 of one 16-row substitution.
#pragma unroll
  for (int s = 0; s < kPair; ++s) {
    if (!ok[s] || warp != s) continue;
    const float* A = reinterpret_cast<const float*>(work[s] + kSA);
    float* T = reinterpret_cast<float*>(work[s] + kST);
    if (lane < kSub) {
      const int o = lane & 8, j = lane & 7;
      float x[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        float acc = 0.0f;
#pragma unroll
        for (int r = 0; r < i; ++r) acc = fmaf(A[(o + i) * kLdS + o + r], x[r], acc);
        x[i] = (i == j ? 1.0f : 0.0f) - acc;
        T[(o + i) * kLdS + o + j] = x[i];
        if (o == 0) T[i * kLdS + 8 + j] = 0.0f;  // T12
      }
    }
    __syncwarp();
    const int c = lane & 7;
    float y[8];  // y = A21 T11[:, c]
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      float acc = 0.0f;
#pragma unroll
      for (int r = 0; r < 8; ++r) acc = fmaf(A[(8 + k) * kLdS + r], T[r * kLdS + c], acc);
      y[k] = acc;
    }
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const int i = (lane >> 3) + 4 * q;  // row 8 + i
      float acc = 0.0f;
#pragma unroll
      for (int k = 0; k < 8; ++k) acc = fmaf(T[(8 + i) * kLdS + 8 + k], y[k], acc);
      T[(8 + i) * kLdS + c] = -acc;
    }
  }
  __syncthreads();

  // ---- 5: W and U, columns n0 .. n0 + 31 of warp `warp`.
#pragma unroll
  for (int s = 0; s < kPair; ++s) {
    if (!ok[s]) continue;
    uint32_t at[4], au[4];  // A fragments: T (fp16), (T - I) diag(beta) (bf16)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int i = gr + 8 * (r & 1), j = gc + 8 * (r >> 1);
      const float2 t = *reinterpret_cast<const float2*>(work[s] + ss(kST, i, j));
      const float b0 = *reinterpret_cast<const float*>(in[s] + kSBeta + 4 * j);
      const float b1 = *reinterpret_cast<const float*>(in[s] + kSBeta + 4 * (j + 1));
      at[r] = pack_f16(t.x, t.y);
      au[r] = pack_bf16((t.x - (i == j ? 1.0f : 0.0f)) * b0,
                        (t.y - (i == j + 1 ? 1.0f : 0.0f)) * b1);
    }
    const int n0 = 32 * warp;
    float accw[4][4] = {}, accu[4][4] = {};
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // B = rhs / v stored [j][d]: ldmatrix .trans
      const int row = (lane & 7) + 8 * ((lane >> 3) & 1);
      const int col = n0 + 16 * half + 8 * (lane >> 4);
      uint32_t bw[4], bv[4];
      ldsm_x4_trans(smem_u32(work[s] + s16(kSRhsW, row, col)), bw);
      ldsm_x4_trans(smem_u32(in[s] + s16(kSV, row, col)), bv);
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
        *reinterpret_cast<uint32_t*>(rec[s] + rec_split(kRecW, i, col)) =
            pack_bf16(accw[nt][2 * half], accw[nt][2 * half + 1]);
        const float beta = *reinterpret_cast<const float*>(in[s] + kSBeta + 4 * i);
        const float2 vv =
            unpack_bf16(*reinterpret_cast<const uint32_t*>(in[s] + s16(kSV, i, col)));
        *reinterpret_cast<float*>(rec[s] + rec_ut(col, i)) =
            fmaf(beta, vv.x, accu[nt][2 * half]);
        *reinterpret_cast<float*>(rec[s] + rec_ut(col + 1, i)) =
            fmaf(beta, vv.y, accu[nt][2 * half + 1]);
      }
    }
  }
}

// One CTA: slots kPair x blockIdx.x .. + kPair - 1 of head blockIdx.y, loaded together, then
// built together.
template <int kPair>
__global__ void __launch_bounds__(kThreads, ctas_per_sm<kPair>()) factors16_kernel(const Args a) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int h = blockIdx.y;
  int64_t slots[kPair];
  SubChunk sc[kPair];
  bool ok[kPair];
  unsigned char* work[kPair];
  unsigned char* in[kPair];
#pragma unroll
  for (int s = 0; s < kPair; ++s) {
    slots[s] = static_cast<int64_t>(blockIdx.x) * kPair + s;
    sc[s] = SubChunk{};
    ok[s] = slots[s] < a.capacity && find_sub_chunk(a, slots[s], sc[s]);
    work[s] = smem + s * kSubBytes;
    in[s] = work[s] + kWorkBytes;
    if (ok[s]) load_inputs(a, h, sc[s], in[s]);
  }
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();
  build_factors<kPair>(a, h, slots, sc, ok, in, work);
}

}  // namespace

template <int kPair>
cudaError_t launch_pair(const Args& args, cudaStream_t stream) {
  const auto kernel = factors16_kernel<kPair>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       shared_bytes<kPair>());
  if (e != cudaSuccess) return e;
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                           cudaSharedmemCarveoutMaxShared);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>((args.capacity + kPair - 1) / kPair),
                  static_cast<unsigned>(args.heads));
  kernel<<<grid, kThreads, shared_bytes<kPair>(), stream>>>(args);
  return cudaGetLastError();
}

cudaError_t launch(const Args& args, cudaStream_t stream) {
  return args.pair ? launch_pair<2>(args, stream) : launch_pair<1>(args, stream);
}

}  // namespace kda::lab::factors16
