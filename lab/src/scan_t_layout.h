// Shared-memory plan and ldmatrix maps of the lab's transposed-state SCAN on mma.sync (v2t_mma,
// and v2_mma above its chain count threshold; scan_t.cu); its register, U, decay and O-tile maps
// are the library SCAN's (lib/kda/src/scan/transposed.h). Host and device, no CUDA includes: the
// CPU test tests/lab/test_scan_t_layout.cpp emulates the kernel's ldmatrix / stmatrix / mma.sync
// traffic on top of exactly these functions and checks it against plain matrix products of the
// chunk recurrence. It reads the v1 record (records.h) that the v2 PREP writes.
#pragma once

#include <cstdint>

#include "device/fragments.h"  // lib/kda/src
#include "records.h"
#include "scan/transposed.h"   // lib/kda/src

namespace kda::lab::tscan {

using detail::kThreads;
using detail::kWarps;
using detail::mma::swz128;
using detail::mma::swz64;
using detail::scan::a_half;
using detail::scan::a_tile;
using detail::scan::decay;
using detail::scan::o_row_in_tile;
using detail::scan::o_trans_in_tile;
using detail::scan::out_token;
using detail::scan::out_value;
using detail::scan::state_key;
using detail::scan::state_value;
using detail::scan::u_trans;

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
// ldmatrix.x4 row addresses (smem bytes, relative to the record buffer). Matrix i = lane >> 3,
// row r = lane & 7 of that matrix.
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
// Phase B1, B operand of A_qk^T (k = token j, n = token t): A_qk is stored [t][j] = [n][k]: plain
// ldmatrix, the same register order as a_w (token tiles 2 p, 2 p + 1 at k-step kt).
KDA_HD constexpr int b1_aqk(int lane, int p, int kt) {
  const int i = lane >> 3;
  return static_cast<int>(kRec1AQK) +
         2 * swz64(16 * p + 8 * (i >> 1) + (lane & 7), 16 * kt + 8 * (i & 1));
}
// Phase B2, B operand kg (k = token, n = key): kg is stored [token][key] = [k][n]: ldmatrix.trans
// (device/fragments.h ldsm_b_kmajor). One x4 = key tiles 2 q, 2 q + 1 at k-step kt: register 0 = b0
// (tokens lo) of tile 2 q, 1 = b1 of tile 2 q, 2 = b0 of tile 2 q + 1, 3 = b1 of tile 2 q + 1.
KDA_HD constexpr int b2_kg(int lane, int q, int kt) {
  const detail::mma::RowCol rc = detail::mma::ldsm_b_kmajor(lane, 16 * kt, 16 * q);
  return static_cast<int>(kRec1KG) + 2 * swz128(rc.row, rc.col);
}

}  // namespace kda::lab::tscan
