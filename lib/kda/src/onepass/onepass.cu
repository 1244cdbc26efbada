// The library's one-pass forward (onepass.h): kernel.cuh's Config<1, 3>, the value-halves and
// helper clusters and the L2 helpers for few chains (halves.cuh, helpers.cuh, l2_helpers.cuh),
// and the longest-first order of the grid's sequences.
#include <cstdint>

#include "onepass/halves.cuh"
#include "onepass/helpers.cuh"
#include "onepass/kernel.cuh"
#include "onepass/l2_helpers.cuh"
#include "onepass/onepass.h"

namespace kda::detail::onepass {
namespace {

constexpr int kOrderThreads = 256;

// Thread s: the rank of sequence s among all num_seqs by (length descending, index ascending),
// counted against every other sequence's length (staged through shared memory a tile at a time),
// then order[rank] = s. O(N^2) comparisons over N threads: ~N / 256 shared-memory tiles per
// thread, a few microseconds for thousands of sequences, and no workspace beyond `order`.
__global__ void __launch_bounds__(kOrderThreads)
    order_by_length_kernel(const int32_t* cu, int num_seqs, int32_t* order) {
  __shared__ int32_t tile[kOrderThreads];
  const int s = static_cast<int>(blockIdx.x) * kOrderThreads + static_cast<int>(threadIdx.x);
  const int32_t len = s < num_seqs ? cu[s + 1] - cu[s] : 0;
  int rank = 0;
  for (int t0 = 0; t0 < num_seqs; t0 += kOrderThreads) {
    const int t = t0 + static_cast<int>(threadIdx.x);
    tile[threadIdx.x] = t < num_seqs ? cu[t + 1] - cu[t] : -1;
    __syncthreads();
    const int count = min(kOrderThreads, num_seqs - t0);
    for (int j = 0; j < count; ++j) {
      const int32_t other = tile[j];
      rank += (other > len || (other == len && t0 + j < s)) ? 1 : 0;
    }
    __syncthreads();
  }
  if (s < num_seqs) order[rank] = s;
}

}  // namespace

cudaError_t launch(const OnepassArgs& args, cudaStream_t stream) {
  if (!row_offsets_fit(args.in)) return cudaErrorInvalidValue;
  constexpr int kB = kLibraryBuilders;
  const bool raw = args.raw.any();
  switch (args.operands) {
    case ChainOperands::bf16:
      return raw ? launch_config<1, kB, true>(args, stream) : launch_config<1, kB>(args, stream);
    case ChainOperands::bf16_pairs:
      return raw ? launch_config<1, kB, true, ChainOperands::bf16_pairs>(args, stream)
                 : launch_config<1, kB, false, ChainOperands::bf16_pairs>(args, stream);
    case ChainOperands::bf16_vnew_pairs:
      return raw ? launch_config<1, kB, true, ChainOperands::bf16_vnew_pairs>(args, stream)
                 : launch_config<1, kB, false, ChainOperands::bf16_vnew_pairs>(args, stream);
    case ChainOperands::f16_scaled:
      return raw ? launch_config<1, kB, true, ChainOperands::f16_scaled>(args, stream)
                 : launch_config<1, kB, false, ChainOperands::f16_scaled>(args, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_value_halves(const OnepassArgs& args, cudaStream_t stream) {
  if (!row_offsets_fit(args.in)) return cudaErrorInvalidValue;
  if (args.raw.any()) {
    if (args.staged || args.operands != ChainOperands::bf16_vnew_pairs) return cudaErrorInvalidValue;
    return launch_halves_config<false, true>(args, stream);
  }
  if (args.operands != ChainOperands::bf16) return cudaErrorInvalidValue;
  return args.staged ? launch_halves_config<true>(args, stream)
                     : launch_halves_config<false>(args, stream);
}

int value_halves_resident_clusters() {
  cudaLaunchAttribute attribute[1];
  cudaLaunchConfig_t config;
  if (halves_launch_config<false>(2, nullptr, attribute, config) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, onepass_halves_kernel<false>, &config) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return clusters;
}

cudaError_t launch_helpers(const OnepassArgs& args, cudaStream_t stream) {
  if (!row_offsets_fit(args.in) || args.raw.any() || args.operands != ChainOperands::bf16) {
    return cudaErrorInvalidValue;
  }
  const int64_t chains = static_cast<int64_t>(args.in.num_seqs) * args.in.heads;
  const int64_t clusters = (chains + kHelperChains - 1) / kHelperChains;
  if (chains <= 0 || clusters * kHelperClusterCtas > 0x7fffffff) return cudaErrorInvalidValue;
  cudaLaunchAttribute attribute[1];
  cudaLaunchConfig_t config;
  cudaError_t e = helpers_launch_config(static_cast<unsigned>(clusters * kHelperClusterCtas),
                                        stream, attribute, config);
  if (e != cudaSuccess) return e;
  e = cudaLaunchKernelEx(&config, onepass_helpers_kernel, args);
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

int helper_resident_clusters() {
  cudaLaunchAttribute attribute[1];
  cudaLaunchConfig_t config;
  if (helpers_launch_config(kHelperClusterCtas, nullptr, attribute, config) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, onepass_helpers_kernel, &config) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return clusters;
}

cudaError_t launch_l2_helpers(const OnepassArgs& args, void* ring_base, int helper_ctas,
                              cudaStream_t stream) {
  const bool raw = args.raw.any();
  if (!row_offsets_fit(args.in) ||
      args.operands != (raw ? ChainOperands::bf16_vnew_pairs : ChainOperands::bf16)) {
    return cudaErrorInvalidValue;
  }
  const int64_t chains = static_cast<int64_t>(args.in.num_seqs) * args.in.heads;
  if (chains <= 0 || chains > 0x7fffffff || ring_base == nullptr) return cudaErrorInvalidValue;
  if (helper_ctas < 0) {  // the SMs the chains leave
    int device = 0, sms = 0;
    cudaError_t e = cudaGetDevice(&device);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (e != cudaSuccess) return e;
    helper_ctas = sms > chains ? sms - static_cast<int>(chains) : 0;
  }
  // The ring holds record slots for the helpers of a 132-SM device (l2_helper_ctas_max).
  if (helper_ctas > l2_helper_ctas_max(chains)) {
    helper_ctas = static_cast<int>(l2_helper_ctas_max(chains));
  }
  const L2HelperRing ring = l2_helper_ring(ring_base, static_cast<int>(chains), helper_ctas);
  cudaError_t e = cudaMemsetAsync(ring_base, 0,
                                  static_cast<size_t>(l2_helpers_zeroed_bytes(chains)), stream);
  if (e == cudaSuccess && raw) {  // the carry rows' tags: no sub-chunk's
    e = cudaMemsetAsync(ring.carry, 0xff, static_cast<size_t>(l2_helpers_carry_bytes(chains)),
                        stream);
  }
  if (e != cudaSuccess) return e;
  return raw ? launch_l2_helpers_kernel<true>(args, ring, stream)
             : launch_l2_helpers_kernel<false>(args, ring, stream);
}

cudaError_t launch_order_by_length(const int32_t* cu, int num_seqs, int32_t* order,
                                   cudaStream_t stream) {
  if (num_seqs <= 0) return cudaErrorInvalidValue;
  const unsigned blocks = static_cast<unsigned>((num_seqs + kOrderThreads - 1) / kOrderThreads);
  order_by_length_kernel<<<blocks, kOrderThreads, 0, stream>>>(cu, num_seqs, order);
  return cudaGetLastError();
}

}  // namespace kda::detail::onepass
