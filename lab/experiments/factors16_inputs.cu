// The GPU generator of kda-lab-factors16's timing inputs (factors16_inputs.h).
#include <cuda_bf16.h>

#include <cstdint>

#include "factors16_inputs.h"

namespace kda::lab::factors16 {
namespace {

constexpr int kDim = 128;
constexpr float kLog2e = 1.4426950408889634f;

// splitmix64: a well-mixed 64-bit hash of (seed, stream, index).
__device__ __forceinline__ uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
__device__ __forceinline__ float uniform(uint64_t seed, uint64_t stream, uint64_t i) {
  const uint64_t h = mix(seed ^ mix(stream * 0x632be59bd9b4e019ull + i));
  return (static_cast<float>(h >> 40) + 0.5f) * (1.0f / 16777216.0f);  // (0, 1)
}
__device__ __forceinline__ float normal(uint64_t seed, uint64_t stream, uint64_t i) {
  const float u1 = uniform(seed, stream, 2 * i), u2 = uniform(seed, stream, 2 * i + 1);
  return sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
}

// One warp per (token, head) row: q and v normal, k normal then normalized.
__global__ void fill_qkv_kernel(InputBuffers b, uint64_t seed) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (row >= b.tokens * b.heads) return;  // whole warps
  float k[4], ssq = 0.0f;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int64_t i = row * kDim + 4 * lane + e;
    b.q[i] = __float2bfloat16(normal(seed, 1, i));
    b.v[i] = __float2bfloat16(normal(seed, 3, i));
    k[e] = normal(seed, 2, i);
    ssq += k[e] * k[e];
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) ssq += __shfl_xor_sync(0xffffffffu, ssq, off);
  const float r = rsqrtf(ssq + 1e-6f);
#pragma unroll
  for (int e = 0; e < 4; ++e) b.k[row * kDim + 4 * lane + e] = __float2bfloat16(k[e] * r);
}

// One thread per (64-token chunk, head, channel): the chunk's cumulative log2 gate.
__global__ void fill_gate_kernel(InputBuffers b, bool long_memory, uint64_t seed) {
  const int64_t id = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t per_chunk = static_cast<int64_t>(b.heads) * kDim;
  const int64_t chunk = id / per_chunk;
  if (chunk * 64 >= b.tokens) return;
  const int64_t hd = id % per_chunk;
  const int h = static_cast<int>(hd / kDim);
  const float a = expf(uniform(seed, 4, h));                            // exp(A_log)
  const float u = uniform(seed, 5, hd);
  const float dt_bias = long_memory ? -12.0f + 13.0f * u : u;
  float g = 0.0f;
  for (int t = 0; t < 64 && chunk * 64 + t < b.tokens; ++t) {
    const int64_t i = (chunk * 64 + t) * per_chunk + hd;
    const float x = a * (normal(seed, 6, i) + dt_bias);
    g += -5.0f / (1.0f + expf(-x));
    b.gate[i] = g * kLog2e;
  }
}

__global__ void fill_beta_kernel(InputBuffers b, uint64_t seed) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= b.tokens * b.heads) return;
  b.beta[i] = 1.0f / (1.0f + expf(-normal(seed, 7, i)));
}

unsigned blocks(int64_t threads, int per_block) {
  return static_cast<unsigned>((threads + per_block - 1) / per_block);
}

}  // namespace

cudaError_t fill_inputs(const InputBuffers& b, bool long_memory, uint64_t seed,
                        cudaStream_t stream) {
  const int64_t rows = b.tokens * b.heads;
  fill_qkv_kernel<<<blocks(rows * 32, 256), 256, 0, stream>>>(b, seed);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  const int64_t chunks = (b.tokens + 63) / 64;
  fill_gate_kernel<<<blocks(chunks * b.heads * kDim, 256), 256, 0, stream>>>(b, long_memory,
                                                                             seed);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  fill_beta_kernel<<<blocks(rows, 256), 256, 0, stream>>>(b, seed);
  return cudaGetLastError();
}

}  // namespace kda::lab::factors16
