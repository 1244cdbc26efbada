// PREP (prep_chunk.cuh has the phases): the two kernels and their launcher. The contract kernel
// takes PrepArgs only (its parameter block, and so its code, as before raw inputs existed); the
// raw-input kernel adds RawPrepArgs (kda.h GateInput::raw, BetaInput::logits, bf16 beta,
// fuse_k_l2norm).
#include "prep/prep.h"

#include "prep/halves_chunk.cuh"
#include "prep/prep_chunk.cuh"
#include "prep/prep_layout.h"

namespace kda::detail {
namespace {

// Three CTAs per SM: the channel-halves PREP (prep/halves_chunk.cuh) fits 75 KB.
__global__ void __launch_bounds__(kThreads, 3) prep_kernel(const PrepArgs args) {
  prep::prep_chunk_halves<prep::F16Record, false>(args, RawPrepArgs{});
}

__global__ void __launch_bounds__(kThreads, 3)
    prep_raw_kernel(const PrepArgs args, const RawPrepArgs raw) {
  prep::prep_chunk_halves<prep::F16Record, true>(args, raw);
}

}  // namespace

void launch_prep(const PrepArgs& args, const RawPrepArgs& raw, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(args.capacity), static_cast<unsigned>(args.heads));
  const char* what = "chunk_forward: prep";
  if (raw.any()) {
    set_dynamic_smem(reinterpret_cast<const void*>(&prep_raw_kernel), prep::halves::kSBytes, what,
                     /*max_carveout=*/true);
    prep_raw_kernel<<<grid, kThreads, prep::halves::kSBytes, stream>>>(args, raw);
  } else {
    set_dynamic_smem(reinterpret_cast<const void*>(&prep_kernel), prep::halves::kSBytes, what,
                     /*max_carveout=*/true);
    prep_kernel<<<grid, kThreads, prep::halves::kSBytes, stream>>>(args);
  }
  check_launch(what);
}

}  // namespace kda::detail
