// Global-memory hand-overs between CTAs that share no cluster (the one pass's L2 helpers,
// onepass/l2_helpers.cuh): claim counters, counts and publication flags at GPU scope, and the
// proxy fence before a bulk copy reads a record that another CTA wrote to global memory with
// ordinary stores. PTX ISA facts used:
//   - a relaxed load that observes a release store, followed by fence.acq_rel.gpu, synchronizes
//     with the store as an acquire load would (the fence-based acquire pattern); the relaxed load
//     alone is an LDG.STRONG.GPU without a wait, so it can be issued a step before it is read;
//   - a release at GPU scope by one thread after a barrier of its warpgroup orders the whole
//     warpgroup's earlier stores before it (cumulativity: CUTLASS's GenericBarrier publishes a
//     CTA's partial tiles so, a __syncthreads then thread 0's red.release.gpu);
//   - a reader that has acquired the flag issues fence.proxy.async.global before its bulk copy
//     reads the record through the async proxy (the writer's stores were generic-proxy ones).
#pragma once

#include <cstdint>

namespace kda::detail::gpu_flags {

__device__ __forceinline__ uint32_t load_relaxed(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned long long load_relaxed(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void store_relaxed(unsigned long long* p, unsigned long long v) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;\n" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void store_release(unsigned long long* p, unsigned long long v) {
  asm volatile("st.release.gpu.global.u64 [%0], %1;\n" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void store_relaxed(uint32_t* p, uint32_t v) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void store_release(uint32_t* p, uint32_t v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
// A count in this CTA's shared memory (shared::cta address) stored with release at CTA scope: the
// thread's earlier accesses (its reads of the buffers the count frees) are ordered before it.
__device__ __forceinline__ void store_release_cta_shared(uint32_t addr, uint32_t v) {
  asm volatile("st.release.cta.shared::cta.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
// A count in this CTA's shared memory (shared::cta address) loaded with acquire at CTA scope: what
// the warp that released it did before is visible after. A plain LDS on sm_90 (no MEMBAR, unlike
// a relaxed load followed by fence.acq_rel.cta, whose MEMBAR.ALL.CTA waits for the thread's loads
// in flight: a builder's loads ahead).
__device__ __forceinline__ uint32_t load_acquire_cta_shared(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.acquire.cta.shared::cta.u32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
// Claims the next index of a counter (relaxed: the claim orders nothing by itself).
__device__ __forceinline__ uint32_t claim(uint32_t* counter) {
  uint32_t v;
  asm volatile("atom.relaxed.gpu.global.add.u32 %0, [%1], 1;\n" : "=r"(v) : "l"(counter) : "memory");
  return v;
}
__device__ __forceinline__ void add_relaxed(uint32_t* counter, uint32_t v) {
  asm volatile("red.relaxed.gpu.global.add.u32 [%0], %1;\n" ::"l"(counter), "r"(v) : "memory");
}
// The GPU's nanosecond timer (%globaltimer).
__device__ __forceinline__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}
// After a relaxed load that saw a release store: everything before that store is visible.
__device__ __forceinline__ void fence_acquire() {
  asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
}
// Orders this thread's async-proxy (bulk copy) and generic-proxy accesses to global memory.
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

}  // namespace kda::detail::gpu_flags
