// Index maps of the PREP (prep_chunk.cuh): shared-memory layout, mma.sync fragment element maps,
// the work split of the grams and of the W / U products, and the schedule of the blocked inverse.
// Host and device, no CUDA includes: the CPU test tests/kda/test_prep_layout.cpp emulates the
// kernel's fragment traffic on top of exactly these functions (and the PTX definition of mma.sync
// m16n8k16) and checks it against plain matrix products.
#pragma once

#include <cstdint>

#include "device/fragments.h"
#include "record.h"

namespace kda::detail::prep {

// ------------------------------------------------------------------------------------------------
// Fragment element maps of mma.sync.m16n8k16 (g = lane >> 2, t = lane & 3; PTX ISA):
//   A (16x16 row-major), register r (0..3), half e (0 = low 16 bits):
//     row g + 8 (r & 1), column 2t + 8 (r >> 1) + e
//   B (16x8, k x n), register r (0..1), half e: k = 2t + 8 r + e, n = g
//   C/D: device/fragments.h c_row / c_col.
KDA_HD constexpr int a_row(int lane, int reg) { return (lane >> 2) + 8 * (reg & 1); }
KDA_HD constexpr int a_col(int lane, int reg, int e) {
  return 2 * (lane & 3) + 8 * (reg >> 1) + e;
}
KDA_HD constexpr int b_k(int lane, int reg, int e) { return 2 * (lane & 3) + 8 * reg + e; }
KDA_HD constexpr int b_n(int lane) { return lane >> 2; }

// ------------------------------------------------------------------------------------------------
// Shared memory (bytes). q, k, v are kept as bf16 (they are bf16 values: widening is exact) with
// 136-element rows (272 bytes = 68 words): the fragment builders read one 4-byte pair per lane at
// (row g, column 2t) or one 2-byte element at (row 2t [+1], column g); both patterns hit distinct
// banks over a warp. G is fp32 with 136-float rows (8-byte pair reads of rows g, columns 2t:
// conflict-free per half warp). After the grams the q region holds A_kk (fp32, 68-float rows);
// X = T (fp32, 72-float rows: float2 A-fragment reads conflict-free per half warp); Y is the
// Schur scratch (three 16x16 fp32 blocks).
inline constexpr int kLdH = 136;  // bf16 elements per row of q, k, v
inline constexpr int kLdG = 136;  // floats per row of G
inline constexpr int kLdA = 68;   // floats per row of A_kk
inline constexpr int kLdX = 72;   // floats per row of X
inline constexpr int kSQ = 0;                          // [64][136] bf16 q (normalized if fused)
inline constexpr int kSA = kSQ;                        // [64][68] fp32 A_kk (after the grams)
inline constexpr int kSK = kSQ + kChunk * kLdH * 2;    // [64][136] bf16 k
inline constexpr int kSV = kSK + kChunk * kLdH * 2;    // [64][136] bf16 v
inline constexpr int kSG = kSV + kChunk * kLdH * 2;    // [64][136] fp32 G (rows >= n: G_{n-1})
inline constexpr int kSX = kSG + kChunk * kLdG * 4;    // [64][72] fp32 X = T
inline constexpr int kSY = kSX + kChunk * kLdX * 4;    // [3][16][16] fp32 Schur scratch
inline constexpr int kSBeta = kSY + 3 * 16 * 16 * 4;   // [64] fp32 beta (rows >= n zero)
inline constexpr int kSQScale = kSBeta + kChunk * 4;   // [64] fp32 scale * r_i (q row factor)
inline constexpr int kSKScale = kSQScale + kChunk * 4;  // [64] fp32 k row factor (raw inputs)
inline constexpr int kSBytes = kSKScale + kChunk * 4;   // 109,312
static_assert(kChunk * kLdA * 4 <= kSK - kSA, "A_kk fits in the q region");
static_assert(kChunk * kLdH * 2 <= kSY - kSX, "the column operands fit in the X region");
static_assert(kSBytes + 1024 <= 228 * 1024 / 2, "two CTAs per SM");

// Reuse after the grams (G, the A_kk copy and k are dead by then):
//   during the diagonal inverse, warps 4..7 build phase 5's right-hand sides: beta k Gamma as
//   fp16, stored over the first half of the G region (q/k/v row pitch) once the inverse's first
//   barrier has passed, and beta v as bf16 in place of v;
//   after the inverse, T goes to the A_kk region as fp16 and as bf16 ([64][64] each, swz64), so
//   phase 5 reads every operand with ldmatrix.
inline constexpr int kSKT = kSG;                         // [64][136] fp16 beta k Gamma
inline constexpr int kST16 = kSA;                        // [64][64] fp16 T, swz64
inline constexpr int kSTB = kSA + kChunk * kChunk * 2;   // [64][64] bf16 T, swz64
static_assert(kChunk * kLdH * 2 <= kChunk * kLdG * 4, "beta k Gamma fits in the G region");
static_assert(kSTB + kChunk * kChunk * 2 <= kSK, "both copies of T fit in the A_kk region");

// Element (row, col) of a bf16 [64][136] region (q, k or v).
KDA_HD constexpr int s16(int region, int row, int col) { return region + 2 * (row * kLdH + col); }
KDA_HD constexpr int sq(int row, int col) { return s16(kSQ, row, col); }
KDA_HD constexpr int sk(int row, int col) { return s16(kSK, row, col); }
KDA_HD constexpr int sv(int row, int col) { return s16(kSV, row, col); }
KDA_HD constexpr int sg(int row, int col) { return kSG + 4 * (row * kLdG + col); }
KDA_HD constexpr int sa(int row, int col) { return kSA + 4 * (row * kLdA + col); }
KDA_HD constexpr int sx(int row, int col) { return kSX + 4 * (row * kLdX + col); }

// ---- 2a (fused q norm; raw k's deferred norm the same way): the sums of squares of a warp's 8
// rows of q (or raw k) as the diagonal of X X^T on mma.sync. Warp w owns rows 8 w .. 8 w + 7: it
// loads them (their own cp.async group, so 2a runs while the rest is still in flight, ordered by
// a __syncwarp) and row j of X is row ssq_row(w, j). Eight consecutive rows of a 272-byte pitch
// (17 16-byte units) start in 8 distinct 16-byte bank groups, so every 8-row ldmatrix phase is
// conflict-free.
KDA_HD constexpr int ssq_row(int warp, int j) { return 8 * warp + j; }
// Row and 16-byte column unit of warp `warp`'s q load number `it` (0..3) by `lane`: two of the
// warp's own rows, 256 contiguous bytes each, per instruction.
KDA_HD constexpr int q_load_row(int warp, int lane, int it) {
  return ssq_row(warp, 2 * it + (lane >> 4));
}
KDA_HD constexpr int q_load_col(int lane) { return 8 * (lane & 15); }
// ldmatrix.x4 row address of `lane` at k-step ks in region kSQ (q) or kSK (k): matrices 0 and 3
// are columns 16 ks .. +7 of X's rows (row lane & 7), matrices 1 and 2 columns 16 ks + 8 .. +15.
// Registers {0, 1} = {lo, hi} are B's {b0, b1}, and all four are an A fragment whose rows 0..7
// are X (a0 = lo, a2 = hi); its rows 8..15 (a1 = hi, a3 = lo) are scrambled, which only touches
// C rows 8..15, never read. One instruction and no register moves to assemble the operands.
KDA_HD constexpr int ssq_ldsm(int warp, int lane, int ks, int region) {
  return s16(region, ssq_row(warp, lane & 7), 16 * ks + 8 * (((lane >> 3) ^ (lane >> 4)) & 1));
}
// C[j][j] sits in lane 4 j + j / 2, accumulator register j & 1 (c0, c1 = row g, cols 2t, 2t + 1).
KDA_HD constexpr bool ssq_holds_diagonal(int lane) { return (lane & 3) == ((lane >> 2) >> 1); }
KDA_HD constexpr int ssq_diagonal_reg(int lane) { return (lane >> 2) & 1; }
// Independent accumulators (k-step ks feeds ks % kSsqChains), summed as (0 + 1) + (2 + 3).
inline constexpr int kSsqChains = 4;
// Before the inverse the X region holds the grams' column operands (bf16, q/k/v row pitch):
// row j = k_j 2^(G_{m_c} - G_j) of column block c = j / 16, rounded once (zero for j >= n).
KDA_HD constexpr int scol(int row, int col) { return kSX + 2 * (row * kLdH + col); }
KDA_HD constexpr int skt(int row, int col) { return kSKT + 2 * (row * kLdH + col); }
KDA_HD constexpr int st16(int row, int col) { return kST16 + 2 * mma::swz64(row, col); }
KDA_HD constexpr int stb(int row, int col) { return kSTB + 2 * mma::swz64(row, col); }
// ldmatrix.x4 lane -> (row, column) of a 16x16 tile at (r0, c0):
//   A operand (T): matrices (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) are
//   a0..a3 of mma.m16n8k16; lane l addresses row r0 + (l & 15), column c0 + 8 (l >> 4).
//   B operand (.trans, tile stored [k][n]): matrices (k 0-7, n 0-7), (k 8-15, n 0-7),
//   (k 0-7, n 8-15), (k 8-15, n 8-15) are b0, b1 of n tile 0 and b0, b1 of n tile 1; lane l
//   addresses row (k) r0 + (l & 7) + 8 ((l >> 3) & 1), column (n) c0 + 8 (l >> 4).
KDA_HD constexpr int ldsm_a_row(int lane) { return lane & 15; }
KDA_HD constexpr int ldsm_a_col(int lane) { return 8 * (lane >> 4); }
KDA_HD constexpr int ldsm_bt_row(int lane) { return (lane & 7) + 8 * ((lane >> 3) & 1); }
KDA_HD constexpr int ldsm_bt_col(int lane) { return 8 * (lane >> 4); }
// The Schur scratch: one 16x8 fp32 tile Y per unit (warp) of a level, at most 6 units.
KDA_HD constexpr int sy(int unit, int row, int col) { return kSY + 4 * (unit * 128 + row * 8 + col); }

// The regions phases 4 and 5 (the inverse, T's copies, W and U) read besides the q region's
// (A_kk, then T's copies: sa, st16, stb), as a type, so that both PREP layouts (this one, two CTAs
// per SM, and the channel halves' below, three) run the same code for them.
template <int kX, int kY, int kBeta, int kKT, int kV>
struct TailRegions {
  static constexpr int kSX = kX;      // [64][72] fp32 X = T
  static constexpr int kSY = kY;      // [3][16][16] fp32 Schur scratch
  static constexpr int kSBeta = kBeta;  // [64] fp32 beta
  static constexpr int kSKT = kKT;    // [64][136] fp16 beta k Gamma
  static constexpr int kSV = kV;      // [64][136] bf16 v
  KDA_HD static constexpr int x(int row, int col) { return kSX + 4 * (row * kLdX + col); }
  KDA_HD static constexpr int y(int unit, int row, int col) {
    return kSY + 4 * (unit * 128 + row * 8 + col);
  }
  KDA_HD static constexpr int v(int row, int col) { return s16(kSV, row, col); }
  KDA_HD static constexpr int beta(int row) { return kSBeta + 4 * row; }
};
using PairTail = TailRegions<kSX, kSY, kSBeta, kSKT, kSV>;

// ------------------------------------------------------------------------------------------------
// Grams: 10 tasks = 16x16 block pairs (row block p >= column block c), in the order
// (0,0) (1,0) (1,1) (2,0) (2,1) (2,2) (3,0) (3,1) (3,2) (3,3); warp w runs tasks w and w + 8.
// Each task computes both grams of its block pair (the row factor 2^(G_i - G_{m_c}) is shared).
inline constexpr int kGramTasks = 10;
KDA_HD constexpr int gram_p(int task) {
  int p = 0;
  while (task > p) {
    task -= p + 1;
    ++p;
  }
  return p;
}
KDA_HD constexpr int gram_c(int task) { return task - gram_p(task) * (gram_p(task) + 1) / 2; }
// Anchor of column block c for a chunk of n valid rows (kernel-design §7.1): its middle row.
KDA_HD constexpr int anchor(int c, int n) { return 16 * c + 8 < n - 1 ? 16 * c + 8 : n - 1; }

// ------------------------------------------------------------------------------------------------
// Blocked inverse X = (I + A)^-1 (A strictly lower, 4 x 4 blocks of 16): diagonal blocks by
// forward substitution, then X_pc = -X_pp (sum_{c <= r < p} A_pr X_rc) level by level
// (mma.sync, fp16 operands with hi + lo splits, fp32 accumulation: prep_chunk.cuh phase 4b).
// Level l (1..3) holds the blocks p - c = l; element e of a level is block e's (p, c).
// On tensor cores (v2.3) a level's unit u (= warp u < schur_units(level)) computes block
// schur_block(u)'s 8-column n tile schur_ntile(u).
KDA_HD constexpr int schur_blocks(int level) { return 4 - level; }
KDA_HD constexpr int schur_units(int level) { return 2 * schur_blocks(level); }
KDA_HD constexpr int schur_block(int unit) { return unit >> 1; }
KDA_HD constexpr int schur_ntile(int unit) { return unit & 1; }
KDA_HD constexpr int schur_c(int /*level*/, int e) { return e; }
KDA_HD constexpr int schur_p(int level, int e) { return e + level; }

// ------------------------------------------------------------------------------------------------
// W = T (beta k Gamma) and U = T (beta v): warp w owns the 16 value/key columns 16 w .. 16 w + 15
// (two n8 tiles) and all 64 rows (4 m tiles, k-steps ks <= m tile: T is lower triangular).
KDA_HD constexpr int wu_n0(int warp) { return 16 * warp; }


// ------------------------------------------------------------------------------------------------
// The channel-halves PREP (prep/halves_chunk.cuh): three CTAs per SM, so at most
// 76,800 bytes per CTA (228 KB per SM, 1 KB reserved per CTA). k and G are loaded, and phases 2
// and 3 run, one half of the channels at a time (d = 64 h .. 64 h + 63): the grams accumulate
// over both halves in registers, beta k Gamma (W's right-hand side) is built with q' and kg in
// phase 2, so k and G die with the grams; v is loaded after them, while the inverse runs. q stays
// whole: its row factors (the fused norm) need whole rows before phase 2.
//   Q    [64][136] bf16 q; A_kk after the grams, T's copies after the inverse (as above)
//   KT   [64][136] fp16 beta k Gamma, written half by half in phase 2, read in phase 5
//   F    phases 1 - 3: the half's k [64][72] bf16, G [64][72] fp32, column operands [64][72]
//        bf16; after the grams: X [64][72] fp32, then v [64][136] bf16
//   Y, beta, q and k row factors
// The raw-input kernel loads raw k whole into KT (its row norms need whole rows); phase 2 copies
// each half's raw k into the half's k region for the grams and writes beta k Gamma over it.
// Rows of 72 16-bit values (144 bytes = 36 words) or 72 floats keep the grams' fragment reads
// conflict-free, as kLdX does for X: lane (g, t) reads word 36 g + t (bf16 pairs, distinct banks
// over the warp) or 72 g + 2 t (float pairs, distinct per half warp).
namespace halves {
inline constexpr int kHalf = kHeadDim / 2;  // channels per half
inline constexpr int kLdKH = 72;      // bf16 elements per row of the k and column-operand halves
inline constexpr int kLdGH = 72;      // floats per row of G's half
inline constexpr int kSKT = kSQ + kChunk * kLdH * 2;      // 17,408
inline constexpr int kSF = kSKT + kChunk * kLdH * 2;      // 34,816
inline constexpr int kSK = kSF;                           // [64][72] bf16 k, one half
inline constexpr int kSG = kSK + kChunk * kLdKH * 2;      // [64][72] fp32 G, one half
inline constexpr int kSCol = kSG + kChunk * kLdGH * 4;    // [64][72] bf16 column operands
inline constexpr int kSFEnd = kSCol + kChunk * kLdKH * 2;  // 71,680
inline constexpr int kSX = kSF;                           // after the grams
inline constexpr int kSV = kSX + kChunk * kLdX * 4;       // after the grams
inline constexpr int kSY = kSFEnd;
inline constexpr int kSBeta = kSY + 3 * 16 * 16 * 4;
inline constexpr int kSQScale = kSBeta + kChunk * 4;
inline constexpr int kSKScale = kSQScale + kChunk * 4;  // k row factors (the raw-input kernel)
inline constexpr int kSBytes = kSKScale + kChunk * 4;   // 75,520
static_assert(kSV + kChunk * kLdH * 2 <= kSFEnd, "v fits beside X in the halves' region");
static_assert(3 * (kSBytes + 1024) <= 228 * 1024, "three CTAs per SM");
using Tail = TailRegions<kSX, kSY, kSBeta, kSKT, kSV>;
// Element (row, col) of the half-width regions; col is the channel within the half.
KDA_HD constexpr int sk(int row, int col) { return kSK + 2 * (row * kLdKH + col); }
KDA_HD constexpr int sg(int row, int col) { return kSG + 4 * (row * kLdGH + col); }
KDA_HD constexpr int scol(int row, int col) { return kSCol + 2 * (row * kLdKH + col); }
KDA_HD constexpr int skt(int row, int col) { return s16(kSKT, row, col); }  // col: 0 .. 127
}  // namespace halves

}  // namespace kda::detail::prep
