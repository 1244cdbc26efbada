// Inputs for kda-lab-factors16's timing rows, generated on the GPU (the h96 shapes hold 100 M
// elements per tensor: a host generator would spend seconds of device time per call). Values
// follow the project's contract generator in distribution, not in bits: q, v ~ N(0, 1), k rows
// N(0, 1) then l2-normalized, beta = sigmoid(N(0, 1)), the gate from the raw-gate producer
// (A_log ~ U(0, 1), dt_bias ~ U(0, 1) or, for long memory, U(-12, 1), lower bound -5) summed in
// 64-token chunks, every 64-token chunk starting at a multiple of 64 tokens (the shapes timed here
// have sequence lengths that are multiples of 64). Deterministic for a seed.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace kda::lab::factors16 {

struct InputBuffers {
  __nv_bfloat16* q;
  __nv_bfloat16* k;
  __nv_bfloat16* v;
  float* gate;
  float* beta;
  int64_t tokens;
  int heads;
};

// Fills every buffer; returns the first launch error.
cudaError_t fill_inputs(const InputBuffers& b, bool long_memory, uint64_t seed,
                        cudaStream_t stream);

}  // namespace kda::lab::factors16
