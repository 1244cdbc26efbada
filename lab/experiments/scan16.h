// The 16-token chain (issue 15's consumer, measured before the one-kernel forward is written):
// one CTA of two warpgroups per (sequence, head) walks the sequence's 16-token sub-chunks, reading
// factors16's records, with the transposed state S^T [128 values][128 keys] in fp32 wgmma
// accumulators (warpgroup g: value rows 64 g .. 64 g + 63). Per sub-chunk, in order:
//   A   acc = S^T W^T, P^T = S^T QP^T   (8 + 8 x m64n16k16, the state as the bf16 A operand)
//   V   V_new^T = U^T - acc (fp32), rounded once to bf16
//   B   P^T += V_new^T AQK^T (m64n16k16), S^T = S^T diag(A) + V_new^T KG (m64n128k16)
//   O   P^T -> bf16 -> out rows < n
// The record of sub-chunk c + 1 arrives by one bulk copy while c runs. What this measures is the
// chain's latency per 16 tokens once the factors are ready (the one-kernel forward overlaps their
// build with it); the state's products on bf16 operands keep any scale of v in range (the
// library's SCAN reaches fp16 with per-row scales instead).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace kda::lab::factors16 {

struct ChainArgs {
  const char* records;  // factors16's, [heads][capacity]
  int64_t capacity;
  int heads;
  const int32_t* cu;  // device [num_seqs + 1]; null: dense
  int64_t seq_len;
  int num_seqs;
  __nv_bfloat16* out;     // [tokens][heads][128], rows < n of every sub-chunk written
  int64_t out_stride;     // elements between tokens
  const float* initial_state;  // [N][H][128 keys][128 values] or null (zeros)
  float* final_state;          // same layout, or null
};

// Grid num_seqs x heads, 256 threads; returns the launch's error.
cudaError_t launch_chain(const ChainArgs& args, cudaStream_t stream);

}  // namespace kda::lab::factors16
