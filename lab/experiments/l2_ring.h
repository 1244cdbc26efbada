// The L2-ring experiment (issue 15's first step, docs/perf-notes.md "What the one-kernel design
// needs from PREP"): can the forward's record stay in the H200's 60 MB L2 if PREP and SCAN run
// side by side, the record passing through a small ring per chain instead of a 0.9 GB workspace?
//
// One kernel, two roles: for each of `chains` chains a producer CTA (PREP's stand-in: it streams
// the chunk's input bytes in, as PREP reads q, k, v, G and beta, and writes one record into the
// chain's ring) and a consumer CTA (SCAN's stand-in: it reads the record back, checks every byte,
// and writes the chunk's output bytes). A slot is reused once its consumer is done with it, so the
// ring holds `slots` records per chain. With the ring in L2 the DRAM traffic is the inputs and
// outputs alone; with slots = chunks (nothing reused) it is the two-kernel design's record traffic
// on top. The kernel's time against those two byte counts says which happened.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace kda::lab::l2ring {

struct RingShape {
  int chains = 96;               // (sequence, head) chains: h96-fixed has 96
  int chunks = 128;              // 64-token chunks per chain: 8192 tokens
  int slots = 4;                 // records per chain in the ring
  int64_t input_bytes = 82176;   // per chunk: (q, k, v 768 + G 512 + beta 4) B x 64 tokens
  int64_t record_bytes = 74240;  // per chunk: the fp16 record, 1,160 B x 64 tokens
  int64_t output_bytes = 16384;  // per chunk: out, 256 B x 64 tokens
  bool cache_hints = true;       // evict_last on the ring, evict_first on inputs and outputs
  int producer_delay_ns = 0;     // extra time per chunk in the producer (PREP's compute)
};

// Device buffers for one shape (sized by ring_buffer_bytes), owned by the caller.
struct RingBuffers {
  void* input = nullptr;                // chains x chunks x input_bytes, any non-zero pattern
  void* records = nullptr;              // chains x slots x record_bytes
  void* output = nullptr;               // chains x chunks x output_bytes
  int* counters = nullptr;              // 2 x chains ints (produced, consumed), zeroed by run_ring
  unsigned long long* stats = nullptr;  // 2 (mismatched 16-byte units, an input checksum)
};

struct RingSizes {
  int64_t input, records, output, counters, stats;
};
RingSizes ring_buffer_bytes(const RingShape& shape);

// Why the shape cannot run (every byte count a positive multiple of 16, the grid's 2 x chains CTAs
// all resident at once so that no producer waits on a consumer that never starts), or "" if it
// can. Needs the current device.
std::string ring_refusal(const RingShape& shape);

// Fills the input with a non-zero pattern (no timing on zeros).
void fill_input(const RingShape& shape, const RingBuffers& buffers, cudaStream_t stream);

// One run: zeroes the counters and stats, launches the kernel. Errors are returned, not thrown.
cudaError_t run_ring(const RingShape& shape, const RingBuffers& buffers, cudaStream_t stream);

}  // namespace kda::lab::l2ring
