// The one-pass forward's lab configurations (fused16.h): one or two builders beside a
// two-warpgroup chain from kernel.cuh, three through the library's own launch.
#include "fused16.h"

#include <algorithm>

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
  const int chains = args.in.num_seqs * args.in.heads;
  if (helper_ctas < 0) {
    int device = 0, sms = 0;
    cudaError_t e = cudaGetDevice(&device);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (e != cudaSuccess) return e;
    helper_ctas = std::max(0, sms - chains);
  }
  helper_ctas = static_cast<int>(
      std::min<int64_t>(helper_ctas, onepass::l2_helper_ctas_max(chains)));
  void* base = nullptr;
  cudaError_t e = cudaMalloc(&base, static_cast<size_t>(onepass::l2_helpers_bytes(chains)));
  if (e != cudaSuccess) return e;
  e = cudaMemsetAsync(base, 0, static_cast<size_t>(onepass::l2_helpers_zeroed_bytes(chains)),
                      stream);
  const onepass::L2HelperRing ring = onepass::l2_helper_ring(base, chains, helper_ctas);
  if (e == cudaSuccess && args.raw.any()) {  // the carry rows' tags: no sub-chunk's
    e = cudaMemsetAsync(ring.carry, 0xff,
                        static_cast<size_t>(onepass::l2_helpers_carry_bytes(chains)), stream);
  }
  if (e == cudaSuccess) e = onepass::launch_l2_helpers(args, ring, stream);
  const cudaError_t sync = cudaStreamSynchronize(stream);
  const cudaError_t freed = cudaFree(base);
  return e != cudaSuccess ? e : sync != cudaSuccess ? sync : freed;
}

}  // namespace kda::lab::factors16
