// The one-pass forward's lab configurations (fused16.h): one or two builders beside a
// two-warpgroup chain from kernel.cuh, three through the library's own launch.
#include "fused16.h"

#include "onepass/kernel.cuh"

namespace kda::lab::factors16 {

cudaError_t launch_fused(const FusedArgs& args, int builders, cudaStream_t stream) {
  namespace onepass = kda::detail::onepass;
  if (builders == onepass::kLibraryBuilders) return onepass::launch(args, stream);
  if (!row_offsets_fit(args.in)) return cudaErrorInvalidValue;
  if (builders == 1) return onepass::launch_config<2, 1>(args, stream);
  if (builders == 2) return onepass::launch_config<2, 2>(args, stream);
  return cudaErrorInvalidValue;
}

cudaError_t launch_l2_helpers(const FusedArgs& args, int helper_ctas, cudaStream_t stream) {
  namespace onepass = kda::detail::onepass;
  void* ring = nullptr;
  const int64_t chains = static_cast<int64_t>(args.in.num_seqs) * args.in.heads;
  cudaError_t e = cudaMalloc(&ring, static_cast<size_t>(onepass::l2_helpers_bytes(chains)));
  if (e != cudaSuccess) return e;
  e = onepass::launch_l2_helpers(args, ring, helper_ctas, stream);
  const cudaError_t sync = cudaStreamSynchronize(stream);
  const cudaError_t freed = cudaFree(ring);
  return e != cudaSuccess ? e : sync != cudaSuccess ? sync : freed;
}

}  // namespace kda::lab::factors16
