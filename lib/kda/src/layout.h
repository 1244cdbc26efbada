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

// Virtual chunks (kernel-design.md §7.4): sequence s owns the record slots
// [floor(cu[s]/64) + s, floor(cu[s]/64) + s + ceil(len_s/64)). The ranges are disjoint and all
// lie below floor(cu[N]/64) + N <= floor(total_tokens/64) + N, the per-head capacity.
// (Proof of disjointness: with cu[s] = 64a + r, floor((cu[s] + len)/64) + 1 >= a + ceil(len/64).)
inline int64_t chunk_capacity(int64_t total_tokens, int64_t num_seqs) {
  return total_tokens / kChunk + num_seqs;
}

}  // namespace kda::detail
