// The one-pass forward's 16-token sub-chunk record and the inputs its builders read (onepass.h
// has the kernel). A builder warpgroup turns a sub-chunk's inputs into this record in shared
// memory; the chain warpgroup multiplies the state with it. The record never leaves the SM.
//
// Per sub-chunk (n <= 16 valid rows, G the contract's 64-chunk-local cumulative log2 gate, Gs
// the gate at the row before the sub-chunk (0 at a 64-token chunk start), Ge at row n - 1, Gm at
// the anchor row m = min(8, n - 1), so every exponent below stays within +-68 (kda-forward §3.1:
// at most 128 / 15 per token)):
//   QP  = scale r_i q_i 2^(G_i - Gs)              r_i = 1 / |q_i| when fused, else 1
//   KG  = k_j 2^(Ge - G_j)                        A   = 2^(Ge - Gs)
//   AQK = scale r_i sum_d q_id k_jd 2^(G_id - G_jd)   (j <= i)
//   T   = (I + A_kk)^-1, A_kk[i][j] = beta_i sum_d k_id k_jd 2^(G_id - G_jd)   (j < i)
//   W   = T (beta k 2^(G - Gs)),   U = T (beta v)
// and the chain's step on the transposed state S^T [128 values][128 keys]:
//   V_new^T = U^T - S^T W^T,  O^T = S^T QP^T + V_new^T AQK^T,  S^T <- S^T diag(A) + V_new^T KG.
// Two exponentials per element, 2^(G_i - Gm) and 2^(Gm - G_i), each within 2^+-68; the rest are
// per-channel factors 2^(Gm - Gs), 2^(Ge - Gm) <= 1, so every product is of normal floats and a
// result below 2^-126 is one whose true value is.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

namespace kda::detail::onepass {

inline constexpr int kSub = 16;         // tokens per sub-chunk
inline constexpr int kDim = 128;        // K = V
inline constexpr int kWarpgroup = 128;  // a builder, or the chain, is one warpgroup

#if defined(__CUDACC__)
#define KDA_ONEPASS_HD __host__ __device__
#else
#define KDA_ONEPASS_HD
#endif

// The record of one (head, sub-chunk), laid out as the chain's wgmma reads it. Rows >= n zero.
//   W, QP, KG  [16 rows][128] bf16 (fp16 for ChainOperands::f16_scaled, as AQK), each split
//              into two key halves of [16][128 B] (2 KB), every
//              half a canonical 128-byte-swizzle wgmma tile (16-byte unit u of row r at u ^ (r &
//              7)): W and QP the K-major B operands of S^T W^T, S^T QP^T, KG the MN-major one of
//              V_new^T KG
//   AQK        [16 rows][64] bf16, the same swizzle; only columns 0..15 are written (the K-major B
//              operand of V_new^T AQK^T: one k16 step)
//   UT         U^T [128 values][16 tokens] fp32 (the chain subtracts S^T W^T from it in fp32)
//   A          [128] fp32
// The state's products run on bf16 operands (the state and V_new need its range: v is unbounded
// user data) or on fp16 ones under row scales; every B operand is bounded (|W| <~ 1, |QP|, |AQK|
// <= 1/sqrt(128), |KG| <= 1), so fp16 holds it but for values below 2^-24, negligible beside the
// terms they are summed with.
inline constexpr int64_t kRecW = 0;
inline constexpr int64_t kRecQP = 4096;
inline constexpr int64_t kRecKG = 8192;
inline constexpr int64_t kRecAQK = 12288;
inline constexpr int64_t kRecUT = 14336;
inline constexpr int64_t kRecA = kRecUT + kDim * kSub * 4;  // 22,528
inline constexpr int64_t kRecordBytes = kRecA + kDim * 4;   // 23,040 = 1,440 per token
static_assert(kRecordBytes == 23040, "3 x 4 KB + 2 KB + 8 KB + 512 B");
inline constexpr int kHalfTileBytes = kSub * 128;  // [16 rows][128 B]

// Byte offset of element (row i, column d) in a W / QP / KG tile at `base`.
KDA_ONEPASS_HD constexpr int64_t rec_split(int64_t base, int i, int d) {
  return base + (d >> 6) * kHalfTileBytes + i * 128 + ((((d >> 3) ^ i) & 7) << 4) + 2 * (d & 7);
}
KDA_ONEPASS_HD constexpr int64_t rec_aqk(int i, int j) {
  return kRecAQK + i * 128 + ((((j >> 3) ^ i) & 7) << 4) + 2 * (j & 7);
}
KDA_ONEPASS_HD constexpr int64_t rec_ut(int d, int i) { return kRecUT + 4 * (d * kSub + i); }
KDA_ONEPASS_HD constexpr int64_t rec_a(int d) { return kRecA + 4 * d; }

// How the chain's state products round their register operands, the state S^T and V_new^T
// (both carry v's unbounded range), and the record's tiles that meet them:
//   bf16        bf16 operands and tiles (the library's): out rel-RMS 3.7e-3 fused, 4.0-4.3e-3
//               explicit and raw on the H100 and the H200
//   bf16_pairs  bf16 hi + lo pairs, every state product twice (the lab's one_pass16_pairs): 2.7 /
//               3.2e-3, but 1.5-1.7x the time on the H200 (the chain becomes the bound)
//   f16_scaled  fp16 operands under a power-of-two scale per value row, fp16 tiles (the lab's
//               one_pass16_f16; the two kernels' SCAN way): 1.8 / 2.4e-3 in the CPU replay
//   bf16_vnew_pairs  bf16 operands, V_new as a bf16 hi + lo pair (the B phase's two products
//               twice; the lab's one_pass16_vpairs): 3.4 / 3.7e-3 worst fused / explicit on the
//               long-memory problems in the CPU replay (kda-error-budget --plan one-pass --set
//               v_new=bf16x2) against 3.9 / 4.2e-3
enum class ChainOperands { bf16, bf16_pairs, f16_scaled, bf16_vnew_pairs };

// What a builder reads: the contract's inputs (normalized k, the cumulative log2 gate, beta
// probabilities) and the sequences.
struct BuildInputs {
  const __nv_bfloat16* q;  // [tokens][heads][128] with the strides below
  const __nv_bfloat16* k;  // normalized rows (the contract)
  const __nv_bfloat16* v;
  const float* gate;  // [tokens][heads][128] cumulative log2, restarting every 64 tokens
  const float* beta;  // [tokens][heads] in [0, 1]
  int64_t q_stride, k_stride, v_stride;  // elements between tokens
  int heads;
  const int32_t* cu;  // device [num_seqs + 1]; null: dense, sequence s = tokens s T .. s T + T
  int64_t seq_len;    // dense only
  int num_seqs;
  bool fuse_q_l2norm;
};

// Whether a problem's strides let the builders address a sub-chunk's rows with 32-bit element
// offsets from its first row (build16.cuh issue_loads); the launch refuses the others.
inline bool row_offsets_fit(const BuildInputs& a) {
  const int64_t limit = int64_t{1}
                        << 30;  // 16 rows of the largest stride, with room for the columns
  return a.q_stride >= 0 && a.k_stride >= 0 && a.v_stride >= 0 && 16 * a.q_stride < limit &&
         16 * a.k_stride < limit && 16 * a.v_stride < limit &&
         16 * static_cast<int64_t>(a.heads) * kDim < limit;
}

}  // namespace kda::detail::onepass
