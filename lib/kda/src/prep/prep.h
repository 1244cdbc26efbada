// PREP's arguments and the launcher of the library's PREP (prep.cu; the phases are
// prep_chunk.cuh). It writes the record of record.h.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common.cuh"

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

// The raw inputs (kda.h GateInput::raw, BetaInput::logits, bf16 beta, fuse_k_l2norm), passed to
// the raw-input kernel only: the contract kernel keeps its parameters and code as they were
// before raw inputs existed. gate / beta here replace PrepArgs' typed ones.
struct RawPrepArgs {
  const void* gate;      // raw_gate: the raw projection, bf16 (gate_bf16) or fp32; else G fp32
  const void* beta;      // fp32 or bf16 (beta_bf16): probabilities, or logits (beta_logits)
  bool raw_gate;
  bool gate_bf16;
  bool beta_bf16;
  bool beta_logits;
  bool fuse_k_l2norm;
  const float* a_log;    // [H]
  const float* dt_bias;  // [H, 128]
  float lower_bound;
  bool any() const { return raw_gate || beta_bf16 || beta_logits || fuse_k_l2norm; }
};

// Grid (capacity, H), 256 threads, prep_layout.h halves::kSBytes of dynamic shared memory, three
// CTAs per SM (prep/halves_chunk.cuh): the contract kernel, or the raw-input kernel when raw.any().
void launch_prep(const PrepArgs& args, const RawPrepArgs& raw, cudaStream_t stream);

}  // namespace kda::detail
