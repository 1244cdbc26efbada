// Warpgroup MMA (wgmma, sm_90a only) for the SCAN (scan/scan.cu): the fences and groups, and the
// register-A shapes that kernel issues (m64n64k16 accumulating or starting from zero, m64n128k16
// with an MN-major B), and the bulk copies that feed it. PTX ISA facts used:
//   - wgmma.mma_async m64nNk16, fp16 in (the record's factors and the scan's scaled state and
//     V_new, docs/precision.md), fp32 accumulate, issued by the 4 warps of a warpgroup;
//     warp w of the group owns rows 16 w .. 16 w + 15 of A and D. The register A fragment of a
//     warp is mma.sync m16n8k16's (device/fragments.h), and D register 4 j + r of a thread is
//     mma.sync C register r of n8 tile j: the accumulators of one product are the A operand of
//     the next after a pairwise fp16 pack, as the lab's mma.sync SCANs do with bf16.
//   - B comes from shared memory through a 64-bit descriptor (scan/scan_layout.h desc_sw128,
//     where the canonical 128-byte-swizzle layouts are spelled out and emulated by a CPU test).
//   - wgmma.fence before the first wgmma that reads registers written by other instructions;
//     commit_group / wait_group N; registers of an in-flight wgmma are not touched until its
//     group is waited for.
//   - The B operands arrive by bulk copy (the async proxy, like wgmma's reads), so no proxy fence
//     stands between the copy and the wgmmas that read it.
#pragma once

#include <cstdint>

namespace kda::detail::wgmma {

__device__ __forceinline__ void fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// ---- Bulk copies into shared memory (the TMA unit, async proxy) and the mbarriers they complete
// on. PTX ISA facts used: cp.async.bulk.shared::cluster.global with mbarrier::complete_tx::bytes
// moves `bytes` (a multiple of 16, 16-byte aligned addresses; a CTA's own shared addresses are
// valid shared::cluster addresses) and counts them against the barrier's expected transaction
// bytes; the phase completes when the arrival count (here 1, the expect_tx arrival) and the
// bytes are both in. Writes of the async proxy are visible to wgmma (same proxy) and, after the
// phase is observed by try_wait, to the observing thread's ordinary loads.
__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}
// Makes initialized mbarriers visible to the async proxy (before the first bulk copy uses them).
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// Issued only by the threads with `issue` set, but called by all: the predicate stays inside the
// asm, because a divergent branch around it makes ptxas serialize every wgmma of the kernel
// (C7520: a compiler-inserted warpgroup arrive in a divergent path).
__device__ __forceinline__ void bulk_copy_to_smem(bool issue, uint32_t dst, const void* src,
                                                  uint32_t bytes, uint32_t bar) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.u32 p, %0, 0;\n"
      "@p mbarrier.arrive.expect_tx.shared::cta.b64 _, [%4], %3;\n"
      "@p cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%1], [%2], %3, [%4];\n"
      "}\n" ::"r"(static_cast<uint32_t>(issue)),
      "r"(dst), "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}
// A plain arrival (release at CTA scope: the arriving thread's earlier writes, and those it
// observed through a barrier, are visible to a thread whose wait sees the phase complete).
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Waits until the phase of parity `parity` of the barrier has completed.
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// D[64 x 64] += A[64 x 16] (registers) . B[16 x 64] (K-major descriptor); d[j][r] = n8 tile j.
__device__ __forceinline__ void m64n64k16_rs(float (&d)[8][4], const uint32_t (&a)[4],
                                             uint64_t desc_b) {
  asm volatile(
      "{\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31},"
      " {%32, %33, %34, %35}, %36, 1, 1, 1, 0;\n"
      "}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]),
        "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]),
        "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]),
        "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
        "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]),
        "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
        "+f"(d[7][2]), "+f"(d[7][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}

// D[64 x 64] = A[64 x 16] . B[16 x 64] (scale-d 0: the accumulators are outputs only, so no
// zeroing instructions land between the fence and the wgmma).
__device__ __forceinline__ void m64n64k16_rs_first(float (&d)[8][4], const uint32_t (&a)[4],
                                                   uint64_t desc_b) {
  asm volatile(
      "{\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31},"
      " {%32, %33, %34, %35}, %36, 0, 1, 1, 0;\n"
      "}\n"
      : "=f"(d[0][0]), "=f"(d[0][1]), "=f"(d[0][2]), "=f"(d[0][3]), "=f"(d[1][0]),
        "=f"(d[1][1]), "=f"(d[1][2]), "=f"(d[1][3]), "=f"(d[2][0]), "=f"(d[2][1]),
        "=f"(d[2][2]), "=f"(d[2][3]), "=f"(d[3][0]), "=f"(d[3][1]), "=f"(d[3][2]),
        "=f"(d[3][3]), "=f"(d[4][0]), "=f"(d[4][1]), "=f"(d[4][2]), "=f"(d[4][3]),
        "=f"(d[5][0]), "=f"(d[5][1]), "=f"(d[5][2]), "=f"(d[5][3]), "=f"(d[6][0]),
        "=f"(d[6][1]), "=f"(d[6][2]), "=f"(d[6][3]), "=f"(d[7][0]), "=f"(d[7][1]),
        "=f"(d[7][2]), "=f"(d[7][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}

// D[64 x 128] += A[64 x 16] (registers) . B[16 x 128] (MN-major descriptor: trans-b 1), fp16
// operands (the library's SCAN) or, with kBf16, bf16 (the lab's 16-token chain). The asm text and
// the 64 accumulator operands are written once, for both types.
#define KDA_WGMMA_M64N128K16_MN(TYPE)                                                   \
  "{\n"                                                                                 \
  "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {"                     \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"                \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"      \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"      \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63},"     \
  " {%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"                                           \
  "}\n"
#define KDA_WGMMA_ACC128(d) \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), \
  "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), \
  "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), \
  "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
  "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), \
  "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), \
  "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), \
  "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), \
  "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), \
  "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), \
  "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
template <bool kBf16 = false>
__device__ __forceinline__ void m64n128k16_rs_mn(float (&d)[16][4], const uint32_t (&a)[4],
                                                 uint64_t desc_b) {
  if constexpr (kBf16) {
    asm volatile(KDA_WGMMA_M64N128K16_MN("bf16")
                 : KDA_WGMMA_ACC128(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
  } else {
    asm volatile(KDA_WGMMA_M64N128K16_MN("f16")
                 : KDA_WGMMA_ACC128(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
  }
}
#undef KDA_WGMMA_ACC128
#undef KDA_WGMMA_M64N128K16_MN

}  // namespace kda::detail::wgmma
