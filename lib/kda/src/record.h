// The forward's workspace: one record per (head, chunk slot), written by PREP and read by SCAN,
// and how chunks map to slots. Shared by the host (sizes, validation) and the kernels. Host and
// device, no CUDA includes: validate.cpp and the CPU tests use it on machines without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/fragments.h"
#include "kda/kda.h"

namespace kda::detail {

// ---- The record: one chunk's factors (kda-forward.md §2.2), fp16, rows >= n zero. Byte offsets:
//   W   [64][128]  = T (beta k Gamma)            QP [64][128] = scale q_hat Gamma
//   KG  [64][128]  = k 2^(G_{n-1} - G)           AQK [64][64] = scale-folded inclusive lower gram
//   U   [4 slices][64][32] = T (beta v), column d stored as U * 2^15 / U_BOUND[d] (slice j =
//       columns 32 j .. 32 j + 31)
//   A   [128] fp32 = 2^(G_{n-1})                 U_BOUND [128] fp32 (below)
// Every factor the SCAN multiplies is bounded (docs/precision.md: |W| <~ 1, |q'|, |A_qk| <=
// 1/sqrt(128), |kg| <= 1), so fp16's 11 significant bits hold them; U scales with v, so each
// value column d is stored relative to U_BOUND[d], a power of two > max |U[:, d]| over the chunk's
// rows (0: the column is 0), and |stored U| < 2^15 whatever the scale of v. The SCAN runs its
// products in fp16 with per-row power-of-two scales (scan/scan.cu) and undoes U's with U_BOUND.
//
// The bytes are the wgmma SCAN's shared-memory image (scan/scan_layout.h), so one bulk copy moves
// a record: each 16-bit tile is XOR-swizzled in 16-byte units (device/fragments.h), W, q' and kg
// with their 256-byte rows split into two key halves (tile half h = keys 64 h .. 64 h + 63, a
// [64 rows][128 B] block at tile + 8 KB h), so that each half is a canonical 128-byte-swizzle
// wgmma tile. A_qk ([64][64], 128-byte rows) is one as it is.
inline constexpr int64_t kRecW = 0;
inline constexpr int64_t kRecQP = kRecW + int64_t{kChunk} * kHeadDim * 2;
inline constexpr int64_t kRecKG = kRecQP + int64_t{kChunk} * kHeadDim * 2;
inline constexpr int64_t kRecAQK = kRecKG + int64_t{kChunk} * kHeadDim * 2;
inline constexpr int64_t kRecU = kRecAQK + int64_t{kChunk} * kChunk * 2;
inline constexpr int kUSliceColumns = 32;  // value columns per U slice
inline constexpr int64_t kRecUSlice = int64_t{kChunk} * kUSliceColumns * 2;  // bytes per slice
inline constexpr int64_t kRecA = kRecU + int64_t{kChunk} * kHeadDim * 2;
inline constexpr int64_t kRecUBound = kRecA + int64_t{kHeadDim} * 4;
inline constexpr int64_t kRecordBytes = kRecUBound + int64_t{kHeadDim} * 4;
static_assert(kRecordBytes == 74752, "4 x 16 KB + 8 KB + 2 x 512 B");
static_assert(kRecordBytes % 256 == 0, "records keep the workspace's 256-byte alignment");

// Where PREP puts element (i, d) of each factor. A W / q' / kg element is in key half d / 64,
// row i, 16-byte unit ((d / 8) ^ i) % 8 of that half-row (tests/kda/test_scan_layout.cpp checks
// rec_tile against rec_split of the unsplit offset for every element).
KDA_HD constexpr int64_t rec_tile(int64_t base, int i, int d) {
  return base + ((d >> 6) << 13) + (i << 7) + ((((d >> 3) ^ i) & 7) << 4) + 2 * (d & 7);
}
KDA_HD constexpr int64_t rec_w(int i, int d) { return rec_tile(kRecW, i, d); }
KDA_HD constexpr int64_t rec_qp(int i, int d) { return rec_tile(kRecQP, i, d); }
KDA_HD constexpr int64_t rec_kg(int i, int d) { return rec_tile(kRecKG, i, d); }
KDA_HD constexpr int64_t rec_aqk(int i, int j) { return kRecAQK + 2 * mma::swz64(i, j); }
KDA_HD constexpr int64_t rec_u(int i, int d) {
  return kRecU + (d / kUSliceColumns) * kRecUSlice + 2 * mma::swz32(i, d % kUSliceColumns);
}
KDA_HD constexpr int64_t rec_a(int d) { return kRecA + 4 * d; }
KDA_HD constexpr int64_t rec_u_bound(int d) { return kRecUBound + 4 * d; }
// The split, as a map from an unsplit byte offset below kRecAQK (three [64][128] 16-bit tiles
// with 256-byte swz128 rows, mma::swz128: the form the record had before the split, which the
// lab's v1 record keeps) to the record's: 16-byte unit positions (already swizzled by row & 7)
// kept, each row's units 8..15 moved to the tile's second 8 KB.
KDA_HD constexpr int64_t rec_split(int64_t offset) {
  const int64_t tile = offset >> 14, row = (offset >> 8) & 63, unit = (offset >> 4) & 15;
  return (tile << 14) + ((unit >> 3) << 13) + (row << 7) + ((unit & 7) << 4) + (offset & 15);
}

// ---- Chunk slots. Virtual chunks (kernel-design.md §7.4): sequence s owns the record slots
// [floor(cu[s]/64) + s, floor(cu[s]/64) + s + ceil(len_s/64)). The ranges are disjoint and all
// lie below floor(cu[N]/64) + N <= floor(total_tokens/64) + N, the per-head capacity.
// (Proof of disjointness: with cu[s] = 64a + r, floor((cu[s] + len)/64) + 1 >= a + ceil(len/64).)
inline int64_t chunk_capacity(int64_t total_tokens, int64_t num_seqs) {
  return total_tokens / kChunk + num_seqs;
}

}  // namespace kda::detail
