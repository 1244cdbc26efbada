// The constants every forward kernel shares: the chunk and head sizes under the names the kernels
// use, the CTA size and q's scale. Host and device, no CUDA includes.
#pragma once

#include "kda/kda.h"

namespace kda::detail {

inline constexpr int kC = kChunk;    // 64 tokens per chunk
inline constexpr int kD = kHeadDim;  // 128 channels (K = V)
// Every forward kernel (PREP, SCAN; the lab's too) runs 8 warps per CTA.
inline constexpr int kWarps = 8;
inline constexpr int kThreads = 32 * kWarps;

// q's scale 1 / sqrt(128), as a float: one definition for every kernel that folds it in.
inline constexpr float kScale = 0.08838834764831845f;

}  // namespace kda::detail
