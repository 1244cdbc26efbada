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

}  // namespace kda::lab::factors16
