// The v2 PREP (ForwardVariant::v2_mma, v2t_mma, v2w_mma): arguments and launcher (prep_v2.cu).
// It writes the v1 record (layout.h kRec1*, bf16) for the v1 SCAN and scan_t, or the v2w record
// (kRecord2Bytes, fp16) for scan_w.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common.cuh"

namespace kda::detail {

// Arguments of every PREP kernel: v0/v1 (forward.cu) and v2 (prep_v2.cu).
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
  // v2 PREP only: write the v2w record (layout.h kRecord2Bytes: fp16 factors, U scaled per value
  // column) instead of the v1 record (bf16) that the v1 SCAN and scan_t read.
  bool f16_record;
};

// The raw inputs of the v2 PREP (kda.h GateInput::raw, BetaInput::logits, bf16 beta,
// fuse_k_l2norm), passed to its raw-input kernel only: the contract kernel keeps its parameters
// and code as they were before raw inputs existed. gate / beta here replace PrepArgs' typed ones.
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

// Grid (capacity, H), 256 threads, prep_v2.h kSBytes of dynamic shared memory, 2 CTAs per SM.
void launch_prep_v2(const PrepArgs& args, const RawPrepArgs& raw, cudaStream_t stream);

}  // namespace kda::detail
