// Index maps of the transposed-state SCAN (ForwardVariant::v2t_mma, scan_t.cu): one CTA per
// (sequence, head) holding the whole state transposed, S^T [128 values][128 keys], in registers.
// Host and device, no CUDA includes: the CPU test tests/kda/test_scan_t_layout.cpp emulates the
// kernel's ldmatrix / stmatrix / mma.sync traffic on top of exactly these functions and checks it
// against plain matrix products of the chunk recurrence.
//
// It reads the v1 record (layout.h kRec1*, mma_layout.h rec1_*) that the v2 PREP writes. Per
// 64-token chunk, with warp w owning the value rows v0 = 16 w .. v0 + 15 of S^T (docs/design.md,
// "Worked plan"):
//   A   acc = S^T W^T, P^T = S^T q'^T       (16x128 . 128x64 per warp; A = S^T from the state
//                                             accumulators: the C fragments of key tiles 2 ks,
//                                             2 ks + 1 are the A fragment of k-step ks)
//       V_new^T = U^T - acc, rounded once to bf16 (the A operand of B1 and B2, again by C -> A)
//   B1  O^T = P^T + V_new^T A_qk^T            (causal token blocks only) -> stmatrix.trans -> O
//   B2  S^T <- S^T diag(a) + V_new^T kg       (16x64 . 64x128, into the state accumulators)
// mma.sync m16n8k16 facts are those of mma_layout.h (g = lane >> 2, t = lane & 3).
#pragma once

#include <cstdint>

#include "layout.h"
#include "mma_layout.h"

namespace kda::detail::tscan {

using v1::c_col;
using v1::c_row;
using v1::swz128;
using v1::swz32;
using v1::swz64;

inline constexpr int kWarps = 8;
inline constexpr int kThreads = 32 * kWarps;
static_assert(16 * kWarps == kHeadDim, "warp w owns value rows 16 w .. 16 w + 15");

// ------------------------------------------------------------------------------------------------
// Shared memory (bytes): two record images (chunk c in buffer c % 2, the next chunk's copy in
// flight in the other), then the output tile O [64 tokens][128 values] bf16 swz128.
inline constexpr int kBuffer = static_cast<int>(kRecord1Bytes);        // 74,240
inline constexpr int kSO = 2 * kBuffer;                                // 148,480
inline constexpr int kSBytes = kSO + kChunk * kHeadDim * 2;            // 164,864
static_assert(kSBytes <= 227 * 1024, "one CTA per SM");
inline constexpr int kCopyUnits = kBuffer / 16;                         // 4640 16-byte copies
KDA_HD constexpr int buffer(int chunk) { return (chunk & 1) * kBuffer; }

// ------------------------------------------------------------------------------------------------
// Register <-> element maps. Accumulator register reg (0..3) of lane holds row c_row(lane, reg),
// column c_col(lane, reg) of its 16x8 tile.
//   State S^T, key tile j (0..15): value row, key column.
KDA_HD constexpr int state_value(int warp, int lane, int reg) {
  return 16 * warp + c_row(lane, reg);
}
KDA_HD constexpr int state_key(int lane, int j, int reg) { return 8 * j + c_col(lane, reg); }
//   V_new^T, P^T, O^T, token tile nt (0..7): value row, token column.
KDA_HD constexpr int out_value(int warp, int lane, int reg) {
  return 16 * warp + c_row(lane, reg);
}
KDA_HD constexpr int out_token(int lane, int nt, int reg) { return 8 * nt + c_col(lane, reg); }

// C -> A: the A fragment of the 16x16 block (k columns 16 kb .. +15) is made of the C fragments
// of the two 8-column tiles 2 kb and 2 kb + 1: A register q (0..3) = the bf16 pair of tile
// 2 kb + a_tile(q), registers (2 a_half(q), 2 a_half(q) + 1).
//   (a0 = row g, cols 2t..; a1 = row g + 8; a2 = row g, cols 8 + 2t..; a3 = row g + 8,
//   cols 8 + 2t..)
KDA_HD constexpr int a_tile(int q) { return q >> 1; }
KDA_HD constexpr int a_half(int q) { return q & 1; }

// ------------------------------------------------------------------------------------------------
// ldmatrix.x4 row addresses (smem bytes, relative to the record buffer unless noted). Matrix
// i = lane >> 3, row r = lane & 7 of that matrix.
//
// Phase A, B operand of W^T (k = key, n = token): W is stored [token][key], i.e. [n][k], so plain
// ldmatrix of W rows gives B fragments (lane: token g, keys 2t, 2t + 1). One x4 = token tiles
// 2 p, 2 p + 1 at k-step ks: register 0 = b0 (keys lo) of tile 2 p, 1 = b1 (keys hi) of tile 2 p,
// 2 = b0 of tile 2 p + 1, 3 = b1 of tile 2 p + 1.
KDA_HD constexpr int a_w(int lane, int p, int ks) {
  const int i = lane >> 3;
  return static_cast<int>(kRec1W) +
         2 * swz128(16 * p + 8 * (i >> 1) + (lane & 7), 16 * ks + 8 * (i & 1));
}
KDA_HD constexpr int a_qp(int lane, int p, int ks) {
  const int i = lane >> 3;
  return static_cast<int>(kRec1QP) +
         2 * swz128(16 * p + 8 * (i >> 1) + (lane & 7), 16 * ks + 8 * (i & 1));
}
// U^T in the accumulator layout (value rows, token columns) from U stored [token][value] by
// ldmatrix.trans (lane: tokens 2t, 2t + 1 of value g). One x4 = token tiles 2 p, 2 p + 1 of the
// warp's 16 values: register i = tile 2 p + (i >> 1), values half (i & 1) (rows g or g + 8), i.e.
// the pair (reg 2 half, 2 half + 1) of that tile. The record stores U in 32-column slices (swz32):
// the warp's values are columns 16 (warp & 1) .. + 15 of slice warp / 2.
KDA_HD constexpr int u_trans(int warp, int lane, int p) {
  const int i = lane >> 3;
  return static_cast<int>(kRec1U + (warp >> 1) * kRec1USlice) +
         2 * swz32(16 * p + 8 * (i >> 1) + (lane & 7), 16 * (warp & 1) + 8 * (i & 1));
}
// Phase B1, B operand of A_qk^T (k = token j, n = token t): A_qk is stored [t][j] = [n][k]: plain
// ldmatrix, the same register order as a_w (token tiles 2 p, 2 p + 1 at k-step kt).
KDA_HD constexpr int b1_aqk(int lane, int p, int kt) {
  const int i = lane >> 3;
  return static_cast<int>(kRec1AQK) +
         2 * swz64(16 * p + 8 * (i >> 1) + (lane & 7), 16 * kt + 8 * (i & 1));
}
// Phase B2, B operand kg (k = token, n = key): kg is stored [token][key] = [k][n]: ldmatrix.trans
// (mma_layout.h ldsm_b_kmajor). One x4 = key tiles 2 q, 2 q + 1 at k-step kt: register 0 = b0
// (tokens lo) of tile 2 q, 1 = b1 of tile 2 q, 2 = b0 of tile 2 q + 1, 3 = b1 of tile 2 q + 1.
KDA_HD constexpr int b2_kg(int lane, int q, int kt) {
  const v1::RowCol rc = v1::ldsm_b_kmajor(lane, 16 * kt, 16 * q);
  return static_cast<int>(kRec1KG) + 2 * swz128(rc.row, rc.col);
}
// The decay a[key] (fp32) of the pair (reg 2 half + e) of key tile j: key state_key(lane, j, e).
KDA_HD constexpr int decay(int key) { return static_cast<int>(kRec1A) + 4 * key; }

// stmatrix.x4.trans of O^T (absolute smem bytes): the inverse of ldmatrix.trans, lane's pair
// (value g [+8], tokens 2t, 2t + 1) goes to O[token][value]. One x4 = token tiles 2 p, 2 p + 1 of
// the warp's 16 values, register i = tile 2 p + (i >> 1), values half (i & 1); lanes 8 i .. 8 i + 7
// address the 8 token rows of matrix i.
// Bytes from the O tile's base (scan_t's tile at kSO, scan_w.h's two tiles).
KDA_HD constexpr int o_trans_in_tile(int warp, int lane, int p) {
  const int i = lane >> 3;
  return 2 * swz128(16 * p + 8 * (i >> 1) + (lane & 7), 16 * warp + 8 * (i & 1));
}
// O row segment u (0..15: 8 values, 16 bytes) of token row `token`, from the O tile's base.
KDA_HD constexpr int o_row_in_tile(int token, int u) { return 2 * swz128(token, 8 * u); }

}  // namespace kda::detail::tscan
