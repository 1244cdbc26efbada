// The raw inputs of chunk_forward (kda.h GateInput::raw, BetaInput::logits, bf16 beta,
// fuse_k_l2norm) as the kernels that read them take them: the raw-input PREP (prep/prep.h) and the
// one pass (onepass/onepass.h). Plain C++: host and device code include it.
#pragma once

namespace kda::detail {

// Passed to a raw-input kernel only: the contract kernels keep their parameters and code as they
// were before raw inputs existed. gate / beta here replace the contract arguments' typed ones.
struct RawPrepArgs {
  const void* gate;  // raw_gate: the raw projection, bf16 (gate_bf16) or fp32; else G fp32
  const void* beta;  // fp32 or bf16 (beta_bf16): probabilities, or logits (beta_logits)
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

}  // namespace kda::detail
