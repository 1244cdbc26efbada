// The 16-token factor builder (issue 15's producer, measured before the one-pass forward was
// written): for every 16-token sub-chunk of every (sequence, head), the factors a 16-token chain
// step multiplies the state with (kda-forward.md §2.2 with C = 16), built by the library's
// one-pass builder code (lib/kda/src/onepass/build16.cuh, one warpgroup per sub-chunk) and written
// to a record per (head, sub-chunk slot) in global memory, so that the build can be timed and
// checked alone. docs/design.md "The one-pass forward" says why: the 64-token PREP spends 30.8 k
// warp instructions per chunk on grams over 10 block pairs, a blocked 64 x 64 inverse and 64-row
// W / U; with 16-token chunks the grams and the inverse are one 16 x 16 block each, and
// everything between sub-chunks goes through the state on the tensor cores. The record and the
// math: lib/kda/src/onepass/record16.h.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "onepass/record16.h"

namespace kda::lab::factors16 {

// The library's record layout and builder inputs under the lab's names.
using namespace kda::detail::onepass;  // NOLINT: kSub, kRec*, rec_*, BuildInputs
inline constexpr int kThreads = kWarpgroup;  // one warpgroup per sub-chunk

// Sub-chunk slots per head: sequence s owns [floor(cu[s] / 16) + s, ... + ceil(len_s / 16)),
// disjoint and below floor(total / 16) + N (record.h's argument with 16 for 64).
inline int64_t slot_capacity(int64_t total_tokens, int num_seqs) {
  return total_tokens / kSub + num_seqs;
}

// The builder's inputs and where the standalone builder writes its records.
struct Args : BuildInputs {
  int64_t capacity;       // slot_capacity()
  char* records;          // [heads][capacity] records
  bool on_chip;    // timing mode: CTA writes the record of slot (SM, blockIdx.x % 8) instead of
                   // its own, 132 x 8 records that stay in L2 (the same instructions; the one-kernel
                   // forward's factors never leave the SM)
};

// Grid (capacity, heads), kThreads threads; returns the launch's error (cudaErrorInvalidValue
// when 16 rows of a stride do not fit a 32-bit element offset: row_offsets_fit).
cudaError_t launch(const Args& args, cudaStream_t stream);

}  // namespace kda::lab::factors16
