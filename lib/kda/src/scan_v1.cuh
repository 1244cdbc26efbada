// SCAN arguments (both SCAN kernels: v0 in forward.cu, v1 in scan_v1.cu) and the v1 (tensor-core)
// launcher (scan_v1.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common.cuh"

namespace kda::detail {

struct ScanArgs {
  const void* records;  // records of the variant (layout.h), head-major: [heads][capacity]
  __nv_bfloat16* out;
  int64_t out_stride;          // elements between tokens
  const float* initial_state;  // nullable
  float* final_state;          // nullable
  int heads;
  int64_t capacity;
  Sequences seqs;
  int64_t record_bytes;  // layout.h record_bytes(variant): kRecord1Bytes, or kRecord2Bytes (v2w)
};

// The chain one CTA of a v1-record SCAN (scan_v1.cu, scan_t.cu) walks: sequence s of head h.
struct ScanChain {
  int64_t begin;             // packed token index of its first token
  int64_t length;            // tokens
  int64_t chunks;            // 64-token chunks (the last one may be partial)
  const char* first_record;  // its first record (args.record_bytes each, consecutive)
};
__device__ __forceinline__ ScanChain scan_chain(const ScanArgs& args, int s, int h) {
  ScanChain chain;
  chain.begin = args.seqs.begin(s);
  chain.length = args.seqs.begin(s + 1) - chain.begin;
  chain.chunks = (chain.length + kChunk - 1) / kChunk;
  chain.first_record =
      static_cast<const char*>(args.records) +
      (static_cast<int64_t>(h) * args.capacity + args.seqs.chunk_base(s)) * args.record_bytes;
  return chain;
}

// Grid (4 N, H), 256 threads, mma_layout.h kS1Bytes of dynamic shared memory.
void launch_scan_v1(const ScanArgs& args, cudaStream_t stream);

// The transposed-state SCAN of v2t_mma (scan_t.cu): grid (N, H), 256 threads, scan_t.h kSBytes of
// dynamic shared memory (one CTA per SM); reads the same v1 record.
void launch_scan_t(const ScanArgs& args, cudaStream_t stream);

// The wgmma SCAN of v2w_mma (scan_w.cu): scan_t's grid and work split, the products on warpgroup
// MMA; scan_w.h kSBytes of dynamic shared memory (one CTA per SM); reads the same v1 record.
void launch_scan_w(const ScanArgs& args, cudaStream_t stream);

}  // namespace kda::detail
