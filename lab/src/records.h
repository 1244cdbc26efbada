// The lab's two records (the library's is lib/kda/src/record.h): v0's fp32 record and the bf16
// v1 record that v1_mma, v2_mma and v2t_mma pass from PREP to SCAN. One record per (head, chunk
// slot), the library's slot map (record.h chunk_capacity). Host and device, no CUDA includes.
#pragma once

#include <cstdint>

#include "device/fragments.h"  // lib/kda/src
#include "record.h"            // lib/kda/src

namespace kda::lab {

// ---- v0 (v0_fp32): fp32 factors, rows >= n zero. Element offsets:
//   W   [64][128]  = T (beta k Gamma)        U  [64][128] = T (beta v)
//   QP  [64][128]  = scale q_hat Gamma       KG [64][128] = k 2^(G_{n-1} - G)
//   AQK [64][64]   = scale-folded inclusive lower gram     A [128] = 2^(G_{n-1})
using RecordT = float;
inline constexpr int64_t kRec0W = 0;
inline constexpr int64_t kRec0U = kRec0W + int64_t{kChunk} * kHeadDim;
inline constexpr int64_t kRec0QP = kRec0U + int64_t{kChunk} * kHeadDim;
inline constexpr int64_t kRec0KG = kRec0QP + int64_t{kChunk} * kHeadDim;
inline constexpr int64_t kRec0AQK = kRec0KG + int64_t{kChunk} * kHeadDim;
inline constexpr int64_t kRec0A = kRec0AQK + int64_t{kChunk} * kChunk;
inline constexpr int64_t kRec0Elems = kRec0A + kHeadDim;
inline constexpr int64_t kRecord0Bytes = kRec0Elems * static_cast<int64_t>(sizeof(RecordT));
static_assert(kRecord0Bytes == 147968, "v0 record: 4 x 32 KB + 16 KB + 512 B");
static_assert(kRecord0Bytes % 256 == 0, "records keep the workspace's 256-byte alignment");

// ---- v1 (v1_mma, v2_mma, v2t_mma): bf16 factors, already in the byte image the tensor-core SCANs
// want in shared memory (XOR-swizzled 16-byte groups, device/fragments.h), so a SCAN copies it
// with plain 16-byte cp.async and no re-layout. The library's record is this one in fp16 with U
// scaled per column, its bounds appended and W, q', kg split into key halves (record.h). Byte
// offsets; rows >= n are zero.
//   W   [64][128] bf16 swz128     QP [64][128] bf16 swz128     KG [64][128] bf16 swz128
//   AQK [64][64]  bf16 swz64      U  [4 slices][64][32] bf16 swz32 (slice j = columns 32j..32j+31)
//   A   [128] fp32
// W, QP, KG, AQK are contiguous so the v1 SCAN moves W+QP and KG+AQK as two contiguous blocks.
inline constexpr int64_t kRec1W = 0;
inline constexpr int64_t kRec1QP = kRec1W + int64_t{kChunk} * kHeadDim * 2;
inline constexpr int64_t kRec1KG = kRec1QP + int64_t{kChunk} * kHeadDim * 2;
inline constexpr int64_t kRec1AQK = kRec1KG + int64_t{kChunk} * kHeadDim * 2;
inline constexpr int64_t kRec1U = kRec1AQK + int64_t{kChunk} * kChunk * 2;
inline constexpr int64_t kRec1USlice = detail::kRecUSlice;  // bytes per slice
inline constexpr int64_t kRec1A = kRec1U + int64_t{kChunk} * kHeadDim * 2;
inline constexpr int64_t kRecord1Bytes = kRec1A + int64_t{kHeadDim} * 4;
static_assert(kRecord1Bytes == 74240, "v1 record: 4 x 16 KB + 8 KB + 512 B");
static_assert(kRecord1Bytes % 256 == 0, "records keep the workspace's 256-byte alignment");
static_assert(kRec1AQK == detail::kRecAQK && kRec1U == detail::kRecU && kRec1A == detail::kRecA &&
                  kRecord1Bytes == detail::kRecUBound,
              "the library's record is the v1 record's layout plus the U bounds");

// Where PREP puts element (i, d) of each factor (byte offsets inside one v1 record).
namespace v1 {
using detail::mma::swz128;
using detail::mma::swz32;
using detail::mma::swz64;
KDA_HD constexpr int64_t rec1_w(int i, int d) { return kRec1W + 2 * swz128(i, d); }
KDA_HD constexpr int64_t rec1_qp(int i, int d) { return kRec1QP + 2 * swz128(i, d); }
KDA_HD constexpr int64_t rec1_kg(int i, int d) { return kRec1KG + 2 * swz128(i, d); }
KDA_HD constexpr int64_t rec1_aqk(int i, int j) { return kRec1AQK + 2 * swz64(i, j); }
KDA_HD constexpr int64_t rec1_u(int i, int d) {
  return kRec1U + (d / detail::kUSliceColumns) * kRec1USlice +
         2 * swz32(i, d % detail::kUSliceColumns);
}
KDA_HD constexpr int64_t rec1_a(int d) { return kRec1A + 4 * d; }
}  // namespace v1

}  // namespace kda::lab
