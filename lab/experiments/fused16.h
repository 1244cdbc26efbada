// The one-kernel 16-token forward (issue 15's first composition of the measured halves): one CTA
// per (sequence, head) builds every 16-token sub-chunk's factors itself and runs the chain on
// them, the records never leaving shared memory. Warp-specialized, three configurations:
//   builders 1 or 2: the chain on two warpgroups (chain16_step.cuh step: warps 0 .. 7, 144
//     registers with two builders), then the builders (factors16_build.cuh, 112 registers),
//     builder b taking sub-chunks b, b + builders, ...; each asks for the inputs of its next
//     sub-chunk (cp.async into a second input set) before it builds this one;
//   builders 3: the chain on one warpgroup (step_one_group: both value halves per thread, 232
//     registers), three builders at 88 registers with one input set each (no room for two).
// Sub-chunk c's record goes to ring buffer c % 4 (4 x 23 KB), so a builder may work ahead of the
// chain until the ring is full. A full / empty mbarrier pair per buffer hands it over; the builder
// fences its ordinary stores for the async proxy (the chain's wgmma reads the record's tiles)
// before it signals. The arithmetic is that of factors16 then the chain: the same bits as the
// two-kernel 16-token forward (kda-lab-factors16's check asserts it). What this measures is a
// step's time when the factor build runs beside the chain instead of before it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "factors16.h"

namespace kda::lab::factors16 {

struct FusedArgs {
  Args in;  // q, k, v, gate, beta, strides, heads, cu / seq_len, num_seqs, fuse_q_l2norm (its
            // records, capacity and on_chip are not used)
  __nv_bfloat16* out;          // [tokens][heads][128], every row of every sequence written
  int64_t out_stride;          // elements between tokens
  const float* initial_state;  // [N][H][128 keys][128 values] or null (zeros)
  float* final_state;          // same layout, or null
  int jitter_ns;  // the check's stress mode when > 0: every chain thread sleeps up to this long
                  // (pseudo-random per thread and sub-chunk) after a record is handed to it and
                  // before it reads it, every builder thread before it hands one over: a
                  // hand-over that does not really wait then shows up as different bits
};

// Grid num_seqs x heads, 128 x (chain warpgroups + builders) threads (builders 1, 2 or 3: with
// one, it builds every sub-chunk); returns the launch's error (cudaErrorInvalidValue for another
// builder count or strides too large for build::row_offsets_fit).
cudaError_t launch_fused(const FusedArgs& args, int builders, cudaStream_t stream);

}  // namespace kda::lab::factors16
