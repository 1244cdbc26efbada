// SCAN arguments (the library's SCAN, scan.cu, and the lab's four) and the launcher of the
// library's.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common.cuh"
#include "scan/scan_ctas.h"

namespace kda::detail {

struct ScanArgs {
  const void* records;  // head-major: [heads][capacity] records of record_bytes each
  __nv_bfloat16* out;
  int64_t out_stride;          // elements between tokens
  const float* initial_state;  // nullable
  float* final_state;          // nullable
  int heads;
  int64_t capacity;
  Sequences seqs;
  int64_t record_bytes;  // record.h kRecordBytes, or a lab record's size
};

// The chain one CTA of a SCAN that reads 16-bit records (scan.cu, the lab's v1 and v2t SCANs)
// walks: sequence s of head h.
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

// The SCAN (scan.cu): the transposed state on warpgroup MMA, reading the record of record.h, one
// CTA per SM, whole chains or value halves (scan_ctas.h).
void launch_scan(const ScanArgs& args, cudaStream_t stream, ScanCtas ctas = ScanCtas::automatic);

}  // namespace kda::detail
