// Thread-block cluster primitives (sm_90) for the one pass's clusters (onepass/halves.cuh,
// onepass/helpers.cuh): the CTA's rank, the cluster-wide barrier, a peer CTA's shared memory, the
// bulk copy of a record into a peer's shared memory and the hand-overs around it, and the host's
// launch configuration. PTX ISA facts used:
//   - %cluster_ctarank is the CTA's rank in its cluster (0 .. size - 1); a grid launched with
//     cluster dimension (2, 1, 1) pairs blocks 2 i and 2 i + 1, ranks 0 and 1;
//   - mapa.shared::cluster maps a shared::cta address to the same offset in CTA `rank`'s shared
//     memory (a 32-bit shared::cluster address for mbarriers, stores and bulk copies);
//   - cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes copies bytes of this
//     CTA's shared memory (16-byte aligned, a multiple of 16) into a peer's through the async
//     proxy and completes that many transaction bytes on an mbarrier of the destination CTA; an
//     mbarrier's phase completes when its pending arrivals and its transaction count are both
//     zero, and the count may go below zero while an arrival is pending, so the copy may land
//     before or after the arrive.expect_tx that announces it;
//   - a buffer is freed by a relaxed store of a count after its readers' wgmma groups are waited
//     for (no read of it is outstanding; CUTLASS's cluster pipelines free a buffer that a peer
//     then overwrites by bulk copy with the default .release.cta arrive, no stronger);
//   - barrier.cluster.arrive.release + barrier.cluster.wait.acquire: every non-exited thread of
//     every CTA of the cluster; before the first access to a peer's shared memory (its mbarriers
//     initialized) and before exit (no CTA leaves while its peer may still access its memory).
// What the cluster-scope orderings cost (nvcc 13.0, sm_90a SASS): a .release.cluster arrive or
// store, and fence.proxy.async without a state space, are a MEMBAR.ALL.GPU each (the thread waits
// for every memory operation it has in flight); an .acquire.cluster wait or load adds a
// CCTL.IVALL (the L1's lines dropped). dd78659's halves paid three MEMBAR.ALL.GPU a builder
// thread a build and ran no faster than one CTA a chain (results/h200/
// 2026-12-07-dd78659-halves-h100); nothing here uses them in a loop: the record crosses by bulk
// copy, the counts are relaxed.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kda::detail::cluster {

__device__ __forceinline__ int cta_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return static_cast<int>(r);
}
__device__ __forceinline__ void sync() {
  asm volatile(
      "barrier.cluster.arrive.release;\n"
      "barrier.cluster.wait.acquire;\n" ::
          : "memory");
}
// The shared::cluster address of shared::cta address `addr` in CTA `rank`.
__device__ __forceinline__ uint32_t peer_shared(uint32_t addr, int rank) {
  uint32_t out;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
               : "=r"(out)
               : "r"(addr), "r"(static_cast<uint32_t>(rank)));
  return out;
}
// Copies `bytes` of this CTA's shared memory at `src` (shared::cta) to `dst` in a peer
// (shared::cluster), announced on the peer's mbarrier `remote_bar` as one arrival expecting
// those bytes. One thread; the bytes must be visible to the async proxy first
// (ptx::fence_proxy_async_shared by every thread that wrote them, then a barrier).
__device__ __forceinline__ void copy_to_peer(uint32_t dst, uint32_t src, uint32_t bytes,
                                             uint32_t remote_bar) {
  asm volatile(
      "mbarrier.arrive.expect_tx.shared::cluster.b64 _, [%2], %3;\n"
      "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %3, "
      "[%2];\n" ::"r"(dst),
      "r"(src), "r"(remote_bar), "r"(bytes)
      : "memory");
}
// A progress count in shared memory (monotonic, one writer), written relaxed at cluster scope in
// this CTA or, `remote`, in a peer (a shared::cluster address from peer_shared), and read relaxed:
// unlike an mbarrier's phase parity a reader may be any number of steps behind. The count only
// frees buffers (the writer's reads of them are done before it stores), so nothing is acquired.
__device__ __forceinline__ void store_count(uint32_t addr, uint32_t value) {
  asm volatile("st.relaxed.cluster.shared::cta.u32 [%0], %1;\n" ::"r"(addr), "r"(value) : "memory");
}
__device__ __forceinline__ void store_count_remote(uint32_t remote, uint32_t value) {
  asm volatile("st.relaxed.cluster.shared::cluster.u32 [%0], %1;\n" ::"r"(remote), "r"(value)
               : "memory");
}
__device__ __forceinline__ uint32_t load_count(uint32_t addr) {
  uint32_t value;
  asm volatile("ld.relaxed.cluster.shared::cta.u32 %0, [%1];\n"
               : "=r"(value)
               : "r"(addr)
               : "memory");
  return value;
}

// The launch configuration of `kernel` over `grid` CTAs of `threads` threads in clusters of
// `cluster_ctas` along x, each with `smem` bytes of dynamic shared memory (`attribute` holds the
// cluster dimension the configuration points at); returns the error of allowing that much
// shared memory.
template <class Kernel>
inline cudaError_t launch_config(Kernel kernel, unsigned grid, unsigned threads, int smem,
                                 unsigned cluster_ctas, cudaStream_t stream,
                                 cudaLaunchAttribute (&attribute)[1], cudaLaunchConfig_t& config) {
  const cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  config = cudaLaunchConfig_t{};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = static_cast<size_t>(smem);
  config.stream = stream;
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = cluster_ctas;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  return e;
}

}  // namespace kda::detail::cluster
