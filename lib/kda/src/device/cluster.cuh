// Thread-block cluster primitives (sm_90) for the one pass's value-halves cluster
// (onepass/halves.cuh): the CTA's rank, the cluster-wide barrier, the peer CTA's shared memory and
// mbarriers, and the cluster-scope forms of the mbarrier hand-over. PTX ISA facts used:
//   - %cluster_ctarank is the CTA's rank in its cluster (0 .. size - 1); a grid launched with
//     cluster dimension (2, 1, 1) pairs blocks 2 i and 2 i + 1, ranks 0 and 1;
//   - mapa maps an address of this CTA's shared memory to the same offset in CTA `rank`'s: the
//     generic form (mapa.u64) gives a generic address that ordinary loads and stores use
//     (distributed shared memory), the .shared::cluster form a 32-bit shared::cluster address for
//     mbarrier operations;
//   - mbarrier.arrive.release.cluster makes the arriving thread's earlier writes (to any CTA of
//     the cluster) visible to a thread whose mbarrier.try_wait.acquire.cluster sees the phase
//     complete; the .cta defaults of wgmma.cuh's mbarrier_arrive / mbarrier_wait do not order
//     another CTA's writes;
//   - barrier.cluster.arrive.release + barrier.cluster.wait.acquire: every non-exited thread of
//     every CTA of the cluster; before the first access to a peer's shared memory (its mbarriers
//     initialized) and before exit (no CTA leaves while its peer may still access its memory);
//   - fence.proxy.async with no state space orders this thread's generic-proxy writes, the peer
//     CTA's shared memory included, before later async-proxy reads (the peer chain's wgmma reads
//     its record through the async proxy).
#pragma once

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
// The generic address of `p` (this CTA's shared memory) in CTA `rank`'s shared memory.
template <class T>
__device__ __forceinline__ T* peer_pointer(T* p, int rank) {
  uint64_t out;
  asm volatile("mapa.u64 %0, %1, %2;\n"
               : "=l"(out)
               : "l"(reinterpret_cast<uint64_t>(p)), "r"(static_cast<uint32_t>(rank)));
  return reinterpret_cast<T*>(out);
}
// The shared::cluster address of shared::cta address `addr` in CTA `rank`.
__device__ __forceinline__ uint32_t peer_shared(uint32_t addr, int rank) {
  uint32_t out;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
               : "=r"(out)
               : "r"(addr), "r"(static_cast<uint32_t>(rank)));
  return out;
}
// An arrival with cluster-scope release on this CTA's mbarrier `bar` (shared::cta address) or on
// a peer's (`remote`: a shared::cluster address from peer_shared).
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive_remote(uint32_t remote) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(remote)
               : "memory");
}
// Waits, with cluster-scope acquire, until the phase of parity `parity` of this CTA's mbarrier
// `bar` has completed.
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// A progress count in shared memory, written with cluster-scope release by its one writer (in
// this CTA or, `remote`, a peer's: a shared::cluster address from peer_shared) and read with
// cluster-scope acquire: monotonic, so unlike an mbarrier's phase parity a reader may be any
// number of steps behind.
__device__ __forceinline__ void store_release(uint32_t addr, uint32_t value) {
  asm volatile("st.release.cluster.shared::cta.u32 [%0], %1;\n" ::"r"(addr), "r"(value) : "memory");
}
__device__ __forceinline__ void store_release_remote(uint32_t remote, uint32_t value) {
  asm volatile("st.release.cluster.shared::cluster.u32 [%0], %1;\n" ::"r"(remote), "r"(value)
               : "memory");
}
__device__ __forceinline__ uint32_t load_acquire(uint32_t addr) {
  uint32_t value;
  asm volatile("ld.acquire.cluster.shared::cta.u32 %0, [%1];\n"
               : "=r"(value)
               : "r"(addr)
               : "memory");
  return value;
}
__device__ __forceinline__ void fence_proxy_async_all() {
  asm volatile("fence.proxy.async;\n" ::: "memory");
}

}  // namespace kda::detail::cluster
