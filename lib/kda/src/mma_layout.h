// Shared-memory layouts and fragment index maps of the v1 (tensor-core) forward: the single source
// of every address the v1 PREP writes and the v1 SCAN reads. Host and device: the CPU test
// tests/kda/test_mma_layout.cpp emulates ldmatrix and mma.sync (from the PTX ISA definitions) on
// top of exactly these functions and checks the results against plain matrix products. No CUDA
// includes.
//
// PTX facts used (m16n8k16, bf16 in, fp32 accumulate; g = lane >> 2, t = lane & 3):
//   A (16x16, row-major) regs: a0 = (row g,   cols 2t, 2t+1)   a1 = (row g+8, cols 2t, 2t+1)
//                              a2 = (row g,   cols 2t+8, 2t+9) a3 = (row g+8, cols 2t+8, 2t+9)
//   B (16x8, "col")      regs: b0 = (k 2t, 2t+1; n g)          b1 = (k 2t+8, 2t+9; n g)
//   C/D (16x8, fp32)         : c0, c1 = (row g, cols 2t, 2t+1) c2, c3 = (row g+8, cols 2t, 2t+1)
//   Each 32-bit register holds two bf16, the lower column (or k) index in the low half.
//   ldmatrix.m8n8.x4.b16: lanes 8i..8i+7 give the addresses of the 8 rows (16 bytes each) of
//   matrix i, which lands in register i. Without .trans lane l receives (row l>>2, cols 2(l&3),
//   2(l&3)+1) of each matrix; with .trans it receives (rows 2(l&3), 2(l&3)+1; col l>>2), i.e. the
//   same position of the transposed matrix.
#pragma once

#include <cstdint>

#include "layout.h"

#if defined(__CUDACC__)
#define KDA_HD __host__ __device__ __forceinline__
#else
#define KDA_HD inline
#endif

namespace kda::detail::v1 {

// ------------------------------------------------------------------------------------------------
// Swizzled row-major bf16 tiles (element offsets). A row is split into 16-byte groups of 8
// elements; the group index is XORed with a function of the row so that the 8 rows any ldmatrix
// phase (8 lanes) reads -- 8 consecutive rows, the same logical group -- land in 8 different
// 16-byte bank groups (byte address / 16 mod 8), and so do C-fragment accesses. The tiles stay
// dense (the record in global memory is this exact image, no padding bytes to move).
//
// 128 columns (256-byte rows, W / q' / kg): group' = group ^ (row & 7) on the low 3 bits of the
//   16 groups. Bank group of (row, group) = group' mod 8 (256 B = 2 x 128 B): distinct for 8
//   consecutive rows.
KDA_HD constexpr int swz128(int row, int col) {
  const int group = col >> 3;
  return row * 128 + (((group ^ row) & 7) | (group & 8)) * 8 + (col & 7);
}
// 64 columns (128-byte rows, A_qk): group' = group ^ (row & 7); bank group = group'.
KDA_HD constexpr int swz64(int row, int col) {
  return row * 64 + (((col >> 3) ^ row) & 7) * 8 + (col & 7);
}
// 32 columns (64-byte rows: U slice, V_new, bf16 state copy): group' = group ^ ((row >> 1) & 3).
//   Bank group = 4 (row & 1) + group': distinct over 8 consecutive rows starting at a multiple of
//   8, because (row & 1, (row >> 1) & 3) takes all 8 values there. A C-fragment access (rows
//   r0 + g, one 4-byte word per t) then hits 32 different banks.
KDA_HD constexpr int swz32(int row, int col) {
  return row * 32 + (((col >> 3) ^ (row >> 1)) & 3) * 8 + (col & 7);
}

// ------------------------------------------------------------------------------------------------
// ldmatrix.x4 address maps: which (stored row, stored column) the 16-byte row segment of `lane`
// starts at. i = lane >> 3 (matrix = destination register), r = lane & 7 (row of that matrix).
struct RowCol {
  int row;
  int col;
};

// A fragment of the 16x16 tile (m0.., k0..) of a row-major [m][k] matrix, no .trans:
//   reg 0 = a0: rows m0+0..7,  cols k0+0..7      reg 1 = a1: rows m0+8..15, cols k0+0..7
//   reg 2 = a2: rows m0+0..7,  cols k0+8..15     reg 3 = a3: rows m0+8..15, cols k0+8..15
// so matrix i covers rows m0 + 8 (i & 1) + r, columns k0 + 8 (i >> 1): lane (g, t) receives
// (row g [+8], cols 2t, 2t+1 [+8]) = exactly a0..a3.
KDA_HD constexpr RowCol ldsm_a_rowmajor(int lane, int m0, int k0) {
  const int i = lane >> 3;
  return {m0 + 8 * (i & 1) + (lane & 7), k0 + 8 * (i >> 1)};
}

// A fragment of the 16x16 tile (m0.., k0..) of A when A is stored transposed, [k][m] row-major
// (A[m][k] = stored[k][m]), with .trans. Matrix i must be the stored 8x8 block whose transpose is
// a_i: a0 = A rows m0+0..7 x cols k0+0..7 = stored rows k0+0..7, stored cols m0+0..7; a1 (A rows
// +8) = stored cols m0+8..15; a2 (A cols +8) = stored rows k0+8..15. So stored row =
// k0 + 8 (i >> 1) + r, stored column = m0 + 8 (i & 1). With .trans lane (g, t) receives stored
// (rows 2t, 2t+1; col g) = A (row g; cols 2t, 2t+1) of each block.
KDA_HD constexpr RowCol ldsm_a_colmajor(int lane, int m0, int k0) {
  const int i = lane >> 3;
  return {k0 + 8 * (i >> 1) + (lane & 7), m0 + 8 * (i & 1)};
}

// B fragments of two n8 tiles (n0.., n0+8..) at k-step k0 of B stored [k][n] row-major, with
// .trans: b0 of tile n0 = stored rows k0+0..7, cols n0+0..7 (lane (g, t) receives stored rows 2t,
// 2t+1, col g = B (k 2t, 2t+1; n g)); b1 = rows k0+8..15. Register order: reg 0 = b0(n0),
// reg 1 = b1(n0), reg 2 = b0(n0+8), reg 3 = b1(n0+8): stored row = k0 + 8 (i & 1) + r,
// stored column = n0 + 8 (i >> 1).
KDA_HD constexpr RowCol ldsm_b_kmajor(int lane, int k0, int n0) {
  const int i = lane >> 3;
  return {k0 + 8 * (i & 1) + (lane & 7), n0 + 8 * (i >> 1)};
}

// C fragment: row / column (inside the 16x8 tile) of accumulator register `reg` of `lane`.
KDA_HD constexpr int c_row(int lane, int reg) { return (lane >> 2) + 8 * (reg >> 1); }
KDA_HD constexpr int c_col(int lane, int reg) { return 2 * (lane & 3) + (reg & 1); }

// ------------------------------------------------------------------------------------------------
// v1 record writers (PREP): byte offsets inside one record (layout.h kRec1*).
KDA_HD constexpr int64_t rec1_w(int i, int d) { return kRec1W + 2 * swz128(i, d); }
KDA_HD constexpr int64_t rec1_qp(int i, int d) { return kRec1QP + 2 * swz128(i, d); }
KDA_HD constexpr int64_t rec1_kg(int i, int d) { return kRec1KG + 2 * swz128(i, d); }
KDA_HD constexpr int64_t rec1_aqk(int i, int j) { return kRec1AQK + 2 * swz64(i, j); }
KDA_HD constexpr int64_t rec1_u(int i, int d) {
  return kRec1U + (d / kScanSliceColumns) * kRec1USlice + 2 * swz32(i, d % kScanSliceColumns);
}
KDA_HD constexpr int64_t rec1_a(int d) { return kRec1A + 4 * d; }
// v2w record (layout.h kRecord2Bytes): the parts above in fp16, then U's column bounds, with W,
// q' and kg stored as the wgmma SCAN's shared-memory image (scan_w.h) so that one bulk copy moves
// the record: each [64][128] tile's 256-byte rows split into two key halves, tile half h a
// [64 rows][128 B] block at tile + 8 KB h, 16-byte unit positions (already swizzled by row & 7)
// kept. rec2_split maps a v1 byte offset below kRec1AQK there; A_qk onwards keep their offsets.
KDA_HD constexpr int64_t rec2_split(int64_t offset) {
  const int64_t tile = offset >> 14, row = (offset >> 8) & 63, unit = (offset >> 4) & 15;
  return (tile << 14) + ((unit >> 3) << 13) + (row << 7) + ((unit & 7) << 4) + (offset & 15);
}
// The same in closed form (what PREP computes per store; tests/kda/test_scan_w_layout.cpp checks
// rec2_tile against rec2_split of the v1 offset for every element): element (i, d) of the tile at
// `base` is in key half d / 64, row i, 16-byte unit ((d / 8) ^ i) % 8 of that half-row.
KDA_HD constexpr int64_t rec2_tile(int64_t base, int i, int d) {
  return base + ((d >> 6) << 13) + (i << 7) + ((((d >> 3) ^ i) & 7) << 4) + 2 * (d & 7);
}
KDA_HD constexpr int64_t rec2_w(int i, int d) { return rec2_tile(kRec1W, i, d); }
KDA_HD constexpr int64_t rec2_qp(int i, int d) { return rec2_tile(kRec1QP, i, d); }
KDA_HD constexpr int64_t rec2_kg(int i, int d) { return rec2_tile(kRec1KG, i, d); }
KDA_HD constexpr int64_t rec2_u_bound(int d) { return kRec2UBound + 4 * d; }

// ------------------------------------------------------------------------------------------------
// v1 SCAN shared memory (bytes). [0, kS1U) is the record's own image of W, q', kg, A_qk; then the
// CTA's U slice, a, the bf16 state copy and V_new.
inline constexpr int kS1W = 0;                    // [64][128] bf16 swz128
inline constexpr int kS1QP = 16384;               // [64][128] bf16 swz128
inline constexpr int kS1KG = 32768;               // [64][128] bf16 swz128
inline constexpr int kS1AQK = 49152;              // [64][64]  bf16 swz64
inline constexpr int kS1U = 57344;                // [64][32]  bf16 swz32 (this CTA's slice)
inline constexpr int kS1A = kS1U + 4096;          // [128]     fp32
inline constexpr int kS1SB = kS1A + 512;          // [128][32] bf16 swz32: S (row = key), bf16
inline constexpr int kS1VN = kS1SB + 8192;        // [64][32]  bf16 swz32: V_new (row = token)
inline constexpr int kS1Bytes = kS1VN + 4096;     // 74,240
static_assert(kS1W == kRec1W && kS1QP == kRec1QP && kS1KG == kRec1KG && kS1AQK == kRec1AQK,
              "SCAN copies the W..A_qk part of the record verbatim");
static_assert(kRec1USlice == 4096, "one U slice = [64][32] bf16");

// Copy plan (16-byte cp.async units). Group "WQU" (what phase A needs): record [kRec1W, kRec1KG)
// -> smem kS1W, and the CTA's U slice -> kS1U. Group "KGA" (what phase B needs): record
// [kRec1KG, kRec1U) -> smem kS1KG, and a -> kS1A.
inline constexpr int kCopyWQ = static_cast<int>((kRec1KG - kRec1W) / 16);  // 2048
inline constexpr int kCopyU = static_cast<int>(kRec1USlice / 16);         // 256
inline constexpr int kCopyKA = static_cast<int>((kRec1U - kRec1KG) / 16);  // 1536
inline constexpr int kCopyA = 128 * 4 / 16;                                // 32

// ------------------------------------------------------------------------------------------------
// Work split of the v1 SCAN (8 warps, CTA = 64 tokens x 32 value columns x 128 keys).
//   Phases A and B1 (outputs V_new = U - W S, P = q' S, O = P + A_qk V_new): warp w owns the
//   token rows 16 (w & 3) .. +15 and the value columns 16 (w >> 2) .. +15 (two n8 tiles).
//   Phase B2 (state S = diag(a) S + kg^T V_new, fp32 in registers): warp w owns the key rows
//   16 w .. +15 and all 32 columns (four n8 tiles).
inline constexpr int kWarps = 8;
KDA_HD constexpr int out_m0(int warp) { return 16 * (warp & 3); }
KDA_HD constexpr int out_n0(int warp) { return 16 * (warp >> 2); }
KDA_HD constexpr int state_m0(int warp) { return 16 * warp; }

// Phase A, k-step ks (keys 16 ks .. +15), ldmatrix row addresses (smem bytes):
//   W / q' A fragments (non-trans, [token][key] row-major), S B fragments of the warp's two n
//   tiles (.trans, [key][col] row-major).
KDA_HD constexpr int pa_w(int warp, int lane, int ks) {
  const RowCol rc = ldsm_a_rowmajor(lane, out_m0(warp), 16 * ks);
  return kS1W + 2 * swz128(rc.row, rc.col);
}
KDA_HD constexpr int pa_qp(int warp, int lane, int ks) {
  const RowCol rc = ldsm_a_rowmajor(lane, out_m0(warp), 16 * ks);
  return kS1QP + 2 * swz128(rc.row, rc.col);
}
KDA_HD constexpr int pa_s(int warp, int lane, int ks) {
  const RowCol rc = ldsm_b_kmajor(lane, 16 * ks, out_n0(warp));
  return kS1SB + 2 * swz32(rc.row, rc.col);
}

// Output-tile elements of phases A/B1: token row and slice column of the element pair
// (regs 2 half, 2 half + 1) of n tile j (0, 1) -- columns col, col + 1.
KDA_HD constexpr int out_row(int warp, int lane, int half) {
  return out_m0(warp) + c_row(lane, 2 * half);
}
KDA_HD constexpr int out_col(int warp, int lane, int j) {
  return out_n0(warp) + 8 * j + c_col(lane, 0);
}
// The pair's 4-byte word in the U slice and in V_new.
KDA_HD constexpr int u_pair(int warp, int lane, int j, int half) {
  return kS1U + 2 * swz32(out_row(warp, lane, half), out_col(warp, lane, j));
}
KDA_HD constexpr int vn_pair(int warp, int lane, int j, int half) {
  return kS1VN + 2 * swz32(out_row(warp, lane, half), out_col(warp, lane, j));
}

// Phase B1, k-step ks (tokens 16 ks .. +15; only ks <= w & 3, A_qk is lower triangular):
//   A_qk A fragment (non-trans, [token][token] row-major), V_new B fragments (.trans,
//   [token][col] row-major) of the warp's two n tiles.
KDA_HD constexpr int b1_aqk(int warp, int lane, int ks) {
  const RowCol rc = ldsm_a_rowmajor(lane, out_m0(warp), 16 * ks);
  return kS1AQK + 2 * swz64(rc.row, rc.col);
}
KDA_HD constexpr int b1_vn(int warp, int lane, int ks) {
  const RowCol rc = ldsm_b_kmajor(lane, 16 * ks, out_n0(warp));
  return kS1VN + 2 * swz32(rc.row, rc.col);
}

// Phase B2, k-step ks (tokens 16 ks .. +15): A = kg^T (A[key][token] = kg[token][key], kg stored
// [token][key] row-major, i.e. A transposed: .trans), B = V_new n tiles 2p, 2p + 1 (.trans).
KDA_HD constexpr int b2_kg(int warp, int lane, int ks) {
  const RowCol rc = ldsm_a_colmajor(lane, state_m0(warp), 16 * ks);
  return kS1KG + 2 * swz128(rc.row, rc.col);
}
KDA_HD constexpr int b2_vn(int lane, int ks, int p) {
  const RowCol rc = ldsm_b_kmajor(lane, 16 * ks, 16 * p);
  return kS1VN + 2 * swz32(rc.row, rc.col);
}

// State elements (phase B2 accumulators): key row and slice column of the pair (regs 2 half,
// 2 half + 1) of n tile j (0..3); its word in the bf16 state copy.
KDA_HD constexpr int state_row(int warp, int lane, int half) {
  return state_m0(warp) + c_row(lane, 2 * half);
}
KDA_HD constexpr int state_col(int lane, int j) { return 8 * j + c_col(lane, 0); }
KDA_HD constexpr int sb_pair(int warp, int lane, int j, int half) {
  return kS1SB + 2 * swz32(state_row(warp, lane, half), state_col(lane, j));
}

}  // namespace kda::detail::v1
