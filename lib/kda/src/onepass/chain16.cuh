// One step of the 16-token chain (record16.h has the math): run by the one-pass forward's chain
// (kernel.cuh, records built in shared memory by its builder warpgroups) and by the lab's
// standalone chain (lab/experiments/scan16.cu, records by bulk copy). The 256 threads of two
// warpgroups hold the transposed state S^T [128 values][128 keys] in fp32 wgmma accumulators.
// Fragment maps: warp w owns value rows 16 w .. 16 w + 15 (the C-fragment rows g = lane / 4 and
// g + 8 of its warpgroup's m64 tiles); st[j][e] holds S^T[row(e)][key 8 j + 2 t + (e & 1)],
// row(e) = 16 w + g + 8 (e >> 1), t = lane % 4: wgmma's accumulators give each warp mma.sync's C
// fragments, and a pair of them, packed, is the A fragment of the next product (keys
// 16 kt .. +15 from tiles 2 kt, 2 kt + 1).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "device/ptx.cuh"
#include "device/wgmma.cuh"
#include "onepass/record16.h"
#include "scan/scan_layout.h"  // desc_sw128

namespace kda::detail::onepass::chain {

using kda::detail::ptx::pack_bf16;
namespace wg = kda::detail::wgmma;
using kda::detail::scan::desc_sw128;

constexpr int kThreads = 256;                // the chain's two warpgroups
constexpr int kBuffer = 23 * 1024;           // a record (23,040 B) in a 1024-byte aligned buffer
static_assert(kBuffer >= kRecordBytes, "a record fits a buffer");
constexpr int kOTile = kSub * kDim * 2;      // O [16 tokens][128 values] bf16
constexpr int kSBO = 1024;                   // 8 rows of 128 bytes

// D[64 x 16] (+)= A[64 x 16] (registers, bf16) . B[16 x 16] (K-major descriptor).
template <bool kAccumulate>
__device__ __forceinline__ void m64n16k16(float (&d)[2][4], const uint32_t (&a)[4], uint64_t b) {
  if constexpr (kAccumulate) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7},"
        " {%8, %9, %10, %11}, %12, 1, 1, 1, 0;\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]),
          "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
  } else {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7},"
        " {%8, %9, %10, %11}, %12, 0, 1, 1, 0;\n"
        : "=f"(d[0][0]), "=f"(d[0][1]), "=f"(d[0][2]), "=f"(d[0][3]), "=f"(d[1][0]),
          "=f"(d[1][1]), "=f"(d[1][2]), "=f"(d[1][3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
  }
}

// The bf16 A fragment of key k-step kt from the state's accumulator tiles 2 kt, 2 kt + 1.
__device__ __forceinline__ void state_a(const float (&st)[16][4], int kt, uint32_t (&a)[4]) {
  a[0] = pack_bf16(st[2 * kt][0], st[2 * kt][1]);
  a[1] = pack_bf16(st[2 * kt][2], st[2 * kt][3]);
  a[2] = pack_bf16(st[2 * kt + 1][0], st[2 * kt + 1][1]);
  a[3] = pack_bf16(st[2 * kt + 1][2], st[2 * kt + 1][3]);
}

// The low halves of the same fragment: bf16(x - bf16(x)) (x - bf16(x) is exact in fp32), so that
// hi + lo carries x to ~16 significant bits (the operand pairs of step_one_group<true>).
__device__ __forceinline__ float bf16_rest(float x) {
  return x - __bfloat162float(__float2bfloat16_rn(x));
}
__device__ __forceinline__ void state_a_low(const float (&st)[16][4], int kt, uint32_t (&a)[4]) {
  a[0] = pack_bf16(bf16_rest(st[2 * kt][0]), bf16_rest(st[2 * kt][1]));
  a[1] = pack_bf16(bf16_rest(st[2 * kt][2]), bf16_rest(st[2 * kt][3]));
  a[2] = pack_bf16(bf16_rest(st[2 * kt + 1][0]), bf16_rest(st[2 * kt + 1][1]));
  a[3] = pack_bf16(bf16_rest(st[2 * kt + 1][2]), bf16_rest(st[2 * kt + 1][3]));
}

// Calls f(j, e, key, value) for each of chain thread tid's (0 .. 255) state registers st[j][e].
template <class F>
__device__ __forceinline__ void for_each_state_entry(int tid, F f) {
  const int lane = tid & 31, warp = tid >> 5;
  const int t2 = 2 * (lane & 3), row0 = 16 * warp + (lane >> 2);
#pragma unroll
  for (int j = 0; j < 16; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) f(j, e, 8 * j + t2 + (e & 1), row0 + 8 * (e >> 1));
  }
}
// The state from `initial_state` ([keys][values] at `offset`; null: zeros) into the registers of
// chain thread tid (0 .. 255), and back out to `final_state`.
__device__ __forceinline__ void load_state(float (&st)[16][4], const float* initial_state,
                                           int64_t offset, int tid) {
  for_each_state_entry(tid, [&](int j, int e, int key, int value) {
    st[j][e] = initial_state == nullptr ? 0.0f : initial_state[offset + key * kDim + value];
  });
}
__device__ __forceinline__ void store_state(const float (&st)[16][4], float* final_state,
                                            int64_t offset, int tid) {
  for_each_state_entry(tid, [&](int j, int e, int key, int value) {
    final_state[offset + key * kDim + value] = st[j][e];
  });
}

// The pieces of a step, for the value rows row0, row0 + 8 of a warp's m64 tiles (t2 = 2 (lane % 4)).
// A: acc = S^T W^T, pacc = S^T QP^T (8 + 8 x m64n16k16, the state as the bf16 A operand; key
// k-step kt: key half kt / 4, +32 bytes per k16), waited for. With kPairs the state is a bf16
// hi + lo pair: the same 16 products again on the low halves, into the same accumulators, after
// the first group (the fragments' registers are reused).
template <bool kPairs = false>
__device__ __forceinline__ void products_a(const float (&st)[16][4], uint64_t desc_w,
                                           uint64_t desc_qp, float (&acc)[2][4],
                                           float (&pacc)[2][4]) {
  uint32_t sa[8][4];  // every A fragment before the fence: no register writes between wgmmas
#pragma unroll
  for (int kt = 0; kt < 8; ++kt) state_a(st, kt, sa[kt]);
  wg::fence();
#pragma unroll
  for (int kt = 0; kt < 8; ++kt) {
    const uint64_t off = static_cast<uint64_t>((kt >> 2) * kHalfTileBytes + (kt & 3) * 32) >> 4;
    if (kt == 0) {
      m64n16k16<false>(acc, sa[kt], desc_w + off);
      m64n16k16<false>(pacc, sa[kt], desc_qp + off);
    } else {
      m64n16k16<true>(acc, sa[kt], desc_w + off);
      m64n16k16<true>(pacc, sa[kt], desc_qp + off);
    }
  }
  wg::commit();
  wg::wait<0>();
  if constexpr (kPairs) {
#pragma unroll
    for (int kt = 0; kt < 8; ++kt) state_a_low(st, kt, sa[kt]);
    wg::fence();
#pragma unroll
    for (int kt = 0; kt < 8; ++kt) {
      const uint64_t off = static_cast<uint64_t>((kt >> 2) * kHalfTileBytes + (kt & 3) * 32) >> 4;
      m64n16k16<true>(acc, sa[kt], desc_w + off);
      m64n16k16<true>(pacc, sa[kt], desc_qp + off);
    }
    wg::commit();
    wg::wait<0>();
  }
}
// V: V_new^T = U^T - acc, rounded once to bf16 (with kPairs also its low half, av_low); tile nt,
// register e: token 8 nt + t2 + (e & 1), value row0 + 8 (e >> 1).
template <bool kPairs = false>
__device__ __forceinline__ void v_new(const unsigned char* rec, const float (&acc)[2][4],
                                      int row0, int t2, uint32_t (&av)[4],
                                      uint32_t (&av_low)[4]) {
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int value = row0 + 8 * hh, token = 8 * nt + t2;
      const float2 u = *reinterpret_cast<const float2*>(rec + rec_ut(value, token));
      const float x = u.x - acc[nt][2 * hh], y = u.y - acc[nt][2 * hh + 1];
      av[2 * nt + hh] = pack_bf16(x, y);
      if constexpr (kPairs) av_low[2 * nt + hh] = pack_bf16(bf16_rest(x), bf16_rest(y));
    }
  }
}
__device__ __forceinline__ void v_new(const unsigned char* rec, const float (&acc)[2][4],
                                      int row0, int t2, uint32_t (&av)[4]) {
  uint32_t unused[4];
  v_new<false>(rec, acc, row0, t2, av, unused);
}
// O: P^T -> bf16 [token][value] rows of `otile`.
__device__ __forceinline__ void write_o(unsigned char* otile, const float (&pacc)[2][4], int row0,
                                        int t2) {
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int token = 8 * nt + t2 + (e & 1), value = row0 + 8 * (e >> 1);
      *reinterpret_cast<__nv_bfloat16*>(otile + 2 * (token * kDim + value)) =
          __float2bfloat16_rn(pacc[nt][e]);
    }
  }
}

// One sub-chunk on the record at shared address `buf` (1024-byte aligned; `rec` the same bytes
// by pointer), chain thread tid (0 .. 255); the output rows go to `otile` as [token][value] bf16.
//   A   acc = S^T W^T, P^T = S^T QP^T
//   V   V_new^T = U^T - acc (fp32), rounded once to bf16
//   B   P^T += V_new^T AQK^T (m64n16k16), S^T = S^T diag(A) + V_new^T KG (m64n128k16)
// Every read of the record is done when this returns (both wgmma groups waited for).
__device__ __forceinline__ void step(float (&st)[16][4], uint32_t buf, const unsigned char* rec,
                                     unsigned char* otile, int tid) {
  const int lane = tid & 31, warp = tid >> 5;
  const int t2 = 2 * (lane & 3), row0 = 16 * warp + (lane >> 2);
  float acc[2][4], pacc[2][4];
  products_a(st, desc_sw128(buf + kRecW, 16, kSBO), desc_sw128(buf + kRecQP, 16, kSBO), acc, pacc);
  uint32_t av[4];
  v_new(rec, acc, row0, t2, av);
  // S^T diag(A): key column 8 j + t2 (+1) times its decay.
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const float2 d = *reinterpret_cast<const float2*>(rec + rec_a(8 * j + t2));
    st[j][0] *= d.x;
    st[j][1] *= d.y;
    st[j][2] *= d.x;
    st[j][3] *= d.y;
  }
  // B: pacc += V_new^T AQK^T; S^T += V_new^T KG (64 keys per 128-byte row: LBO = a key half).
  wg::fence();
  m64n16k16<true>(pacc, av, desc_sw128(buf + kRecAQK, 16, kSBO));
  wg::m64n128k16_rs_mn<true>(st, av, desc_sw128(buf + kRecKG, kHalfTileBytes, kSBO));
  wg::commit();
  wg::wait<0>();
  write_o(otile, pacc, row0, t2);
}

// ---- The chain on one warpgroup (the one-pass forward with three builders): thread tid
// (0 .. 127) holds the value rows of both halves, st[h][j][e] = S^T[64 h + row(e)][key 8 j + 2 t
// + (e & 1)], and runs each product once per half: the same wgmma shapes on the same rows, so the
// same bits as the two-warpgroup step.
__device__ __forceinline__ void load_state_one_group(float (&st)[2][16][4],
                                                     const float* initial_state, int64_t offset,
                                                     int tid) {
#pragma unroll
  for (int h = 0; h < 2; ++h) load_state(st[h], initial_state, offset, tid + 128 * h);
}
__device__ __forceinline__ void store_state_one_group(const float (&st)[2][16][4],
                                                      float* final_state, int64_t offset,
                                                      int tid) {
#pragma unroll
  for (int h = 0; h < 2; ++h) store_state(st[h], final_state, offset, tid + 128 * h);
}

// step() for the one-warpgroup chain: per half, A's products and their wait (the A fragments of
// one half at a time, for the registers) and V_new; then B for both halves in one group. With
// kPairs the state and V_new are bf16 hi + lo pairs (every product twice, into the same fp32
// accumulators): out rel-RMS 2.7e-3 fused / 3.2e-3 explicit on long-memory problems instead of
// 3.7 / 4.1e-3 (the CPU replay, docs/perf-notes.md "The one pass's error taken apart").
template <bool kPairs = false>
__device__ __forceinline__ void step_one_group(float (&st)[2][16][4], uint32_t buf,
                                               const unsigned char* rec, unsigned char* otile,
                                               int tid) {
  const int lane = tid & 31, warp = tid >> 5;
  const int t2 = 2 * (lane & 3);
  float pacc[2][2][4];
  uint32_t av[2][4], av_low[2][4];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float acc[2][4];
    products_a<kPairs>(st[h], desc_sw128(buf + kRecW, 16, kSBO),
                       desc_sw128(buf + kRecQP, 16, kSBO), acc, pacc[h]);
    v_new<kPairs>(rec, acc, 64 * h + 16 * warp + (lane >> 2), t2, av[h], av_low[h]);
  }
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const float2 d = *reinterpret_cast<const float2*>(rec + rec_a(8 * j + t2));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      st[h][j][0] *= d.x;
      st[h][j][1] *= d.y;
      st[h][j][2] *= d.x;
      st[h][j][3] *= d.y;
    }
  }
  wg::fence();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    m64n16k16<true>(pacc[h], av[h], desc_sw128(buf + kRecAQK, 16, kSBO));
    wg::m64n128k16_rs_mn<true>(st[h], av[h], desc_sw128(buf + kRecKG, kHalfTileBytes, kSBO));
    if constexpr (kPairs) {
      m64n16k16<true>(pacc[h], av_low[h], desc_sw128(buf + kRecAQK, 16, kSBO));
      wg::m64n128k16_rs_mn<true>(st[h], av_low[h],
                                 desc_sw128(buf + kRecKG, kHalfTileBytes, kSBO));
    }
  }
  wg::commit();
  wg::wait<0>();
#pragma unroll
  for (int h = 0; h < 2; ++h) write_o(otile, pacc[h], 64 * h + 16 * warp + (lane >> 2), t2);
}

// Output rows of a sub-chunk from its O tile: 16 rows of 16 16-byte units, unit tid (0 .. 255);
// rows at or after `end` are not written.
__device__ __forceinline__ void copy_out(const unsigned char* otile, __nv_bfloat16* out,
                                         int64_t out_stride, int h, int64_t first_token,
                                         int64_t end, int tid) {
  const int64_t token = first_token + (tid >> 4);
  if (token < end) {
    *reinterpret_cast<uint4*>(out + token * out_stride + static_cast<int64_t>(h) * kDim +
                              8 * (tid & 15)) =
        *reinterpret_cast<const uint4*>(otile + 16 * tid);
  }
}

}  // namespace kda::detail::onepass::chain
