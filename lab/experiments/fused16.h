// The one-pass forward (lib/kda/src/onepass) in the lab's configurations, for kda-lab-factors16's
// checks and timing rows: the library's (a one-warpgroup chain beside three builders), its L2
// helpers for few chains, and the two it was measured against (a two-warpgroup chain beside one or two builders, each builder asking
// for its next sub-chunk's inputs before it builds this one). Every configuration computes the
// same bits; the check asserts it, also with every hand-over delayed (OnepassArgs::jitter_ns).
#pragma once

#include <cuda_runtime_api.h>

#include "factors16.h"
#include "onepass/onepass.h"

namespace kda::lab::factors16 {

using FusedArgs = kda::detail::onepass::OnepassArgs;

// Grid num_seqs x heads, 128 x (chain warpgroups + builders) threads (builders 1, 2 or 3: with
// one, it builds every sub-chunk; 3 is the library's launch); returns the launch's error
// (cudaErrorInvalidValue for another builder count or strides beyond row_offsets_fit).
cudaError_t launch_fused(const FusedArgs& args, int builders, cudaStream_t stream);

// The L2 helpers (onepass.h launch_l2_helpers) on `args` with `helper_ctas` helper CTAs (< 0: the
// SMs the chains leave), their ring allocated, reset, used and freed here (synchronous: the call
// returns once the kernel has finished); returns the first error.
cudaError_t launch_l2_helpers(const FusedArgs& args, int helper_ctas, cudaStream_t stream);

}  // namespace kda::lab::factors16
