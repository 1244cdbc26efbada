// Device half of KdaGpu.Bf16PairsUnpackExactly (test_gpu.cpp): the library's bf16 pair unpack
// (device/ptx.cuh unpack_bf16, a shift and a mask) against CUDA's own conversion
// (__bfloat1622float2), bit for bit, for every 16-bit pattern in both halves of a word.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "bf16_unpack_check.h"
#include "device/ptx.cuh"  // lib/kda/src

namespace kda::test {
namespace {

// Word w = pattern p in the low half, p ^ 0xa5c3 in the high half (both cover all 2^16).
__global__ void bf16_unpack_mismatches_kernel(unsigned* mismatches, unsigned* first_bad) {
  const unsigned p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= (1u << 16)) return;
  const uint32_t w = p | ((p ^ 0xa5c3u) << 16);
  const float2 ours = detail::ptx::unpack_bf16(w);
  const float2 cuda = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w));
  if (__float_as_uint(ours.x) != __float_as_uint(cuda.x) ||
      __float_as_uint(ours.y) != __float_as_uint(cuda.y)) {
    if (atomicAdd(mismatches, 1u) == 0u) *first_bad = w;
  }
}

}  // namespace

cudaError_t bf16_unpack_mismatches(unsigned* mismatches, unsigned* first_bad) {
  unsigned* d = nullptr;
  cudaError_t status = cudaMalloc(&d, 2 * sizeof(unsigned));
  if (status != cudaSuccess) return status;
  const unsigned init[2] = {0u, 0xffffffffu};
  status = cudaMemcpy(d, init, sizeof(init), cudaMemcpyHostToDevice);
  if (status == cudaSuccess) {
    bf16_unpack_mismatches_kernel<<<(1u << 16) / 256, 256>>>(d, d + 1);
    status = cudaGetLastError();
  }
  unsigned out[2] = {0u, 0u};
  if (status == cudaSuccess) status = cudaMemcpy(out, d, sizeof(out), cudaMemcpyDeviceToHost);
  const cudaError_t freed = cudaFree(d);
  if (status == cudaSuccess) status = freed;
  *mismatches = out[0];
  *first_bad = out[1];
  return status;
}

}  // namespace kda::test
