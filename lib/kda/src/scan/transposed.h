// Register maps of the transposed-state SCANs: one CTA of 8 warps per (sequence, head) holding the
// whole state transposed, S^T [128 values][128 keys], in fp32 MMA accumulators, warp w owning the
// value rows 16 w .. 16 w + 15. The library's SCAN (scan.cu, wgmma: warpgroup g's accumulators
// give each of its warps exactly these mma.sync fragments) and the lab's v2t SCAN (mma.sync)
// share them, and the U, decay and O-tile maps below. Host and device, no CUDA includes: the CPU
// tests tests/kda/test_scan_layout.cpp and tests/lab/test_scan_t_layout.cpp emulate the kernels'
// traffic on top of exactly these functions.
//
// Per 64-token chunk (docs/design.md, "Worked plan"):
//   A   acc = S^T W^T, P^T = S^T q'^T       (16x128 . 128x64 per warp; A = S^T from the state
//                                             accumulators: the C fragments of key tiles 2 ks,
//                                             2 ks + 1 are the A fragment of k-step ks)
//       V_new^T = U^T - acc, rounded once to 16 bits (the A operand of B1 and B2, again by C -> A)
//   B1  O^T = P^T + V_new^T A_qk^T            (causal token blocks only) -> stmatrix.trans -> O
//   B2  S^T <- S^T diag(a) + V_new^T kg       (16x64 . 64x128, into the state accumulators)
// mma.sync m16n8k16 facts are those of device/fragments.h (g = lane >> 2, t = lane & 3).
#pragma once

#include <cstdint>

#include "config.h"
#include "device/fragments.h"
#include "record.h"

namespace kda::detail::scan {

using mma::c_col;
using mma::c_row;
using mma::swz128;
using mma::swz32;

static_assert(16 * kWarps == kHeadDim, "warp w owns value rows 16 w .. 16 w + 15");

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
// of the two 8-column tiles 2 kb and 2 kb + 1: A register q (0..3) = the 16-bit pair of tile
// 2 kb + a_tile(q), registers (2 a_half(q), 2 a_half(q) + 1).
//   (a0 = row g, cols 2t..; a1 = row g + 8; a2 = row g, cols 8 + 2t..; a3 = row g + 8,
//   cols 8 + 2t..)
KDA_HD constexpr int a_tile(int q) { return q >> 1; }
KDA_HD constexpr int a_half(int q) { return q & 1; }

// ------------------------------------------------------------------------------------------------
// Record and O-tile addresses (smem bytes, relative to the record buffer unless noted).
// U^T in the accumulator layout (value rows, token columns) from U stored [token][value] by
// ldmatrix.trans (lane: tokens 2t, 2t + 1 of value g), at the record buffer's U (the same offsets
// in the library's record and the lab's v1 record). One x4 = token tiles 2 p, 2 p + 1 of the warp's
// 16 values: register i = tile 2 p + (i >> 1), values half (i & 1) (rows g or g + 8), i.e. the pair
// (reg 2 half, 2 half + 1) of that tile. The record stores U in 32-column slices (swz32): the
// warp's values are columns 16 (warp & 1) .. + 15 of slice warp / 2.
KDA_HD constexpr int u_trans(int warp, int lane, int p) {
  const int i = lane >> 3;
  return static_cast<int>(kRecU + (warp >> 1) * kRecUSlice) +
         2 * swz32(16 * p + 8 * (i >> 1) + (lane & 7), 16 * (warp & 1) + 8 * (i & 1));
}
// The decay a[key] (fp32) of the pair (reg 2 half + e) of key tile j: key state_key(lane, j, e).
KDA_HD constexpr int decay(int key) { return static_cast<int>(kRecA) + 4 * key; }

// stmatrix.x4.trans of O^T (absolute smem bytes): the inverse of ldmatrix.trans, lane's pair
// (value g [+8], tokens 2t, 2t + 1) goes to O[token][value]. One x4 = token tiles 2 p, 2 p + 1 of
// the warp's 16 values, register i = tile 2 p + (i >> 1), values half (i & 1); lanes 8 i .. 8 i + 7
// address the 8 token rows of matrix i.
// Bytes from the O tile's base (scan_layout.h's two tiles, the lab's v2t tile).
KDA_HD constexpr int o_trans_in_tile(int warp, int lane, int p) {
  const int i = lane >> 3;
  return 2 * swz128(16 * p + 8 * (i >> 1) + (lane & 7), 16 * warp + 8 * (i & 1));
}
// O row segment u (0..15: 8 values, 16 bytes) of token row `token`, from the O tile's base.
KDA_HD constexpr int o_row_in_tile(int token, int u) { return 2 * swz128(token, 8 * u); }

}  // namespace kda::detail::scan
