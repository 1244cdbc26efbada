// The v1 (tensor-core) SCAN: arguments and launcher (scan_v1.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common.cuh"

namespace kda::detail {

struct ScanV1Args {
  const void* records;  // v1 records (layout.h kRec1*), head-major: [heads][capacity]
  __nv_bfloat16* out;
  int64_t out_stride;          // elements between tokens
  const float* initial_state;  // nullable
  float* final_state;          // nullable
  int heads;
  int64_t capacity;
  Sequences seqs;
};

// Grid (4 N, H), 256 threads, mma_layout.h kS1Bytes of dynamic shared memory.
void launch_scan_v1(const ScanV1Args& args, cudaStream_t stream);

}  // namespace kda::detail
