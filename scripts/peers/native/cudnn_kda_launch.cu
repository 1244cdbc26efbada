// Host launcher for cuDNN-frontend 1.32.0's sm90 `kda_fused` kernel, as a C ABI for ctypes
// (scripts/peers/peer_adapters.py). Our own code; the kernel body is NOT here: build_peers.sh
// extracts cudnn/linear_attention/hopper/cuda_kernels/kda_fused_sm90.cu from the PyPI wheel at
// run time and compiles it twice, once per fusion set, renamed on the command line:
//   -Dkda_fused=kdapeer_cudnn_plain -DKDA_FUSED_FLAGS=0   (normalized q/k, per-token ln gate, beta)
//   -Dkda_fused=kdapeer_cudnn_raw   -DKDA_FUSED_FLAGS=7   (raw q/k, raw gate + A_log/dt_bias, logits)
// The flags are compile-time in the kernel (cuDNN-FE measured 2.7-7.9 % for runtime branches), so
// one object per set. The launch geometry restates the wheel's hopper/cuda_host.py: grid
// (H, N * P), 128 threads, 94,464 B of dynamic shared memory, P pieces per sequence so that
// N * H * P is near 264 resident CTAs (2 per SM on 132 SMs) without exceeding a sequence's chunks.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

namespace {

using bf16 = __nv_bfloat16;
constexpr int kBlock = 128;           // one warpgroup per CTA (__launch_bounds__(128, 2))
constexpr int kChunk = 16;            // the kernel's chunk length
constexpr int kTargetCtas = 264;      // cuda_host.py TARGET_CTAS
constexpr int kSmemBytes = 94464;     // sizeof(FusedSmem); the body static_asserts it (-D below)

}  // namespace

// The two specialisations, defined in the objects compiled from the wheel's body. Declared here
// with the body's exact parameter list (extern "C": the names carry no types, so keep in step).
#define KDAPEER_CUDNN_PARAMS                                                                   \
  const bf16 *q, const bf16 *k, const bf16 *v, const float *g, const float *beta,              \
      const int *cu_seqlens, const float *initial_state, bf16 *o, float *final_state, int n,   \
      int h, int p, const float *a_log, const float *dt_bias, float gate_lb, float q_scale,    \
      int hq
extern "C" __global__ void kdapeer_cudnn_plain(KDAPEER_CUDNN_PARAMS);
extern "C" __global__ void kdapeer_cudnn_raw(KDAPEER_CUDNN_PARAMS);

extern "C" {

// cuda_host.pieces_per_sequence: fill the machine, never more pieces than a sequence has chunks
// (counted for the mean sequence length, as the wheel does).
int kdapeer_cudnn_pieces(long long total_tokens, int n_seqs, int n_heads) {
  if (n_seqs < 1) n_seqs = 1;
  const long long approx = ((total_tokens + n_seqs - 1) / n_seqs + kChunk - 1) / kChunk;
  const long long ctas = static_cast<long long>(n_seqs) * (n_heads > 0 ? n_heads : 1);
  long long p = kTargetCtas / ctas;
  if (p < 1) p = 1;
  if (p > approx) p = approx >= 1 ? approx : 1;
  return static_cast<int>(p);
}

const char* kdapeer_error_string(int status) {
  if (status == -1) return "kdapeer: flags must be 0 (plain) or 7 (raw): no other set is compiled";
  if (status == -2) return "kdapeer: n_seqs and n_heads must be >= 1";
  return cudaGetErrorString(static_cast<cudaError_t>(status));
}

// One launch on `stream` (a cudaStream_t from torch: torch.cuda.current_stream().cuda_stream).
// All tensors are device pointers; initial_state and final_state are fp32 [N, H, V, K] and must
// both be given (the kernel copies the initial state to the final one for an empty sequence).
// a_log [H] and dt_bias [H, 128] are read with flags 7 only. Returns 0 or a status for
// kdapeer_error_string; never synchronizes (the timing loop queues calls behind a spin kernel).
int kdapeer_cudnn_launch(int flags, const void* q, const void* k, const void* v, const float* g,
                         const float* beta, const int* cu_seqlens, const float* initial_state,
                         void* o, float* final_state, int n_seqs, int n_heads,
                         long long total_tokens, const float* a_log, const float* dt_bias,
                         float gate_lower_bound, float q_scale, void* stream) {
  if (flags != 0 && flags != 7) return -1;
  if (n_seqs < 1 || n_heads < 1) return -2;
  auto kernel = flags == 0 ? kdapeer_cudnn_plain : kdapeer_cudnn_raw;
  // The attribute is per function and cheap, but set it once: it is not a stream operation and
  // would otherwise sit between the queued calls of a timing batch.
  static bool attribute_set[2] = {false, false};
  const int which = flags == 0 ? 0 : 1;
  if (!attribute_set[which]) {
    const cudaError_t st = cudaFuncSetAttribute(
        reinterpret_cast<const void*>(kernel), cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
    if (st != cudaSuccess) return static_cast<int>(st);
    attribute_set[which] = true;
  }
  const int p = kdapeer_cudnn_pieces(total_tokens, n_seqs, n_heads);
  const dim3 grid(static_cast<unsigned>(n_heads), static_cast<unsigned>(n_seqs * p), 1);
  kernel<<<grid, kBlock, kSmemBytes, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const bf16*>(q), static_cast<const bf16*>(k), static_cast<const bf16*>(v), g, beta,
      cu_seqlens, initial_state, static_cast<bf16*>(o), final_state, n_seqs, n_heads, p, a_log,
      dt_bias, gate_lower_bound, q_scale, n_heads);
  return static_cast<int>(cudaGetLastError());
}

}  // extern "C"
