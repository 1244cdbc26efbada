// Helpers shared by the kda kernels and their launchers: sequence/chunk enumeration, bf16
// vector loads, CUDA error reporting.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "config.h"
#include "kda/kda.h"
#include "record.h"

namespace kda::detail {

// ----------------------------------------------------------------------------------------------
// Host: CUDA errors become kda::Error(cuda) with the runtime's text.

[[noreturn]] void throw_cuda(const std::string& where, cudaError_t status);

// Checks the launch just issued (configuration errors, no device ...).
void check_launch(const char* where);

// The current device, or throws (no device / no driver).
int current_device(const char* where);

// The current device's multiprocessor count (one driver query per device, then cached).
int multiprocessor_count(const char* where);
// The current device's peak DRAM bandwidth in bytes per second: 2 x memory clock x bus width
// (double data rate; the driver's attributes, queried once per device, then cached).
double dram_bandwidth(const char* where);

// Sets cudaFuncAttributeMaxDynamicSharedMemorySize once per (kernel, device); with
// max_carveout also asks for the largest shared-memory carveout (kernels that rely on several
// CTAs per SM fitting in shared memory).
void set_dynamic_smem(const void* kernel, int bytes, const char* where,
                      bool max_carveout = false);

// ----------------------------------------------------------------------------------------------
// Sequences. Dense batches are lowered to packed sequences: sequence s = batch row s starts at
// token s * seq_len (tokens are numbered b * T + t) and has seq_len tokens.

struct Sequences {
  const int32_t* cu = nullptr;  // device offsets [num_seqs + 1]; null: dense
  int64_t seq_len = 0;          // dense only: tokens per sequence (T)
  int num_seqs = 0;             // N

  __device__ __forceinline__ int64_t begin(int s) const {
    return cu != nullptr ? static_cast<int64_t>(cu[s]) : static_cast<int64_t>(s) * seq_len;
  }
  // First record slot of sequence s (record.h): strictly increasing in s.
  __device__ __forceinline__ int64_t chunk_base(int s) const { return begin(s) / kChunk + s; }
};

// One 64-token chunk of one sequence.
struct ChunkRef {
  int seq = 0;
  int64_t first_token = 0;  // packed token index of row 0
  int rows = 0;             // valid rows n, 1..64
};

// Maps record slot `slot` to its chunk; false when no sequence owns the slot (the CTA exits).
__device__ __forceinline__ bool find_chunk(const Sequences& seqs, int64_t slot, ChunkRef& out) {
  int lo = 0, hi = seqs.num_seqs - 1;  // largest s with chunk_base(s) <= slot
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (seqs.chunk_base(mid) <= slot) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const int64_t begin = seqs.begin(lo);
  const int64_t end = seqs.begin(lo + 1);
  const int64_t local = slot - seqs.chunk_base(lo);
  if (local < 0 || local * kChunk >= end - begin) return false;
  out.seq = lo;
  out.first_token = begin + local * kChunk;
  const int64_t left = end - out.first_token;
  out.rows = left < kChunk ? static_cast<int>(left) : kChunk;
  return true;
}

// ----------------------------------------------------------------------------------------------
// Vector loads/stores of 4 consecutive elements (8 bytes of bf16, 16 bytes of fp32).

__device__ __forceinline__ void load4(const __nv_bfloat16* p, float (&x)[4]) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  const __nv_bfloat162 lo = *reinterpret_cast<const __nv_bfloat162*>(&raw.x);
  const __nv_bfloat162 hi = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
  x[0] = __low2float(lo);
  x[1] = __high2float(lo);
  x[2] = __low2float(hi);
  x[3] = __high2float(hi);
}

__device__ __forceinline__ void load4(const float* p, float (&x)[4]) {
  const float4 v = *reinterpret_cast<const float4*>(p);
  x[0] = v.x;
  x[1] = v.y;
  x[2] = v.z;
  x[3] = v.w;
}

__device__ __forceinline__ void store4(__nv_bfloat16* p, const __nv_bfloat16 (&y)[4]) {
  __nv_bfloat162 lo, hi;
  lo.x = y[0];
  lo.y = y[1];
  hi.x = y[2];
  hi.y = y[3];
  uint2 raw;
  raw.x = *reinterpret_cast<const uint32_t*>(&lo);
  raw.y = *reinterpret_cast<const uint32_t*>(&hi);
  *reinterpret_cast<uint2*>(p) = raw;
}

// Writes zeros to tokens [cu[num_seqs], tokens) of a token-major tensor: row_vec16 16-byte
// vectors per token, rows row_pitch bytes apart. Reads the end offset on the device, so it
// stays right if the offsets change between calls (e.g. CUDA-graph replay).
__global__ void zero_tail_kernel(char* base, int64_t row_pitch, int64_t row_vec16, int64_t tokens,
                                 const int32_t* cu, int num_seqs);

// Launches zero_tail_kernel with a grid sized for `tokens` rows.
void launch_zero_tail(void* base, int64_t row_pitch, int64_t row_vec16, int64_t tokens,
                      const int32_t* cu, int num_seqs, cudaStream_t stream, const char* where);

}  // namespace kda::detail
