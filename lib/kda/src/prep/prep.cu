// PREP (halves_chunk.cuh has the phases): the two kernels and their launcher. The contract kernel
// takes PrepArgs only (its parameter block, and so its code, free of the raw path's); the
// raw-input kernel adds RawPrepArgs (kda.h GateInput::raw, BetaInput::logits, bf16 beta,
// fuse_k_l2norm). Both fit 80 registers and 75 KB of shared memory: three CTAs (chunks) per SM,
// which makes PREP 12 % faster than prep_chunk.cuh's two (docs/perf-notes.md "Halves PREP").
#include "prep/prep.h"

#include "prep/halves_chunk.cuh"
#include "prep/prep_layout.h"

namespace kda::detail {
namespace {

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
