// Thin wrappers over the PTX instructions the tensor-core kernels use (sm_80+ forms that run on
// sm_90a, and a few sm_90 ones: stmatrix, the bulk store): shared-memory addresses, 16-byte
// cp.async, ldmatrix, stmatrix, mma.sync m16n8k16 and 16-bit packing. One definition for the
// PREP, the SCAN and the lab's kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace kda::detail::ptx {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(uint32_t smem_dst, const void* gmem_src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_dst), "l"(gmem_src)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}
// Waits until at most `kPending` of this thread's newest commit groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait_pending() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// ldmatrix .x4 (register i <- matrix i, rows addressed by lanes 8i..8i+7), optionally .trans.
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// stmatrix .x4 .trans (sm_90), the inverse of ldmatrix .x4 .trans: register i of lane l, the pair
// (row l >> 2, cols 2 (l & 3), +1) of matrix i, lands at stored rows 2 (l & 3), +1, column l >> 2
// of matrix i, whose 8 rows lanes 8i..8i+7 address.
__device__ __forceinline__ void stsm_x4_trans(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n"
               ::"r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// stmatrix .x4 (sm_90), the inverse of ldmatrix .x4: register i of lane l, the pair (row l >> 2,
// cols 2 (l & 3), +1) of matrix i (an mma C fragment's packed half), lands in row l >> 2 of matrix
// i, whose 8 row addresses (16 bytes each) lanes 8i..8i+7 give.
__device__ __forceinline__ void stsm_x4(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
               ::"r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// Shared-memory bytes this thread wrote (generic proxy) made visible to the async proxy (the bulk
// copy engine) that a later, barrier-ordered bulk store reads them with.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// `bytes` (a multiple of 16, both addresses 16-byte aligned) from shared to global memory by the
// bulk copy engine (cp.async.bulk, sm_90), in this thread's bulk group; commit, then wait until
// the group's shared-memory reads are done (the bytes may still be in flight to global memory:
// the kernel's end makes them visible to the next kernel).
__device__ __forceinline__ void bulk_store_to_global(void* gmem, uint32_t smem_src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(gmem),
               "r"(smem_src), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void bulk_wait_reads() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}

// d += A . B (16x8x16), fp32 accumulators; bf16 or fp16 operands.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two fp32 -> one 16-bit pair (round to nearest even), `lo` in the low half (lower column).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
__device__ __forceinline__ uint32_t pack_f16(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
// A bf16 pair (low element in the low half) as two floats. A bf16 is the top half of an fp32, so
// the low element is the word shifted up and the high one the word with its low half cleared:
// exact for every pattern (NaN payloads and subnormals included), one instruction each, where
// __bfloat1622float2 spends a byte permute and a shift on the high one (3 % of PREP's
// instructions: docs/perf-notes.md "bf16 pairs unpacked in two instructions").
__device__ __forceinline__ float2 unpack_bf16(uint32_t bits) {
  return make_float2(__uint_as_float(bits << 16), __uint_as_float(bits & 0xffff0000u));
}
__device__ __forceinline__ float2 unpack_f16(uint32_t bits) {
  return __half22float2(*reinterpret_cast<const __half2*>(&bits));
}

// 2^x by the MUFU unit alone (ex2.approx.ftz.f32: relative error below 2^-22, subnormal results
// flushed to zero). exp2f adds a range check and two multiplies around the same instruction to
// keep subnormal results, which PREP never needs: every 2^x it takes is either multiplied into a
// value rounded to bf16/fp16 afterwards (2^-22 is far below their 2^-9 / 2^-12 steps) or, when
// below 2^-126, negligible against the other terms of its sum.
__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace kda::detail::ptx
