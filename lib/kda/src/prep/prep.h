// PREP's arguments and the launcher of the library's PREP (prep.cu; the phases are
// prep_chunk.cuh). It writes the record of record.h.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common.cuh"
#include "raw_inputs.h"

namespace kda::detail {

// Arguments of every PREP kernel: the library's (prep.cu) and the lab's v0 and v2 ones.
struct PrepArgs {
  const __nv_bfloat16* q;
  const __nv_bfloat16* k;
  const __nv_bfloat16* v;
  const float* gate;
  const float* beta;
  int64_t q_stride, k_stride, v_stride;  // elements between tokens
  int heads;
  int64_t capacity;  // record slots per head
  Sequences seqs;
  void* records;  // head-major: [heads][capacity]
  bool fuse_q_l2norm;  // a runtime flag: it only changes the load phase
};

// Grid (capacity, H), 256 threads, prep_layout.h halves::kSBytes of dynamic shared memory, three
// CTAs per SM (prep/halves_chunk.cuh): the contract kernel, or the raw-input kernel when raw.any()
// (raw_inputs.h).
void launch_prep(const PrepArgs& args, const RawPrepArgs& raw, cudaStream_t stream);

}  // namespace kda::detail
