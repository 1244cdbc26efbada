// Workspace layout shared by the host (sizes, validation) and the forward kernels. No CUDA
// includes: validate.cpp uses it on machines without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kda/kda.h"

namespace kda::detail {

// Element type of the per-chunk records PREP writes and SCAN reads. fp32 in this first version;
// one alias so a later version can switch to bf16 (the sub-array sizes below keep every part
// 16-byte aligned for either type).
using RecordT = float;

inline constexpr int kScanSliceColumns = 32;  // BV: value columns per SCAN CTA (exact V split)
inline constexpr int kScanSlices = kHeadDim / kScanSliceColumns;

// One record per (head, virtual chunk): the chunk's factors (kda-forward.md §2.2), rows >= n zero.
//   W   [64][128]  = T (beta k Gamma)        U  [64][128] = T (beta v)
//   QP  [64][128]  = scale q_hat Gamma       KG [64][128] = k 2^(G_{n-1} - G)
//   AQK [64][64]   = scale-folded inclusive lower gram     A [128] = 2^(G_{n-1})
inline constexpr int64_t kRecW = 0;
inline constexpr int64_t kRecU = kRecW + int64_t{kChunk} * kHeadDim;
inline constexpr int64_t kRecQP = kRecU + int64_t{kChunk} * kHeadDim;
inline constexpr int64_t kRecKG = kRecQP + int64_t{kChunk} * kHeadDim;
inline constexpr int64_t kRecAQK = kRecKG + int64_t{kChunk} * kHeadDim;
inline constexpr int64_t kRecA = kRecAQK + int64_t{kChunk} * kChunk;
inline constexpr int64_t kRecElems = kRecA + kHeadDim;
inline constexpr int64_t kRecordBytes = kRecElems * static_cast<int64_t>(sizeof(RecordT));
static_assert(kRecordBytes % 256 == 0, "records keep the workspace's 256-byte alignment");

// ---- v1 (ForwardVariant::v1_mma) record: bf16 factors, already in the byte image the tensor-core
// SCAN wants in shared memory (XOR-swizzled 16-byte groups, mma_layout.h), so SCAN copies it with
// plain 16-byte cp.async and no re-layout. Byte offsets; rows >= n are zero.
//   W   [64][128] bf16 swz128     QP [64][128] bf16 swz128     KG [64][128] bf16 swz128
//   AQK [64][64]  bf16 swz64      U  [4 slices][64][32] bf16 swz32 (slice j = columns 32j..32j+31)
//   A   [128] fp32
// W, QP, KG, AQK are contiguous so SCAN moves W+QP and KG+AQK as two contiguous blocks.
inline constexpr int64_t kRec1W = 0;
inline constexpr int64_t kRec1QP = kRec1W + int64_t{kChunk} * kHeadDim * 2;
inline constexpr int64_t kRec1KG = kRec1QP + int64_t{kChunk} * kHeadDim * 2;
inline constexpr int64_t kRec1AQK = kRec1KG + int64_t{kChunk} * kHeadDim * 2;
inline constexpr int64_t kRec1U = kRec1AQK + int64_t{kChunk} * kChunk * 2;
inline constexpr int64_t kRec1USlice = int64_t{kChunk} * kScanSliceColumns * 2;  // bytes per slice
inline constexpr int64_t kRec1A = kRec1U + int64_t{kChunk} * kHeadDim * 2;
inline constexpr int64_t kRecord1Bytes = kRec1A + int64_t{kHeadDim} * 4;
static_assert(kRecord1Bytes == 74240, "v1 record: 4 x 16 KB + 8 KB + 512 B");
static_assert(kRecord1Bytes % 256 == 0, "records keep the workspace's 256-byte alignment");

// ---- v2w (ForwardVariant::v2w_mma) record: the v1 byte layout with fp16 instead of bf16 (every
// factor the SCAN multiplies is bounded, docs/precision.md: |W| <~ 1, |q'|, |A_qk| <= 1/sqrt(128),
// |kg| <= 1), U stored per value column d as fp16 U * 2^15 / U_BOUND[d], and after the v1 parts
//   U_BOUND [128] fp32: a power of two > max |U[:, d]| over the chunk's rows (0: the column is 0),
// so |stored U| < 2^15 whatever the scale of v. The SCAN runs its products in fp16 with per-row
// power-of-two scales (scan_w.cu) and undoes U's with U_BOUND.
inline constexpr int64_t kRec2UBound = kRecord1Bytes;
inline constexpr int64_t kRecord2Bytes = kRec2UBound + int64_t{kHeadDim} * 4;
static_assert(kRecord2Bytes == 74752, "v2w record: the v1 record + 512 B of U bounds");
static_assert(kRecord2Bytes % 256 == 0, "records keep the workspace's 256-byte alignment");

// The variants whose PREP is v2's (prep_v2.cu); v2 and v2t write the v1 record, v2w its own.
inline bool uses_prep_v2(ForwardVariant variant) {
  return variant == ForwardVariant::v2_mma || variant == ForwardVariant::v2t_mma ||
         variant == ForwardVariant::v2w_mma;
}

// Bytes of one record of `variant` (validated elsewhere: unknown values give the v0 size).
inline int64_t record_bytes(ForwardVariant variant) {
  if (variant == ForwardVariant::v2w_mma) return kRecord2Bytes;
  // v1, v2 and v2t write exactly the v1 record (only their PREP / SCAN differ).
  return variant == ForwardVariant::v1_mma || uses_prep_v2(variant) ? kRecord1Bytes
                                                                    : kRecordBytes;
}

// v2_mma's SCAN, chosen per call from the number of (sequence, head) chains: the transposed-state
// SCAN (scan_t.cu, one CTA per chain, one CTA per SM) once the chains fill 60 % of the SMs; below
// that, v1's four value-slice CTAs per chain keep more SMs busy on the serial chunk chain. The
// crossing is measured on the H200 (docs/perf-notes.md, "v2t"): 64 chains of 128 chunks, v1
// 0.34 ms against 0.40; 96 chains, v1 0.51 ms against 0.40.
inline bool transposed_scan_pays(int64_t chains, int multiprocessors) {
  return chains * 5 >= int64_t{multiprocessors} * 3;
}

// Virtual chunks (kernel-design.md §7.4): sequence s owns the record slots
// [floor(cu[s]/64) + s, floor(cu[s]/64) + s + ceil(len_s/64)). The ranges are disjoint and all
// lie below floor(cu[N]/64) + N <= floor(total_tokens/64) + N, the per-head capacity.
// (Proof of disjointness: with cu[s] = 64a + r, floor((cu[s] + len)/64) + 1 >= a + ceil(len/64).)
inline int64_t chunk_capacity(int64_t total_tokens, int64_t num_seqs) {
  return total_tokens / kChunk + num_seqs;
}

}  // namespace kda::detail
