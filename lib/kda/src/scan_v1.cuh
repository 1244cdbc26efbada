// SCAN arguments (both SCAN kernels: v0 in forward.cu, v1 in scan_v1.cu) and the v1 (tensor-core)
// launcher (scan_v1.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common.cuh"

namespace kda::detail {

struct ScanArgs {
  const void* records;  // records of the variant (layout.h), head-major: [heads][capacity]
  __nv_bfloat16* out;
  int64_t out_stride;          // elements between tokens
  const float* initial_state;  // nullable
  float* final_state;          // nullable
  int heads;
  int64_t capacity;
  Sequences seqs;
};

// Grid (4 N, H), 256 threads, mma_layout.h kS1Bytes of dynamic shared memory.
void launch_scan_v1(const ScanArgs& args, cudaStream_t stream);

// The transposed-state SCAN of v2t_mma (scan_t.cu): grid (N, H), 256 threads, scan_t.h kSBytes of
// dynamic shared memory (one CTA per SM); reads the same v1 record.
void launch_scan_t(const ScanArgs& args, cudaStream_t stream);

}  // namespace kda::detail
