// Shared-memory plan and fragment index maps of the v1 SCAN (v1_mma, and v2_mma below its chain
// count threshold; scan_v1.cu): the single source of every address it reads, on top of the v1
// record (records.h). Host and device: the CPU test tests/lab/test_scan_v1_layout.cpp emulates
// ldmatrix and mma.sync (from the PTX ISA definitions, lib/kda/src/device/fragments.h) on top of
// exactly these functions and checks whole chunks against plain matrix products. No CUDA
// includes.
#pragma once

#include <cstdint>

#include "device/fragments.h"  // lib/kda/src
#include "records.h"

namespace kda::lab::v1 {

using detail::mma::c_col;
using detail::mma::c_row;
using detail::mma::ldsm_a_colmajor;
using detail::mma::ldsm_a_rowmajor;
using detail::mma::ldsm_b_kmajor;
using detail::mma::RowCol;
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

}  // namespace kda::lab::v1
