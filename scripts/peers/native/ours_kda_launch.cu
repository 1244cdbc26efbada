// Our forward (lib/kda, untouched) behind a C ABI for ctypes, so scripts/peers times it in the
// same process, on the same torch tensors and with the same loop as the peers
// (peer_adapters.OursPeer). kda-bench stays the measurement of record (its `fused` and `raw`
// paths); this runs the same calls on the peers' tensors: the plain contract, and the raw contract
// as one chunk_forward with every raw option (raw q and k normalized in the kernel, the raw bf16
// gate with A_log / dt_bias / lower bound, bf16 beta logits), exactly what kda-bench's raw path
// runs.
// Built by build_peers.sh against the lead's build of libkda.a (POSITION_INDEPENDENT_CODE ON).
#include <cuda_runtime.h>

#include <cstdio>
#include <exception>
#include <string>

#include "kda/kda.h"

namespace {

thread_local std::string g_last_error;

int fail(const char* what) {
  g_last_error = what;
  return 1;
}

kda::ForwardParams forward_params(const void* q, const void* k, const void* v, const float* gate,
                                  const float* beta, const float* h0, void* out, float* ht,
                                  long long batch, long long tokens, int heads,
                                  const int* cu_dev, const int* cu_host, int num_seqs,
                                  bool fuse_q, void* workspace, size_t workspace_bytes) {
  kda::ForwardParams p;
  p.q = q;
  p.k = k;
  p.v = v;
  p.gate = gate;
  p.beta = beta;
  p.initial_state = h0;
  p.out = out;
  p.final_state = ht;
  p.batch = batch;
  p.tokens = tokens;
  p.heads = heads;
  p.cu_seqlens = cu_dev;
  p.cu_seqlens_host = cu_host;
  p.num_seqs = cu_dev ? num_seqs : 0;
  p.fuse_q_l2norm = fuse_q;
  p.workspace = workspace;
  p.workspace_bytes = workspace_bytes;
  return p;
}

}  // namespace

extern "C" {

const char* kdapeer_ours_last_error() { return g_last_error.c_str(); }

// Workspace of the forward for these sizes (0 and an error text on bad arguments).
size_t kdapeer_ours_workspace_bytes(long long batch, long long tokens, int heads, const int* cu_host,
                                    int num_seqs, int with_h0, int with_ht) {
  try {
    float dummy = 0;
    kda::ForwardParams p = forward_params(&dummy, &dummy, &dummy, &dummy, &dummy,
                                          with_h0 ? &dummy : nullptr, &dummy,
                                          with_ht ? &dummy : nullptr, batch, tokens, heads,
                                          cu_host ? reinterpret_cast<const int*>(&dummy) : nullptr,
                                          cu_host, num_seqs, true, nullptr, 0);
    return kda::forward_workspace_bytes(p);
  } catch (const std::exception& e) {
    fail(e.what());
    return 0;
  }
}

// The plain contract: chunk_forward with fuse_q_l2norm on raw q (kda-bench's `fused` path).
int kdapeer_ours_forward(const void* q, const void* k, const void* v, const float* gate,
                         const float* beta, const float* h0, void* out, float* ht, long long batch,
                         long long tokens, int heads, const int* cu_dev, const int* cu_host,
                         int num_seqs, void* workspace, size_t workspace_bytes, void* stream) {
  try {
    kda::chunk_forward(forward_params(q, k, v, gate, beta, h0, out, ht, batch, tokens, heads, cu_dev,
                                      cu_host, num_seqs, true, workspace, workspace_bytes),
                       static_cast<cudaStream_t>(stream));
    return 0;
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}

// The raw contract in one call: chunk_forward(fuse_q_l2norm, fuse_k_l2norm, GateInput::raw with a
// bf16 raw gate, BetaInput::logits with bf16 logits) = kda-bench's raw path.
int kdapeer_ours_raw(const void* q, const void* k_raw, const void* raw_gate, const float* a_log,
                     const float* dt_bias, float lower_bound, const void* v,
                     const void* beta_logits, const float* h0, void* out, float* ht,
                     long long batch, long long tokens, int heads, const int* cu_dev,
                     const int* cu_host, int num_seqs, void* workspace, size_t workspace_bytes,
                     void* stream) {
  try {
    kda::ForwardParams p =
        forward_params(q, k_raw, v, nullptr, nullptr, h0, out, ht, batch, tokens, heads, cu_dev,
                       cu_host, num_seqs, true, workspace, workspace_bytes);
    p.fuse_k_l2norm = true;
    p.gate = raw_gate;
    p.gate_input = kda::GateInput::raw;
    p.gate_dtype = kda::DType::bf16;
    p.a_log = a_log;
    p.dt_bias = dt_bias;
    p.lower_bound = lower_bound;
    p.beta = beta_logits;
    p.beta_input = kda::BetaInput::logits;
    p.beta_dtype = kda::DType::bf16;
    kda::chunk_forward(p, static_cast<cudaStream_t>(stream));
    return 0;
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}

}  // extern "C"
