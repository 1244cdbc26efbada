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
#include "l2norm_row.cuh"  // exact_pow2, group_max, group_sum
#include "onepass/record16.h"
#include "scan/scan_layout.h"  // desc_sw128

namespace kda::detail::onepass::chain {

using kda::detail::ptx::pack_bf16;
using kda::detail::ptx::pack_f16;
namespace wg = kda::detail::wgmma;
using kda::detail::scan::desc_sw128;

constexpr int kThreads = 256;                // the chain's two warpgroups
constexpr int kBuffer = 23 * 1024;           // a record (23,040 B) in a 1024-byte aligned buffer
static_assert(kBuffer >= kRecordBytes, "a record fits a buffer");
constexpr int kOTile = kSub * kDim * 2;      // O [16 tokens][128 values] bf16
constexpr int kSBO = 1024;                   // 8 rows of 128 bytes

// D[64 x 16] (+)= A[64 x 16] (registers) . B[16 x 16] (K-major descriptor), bf16 operands or,
// with kF16, fp16 (the f16_scaled chain).
#define KDA_WGMMA_M64N16K16(TYPE, SCALE_D)                                                 \
  "wgmma.mma_async.sync.aligned.m64n16k16.f32." TYPE "." TYPE                              \
  " {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, " SCALE_D ", 1, 1, 0;\n"
#define KDA_WGMMA_ACC16(m) \
  m(d[0][0]), m(d[0][1]), m(d[0][2]), m(d[0][3]), m(d[1][0]), m(d[1][1]), m(d[1][2]), m(d[1][3])
#define KDA_WGMMA_OUT(x) "=f"(x)
#define KDA_WGMMA_INOUT(x) "+f"(x)
template <bool kAccumulate, bool kF16 = false>
__device__ __forceinline__ void m64n16k16(float (&d)[2][4], const uint32_t (&a)[4], uint64_t b) {
  if constexpr (kAccumulate && kF16) {
    asm volatile(KDA_WGMMA_M64N16K16("f16", "1")
                 : KDA_WGMMA_ACC16(KDA_WGMMA_INOUT)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
  } else if constexpr (kAccumulate) {
    asm volatile(KDA_WGMMA_M64N16K16("bf16", "1")
                 : KDA_WGMMA_ACC16(KDA_WGMMA_INOUT)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
  } else if constexpr (kF16) {
    asm volatile(KDA_WGMMA_M64N16K16("f16", "0")
                 : KDA_WGMMA_ACC16(KDA_WGMMA_OUT)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
  } else {
    asm volatile(KDA_WGMMA_M64N16K16("bf16", "0")
                 : KDA_WGMMA_ACC16(KDA_WGMMA_OUT)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
  }
}
#undef KDA_WGMMA_INOUT
#undef KDA_WGMMA_OUT
#undef KDA_WGMMA_ACC16
#undef KDA_WGMMA_M64N16K16

// The bf16 (kF16: fp16) A fragment of key k-step kt from the state's accumulator tiles 2 kt,
// 2 kt + 1.
template <bool kF16 = false>
__device__ __forceinline__ void state_a(const float (&st)[16][4], int kt, uint32_t (&a)[4]) {
  const auto pack = [](float lo, float hi) { return kF16 ? pack_f16(lo, hi) : pack_bf16(lo, hi); };
  a[0] = pack(st[2 * kt][0], st[2 * kt][1]);
  a[1] = pack(st[2 * kt][2], st[2 * kt][3]);
  a[2] = pack(st[2 * kt + 1][0], st[2 * kt + 1][1]);
  a[3] = pack(st[2 * kt + 1][2], st[2 * kt + 1][3]);
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
// `in_flight` runs between the commit and the wait (work that reads neither acc nor pacc: it
// costs nothing while the products take longer than it).
struct NoWork {
  __device__ __forceinline__ void operator()() const {}
};
template <bool kPairs = false, bool kF16 = false, class InFlight = NoWork>
__device__ __forceinline__ void products_a(const float (&st)[16][4], uint64_t desc_w,
                                           uint64_t desc_qp, float (&acc)[2][4],
                                           float (&pacc)[2][4], InFlight in_flight = {}) {
  static_assert(!(kPairs && kF16), "pairs are bf16");
  uint32_t sa[8][4];  // every A fragment before the fence: no register writes between wgmmas
#pragma unroll
  for (int kt = 0; kt < 8; ++kt) state_a<kF16>(st, kt, sa[kt]);
  wg::fence();
#pragma unroll
  for (int kt = 0; kt < 8; ++kt) {
    const uint64_t off = static_cast<uint64_t>((kt >> 2) * kHalfTileBytes + (kt & 3) * 32) >> 4;
    if (kt == 0) {
      m64n16k16<false, kF16>(acc, sa[kt], desc_w + off);
      m64n16k16<false, kF16>(pacc, sa[kt], desc_qp + off);
    } else {
      m64n16k16<true, kF16>(acc, sa[kt], desc_w + off);
      m64n16k16<true, kF16>(pacc, sa[kt], desc_qp + off);
    }
  }
  wg::commit();
  in_flight();
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
      const float2 u =
          *reinterpret_cast<const float2*>(rec + rec_ut(value, token));
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

// The decays of key columns 8 j + t2, + 1 (j = 0 .. 15) from the record.
__device__ __forceinline__ void load_decays(const unsigned char* rec, int t2, float2 (&d)[16]) {
#pragma unroll
  for (int j = 0; j < 16; ++j) d[j] = *reinterpret_cast<const float2*>(rec + rec_a(8 * j + t2));
}

// One sub-chunk on the record at shared address `buf` (1024-byte aligned; `rec` the same bytes
// by pointer), chain thread tid (0 .. 255); the output rows go to `otile` as [token][value] bf16.
// The value-halves cluster (halves.cuh) runs it on one warpgroup with tid + 128 x its half (the
// rows 64 half .. +63 of the state, warps 4 half .. 4 half + 3 of the two-warpgroup step).
//   A   acc = S^T W^T, P^T = S^T QP^T
//   V   V_new^T = U^T - acc (fp32), rounded once to bf16
//   B   P^T += V_new^T AQK^T (m64n16k16), S^T = S^T diag(A) + V_new^T KG (m64n128k16)
// Every read of the record is done when this returns (both wgmma groups waited for).
// With kVnewPairs V_new is a bf16 hi + lo pair, B's two products twice (hi, then lo, into the same
// accumulators): per value row the products of step_one_group<false, true>, so the value halves'
// raw-input kernel (halves.cuh) computes the library raw path's bits.
template <bool kVnewPairs = false>
__device__ __forceinline__ void step(float (&st)[16][4], uint32_t buf, const unsigned char* rec,
                                     unsigned char* otile, int tid) {
  const int lane = tid & 31, warp = tid >> 5;
  const int t2 = 2 * (lane & 3), row0 = 16 * warp + (lane >> 2);
  float acc[2][4], pacc[2][4];
  // The decays are read while A's products run (the state itself is the products' and cannot
  // change before their wait: ptxas would wait first).
  float2 d[16];
  products_a(st, desc_sw128(buf + kRecW, 16, kSBO), desc_sw128(buf + kRecQP, 16, kSBO), acc, pacc,
             [&] { load_decays(rec, t2, d); });
  uint32_t av[4], av_low[4];
  v_new<kVnewPairs>(rec, acc, row0, t2, av, av_low);
  // S^T diag(A): key column 8 j + t2 (+1) times its decay.
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    st[j][0] *= d[j].x;
    st[j][1] *= d[j].y;
    st[j][2] *= d[j].x;
    st[j][3] *= d[j].y;
  }
  // B: pacc += V_new^T AQK^T; S^T += V_new^T KG (64 keys per 128-byte row: LBO = a key half).
  wg::fence();
  m64n16k16<true>(pacc, av, desc_sw128(buf + kRecAQK, 16, kSBO));
  wg::m64n128k16_rs_mn<true>(st, av, desc_sw128(buf + kRecKG, kHalfTileBytes, kSBO));
  if constexpr (kVnewPairs) {
    m64n16k16<true>(pacc, av_low, desc_sw128(buf + kRecAQK, 16, kSBO));
    wg::m64n128k16_rs_mn<true>(st, av_low, desc_sw128(buf + kRecKG, kHalfTileBytes, kSBO));
  }
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

// S^T <- S^T diag(A) on both halves of the one-warpgroup chain (key column 8 j + t2 (+1) times its
// decay).
__device__ __forceinline__ void decay_one_group(float (&st)[2][16][4], const unsigned char* rec,
                                                int t2) {
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
}

// step() for the one-warpgroup chain: per half, A's products and their wait (the A fragments of
// one half at a time, for the registers) and V_new; then B for both halves in one group. With
// kStatePairs the state, with kVnewPairs V_new, is a bf16 hi + lo pair (its products twice, into
// the same fp32 accumulators): both give out rel-RMS 2.7e-3 fused / 3.2e-3 explicit on
// long-memory problems instead of 3.7 / 4.1e-3, V_new's alone 3.2 / 3.6e-3 for the B phase's two
// products twice (the CPU replay, docs/perf-notes.md "The one pass's error taken apart").
template <bool kStatePairs = false, bool kVnewPairs = kStatePairs>
__device__ __forceinline__ void step_one_group(float (&st)[2][16][4], uint32_t buf,
                                               const unsigned char* rec, unsigned char* otile,
                                               int tid) {
  const int lane = tid & 31, warp = tid >> 5;
  const int t2 = 2 * (lane & 3);
  float pacc[2][2][4];
  uint32_t av[2][4], av_low[2][4];
  // (Reading the decays while the A products run, as step() does, spills 8-112 B in these
  // kernels: 32 more registers beside the whole state.)
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float acc[2][4];
    products_a<kStatePairs>(st[h], desc_sw128(buf + kRecW, 16, kSBO),
                            desc_sw128(buf + kRecQP, 16, kSBO), acc, pacc[h]);
    v_new<kVnewPairs>(rec, acc, 64 * h + 16 * warp + (lane >> 2), t2, av[h], av_low[h]);
  }
  decay_one_group(st, rec, t2);
  wg::fence();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    m64n16k16<true>(pacc[h], av[h], desc_sw128(buf + kRecAQK, 16, kSBO));
    wg::m64n128k16_rs_mn<true>(st[h], av[h], desc_sw128(buf + kRecKG, kHalfTileBytes, kSBO));
    if constexpr (kVnewPairs) {
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

// ---- The f16_scaled chain (ChainOperands::f16_scaled, the lab's one_pass16_f16): thread tid's
// value rows (half h, row hh: 64 h + 16 warp + lane / 4 + 8 hh) hold lambda S^T, lambda =
// 2^log2_lambda[h][hh], so that the state and V_new fit fp16's range with its 11 significant bits
// (bf16 has 8); every product of a row is in the same units, and O and the final state are
// multiplied by 1 / lambda. The window is the two kernels' SCAN's (outside_row_window), on b =
// max(16 bound, the last step's max |lambda V_new|). U^T comes from the record in fp32 with v's
// range and no bound beside it, so a V_new that would reach 2^14 rescales its rows before it is
// rounded: every quantity of a row (state, products, V_new) is linear in lambda, and a power of
// two is exact in fp32. The record's tiles are fp16 too (every one bounded: record16.h).
// The scale work sits where the tensor cores are busy (b0125ab put it between the A phase's wait
// and the B phase's issue, and the step took 1.2-1.3x the bf16 chain's): the state's row maxima
// while the A products run, V_new's maxima and sums and the next step's plan while the B products
// run; only V_new's overflow test (lane-local, one vote) stays between the phases.
struct RowScales {
  int log2_lambda[2][2];
  float bound[2][2];  // >= max |lambda S^T| over the row, for the state entering the step
  float vmax[2][2];   // max |lambda V_new| over the row in the last step
  bool unit;          // warp-uniform: every lambda of the warp's rows is 1
  bool replan;        // warp-uniform: a row of the warp has its b outside the window
};

// The SCAN's row-scale window (scan.cu plan_row_scales, rescale_rows, which keep their own
// copy: the library's SCAN code stays as measured): b in [2^-4, 2^13) keeps lambda.
__device__ __forceinline__ bool outside_row_window(float b) {
  return b >= 8192.0f || (b > 0.0f && b < 0.0625f);
}
__device__ __forceinline__ float window_b(const RowScales& rs, int h, int hh) {
  return fmaxf(16.0f * rs.bound[h][hh], rs.vmax[h][hh]);
}

// The change of log2 lambda that puts b into [2^11, 2^12), clamped to 2^+-126 per change and
// lambda to 2^+-100; 0 for an all-zero row or a non-finite b (a NaN or inf input, which then
// propagates).
__device__ __forceinline__ int row_scale_change(float b, int log2_lambda) {
  int change = 0;
  if (b > 0.0f && isfinite(b)) {
    int e = 0;
    frexpf(b, &e);  // 2^(e - 1) <= b < 2^e
    change = min(max(12 - e, -126), 127);
    change = min(max(log2_lambda + change, -100), 100) - log2_lambda;
  }
  return change;
}

// max |v| over row hh's entries of C fragments v[n][4] (registers 2 hh, 2 hh + 1 of each): the
// lane's part of the row (group_max<4> over the row's quad completes it).
template <int kN>
__device__ __forceinline__ float lane_row_max(const float (&v)[kN][4], int hh) {
  float m = 0.0f;
#pragma unroll
  for (int n = 0; n < kN; ++n) m = fmaxf(m, fmaxf(fabsf(v[n][2 * hh]), fabsf(v[n][2 * hh + 1])));
  return m;
}

// Whether a row of the warp has its b outside the window (one vote).
__device__ __forceinline__ void plan_rows(RowScales& rs) {
  bool outside = false;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) outside = outside || outside_row_window(window_b(rs, h, hh));
  }
  rs.replan = __any_sync(0xffffffffu, outside);
}

// lambda = 1 and the initial state's own row maxima.
__device__ __forceinline__ void init_row_scales(const float (&st)[2][16][4], RowScales& rs) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      rs.log2_lambda[h][hh] = 0;
      rs.bound[h][hh] = group_max<4>(lane_row_max(st[h], hh));
      rs.vmax[h][hh] = 0.0f;
    }
  }
  rs.unit = true;
  plan_rows(rs);
}

// Multiplies row (h, hh)'s state and bounds by 2^change and records it.
__device__ __forceinline__ void rescale_row(float (&st)[2][16][4], RowScales& rs, int h, int hh,
                                            int change) {
  const float f = exact_pow2(change);
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    st[h][j][2 * hh] *= f;
    st[h][j][2 * hh + 1] *= f;
  }
  rs.bound[h][hh] *= f;
  rs.vmax[h][hh] *= f;
  rs.log2_lambda[h][hh] += change;
}
__device__ __forceinline__ void update_unit(RowScales& rs) {
  rs.unit = __all_sync(0xffffffffu, rs.log2_lambda[0][0] == 0 && rs.log2_lambda[0][1] == 0 &&
                                        rs.log2_lambda[1][0] == 0 && rs.log2_lambda[1][1] == 0);
}

// max |x| over the lane's 16 entries of V_new (a tree: four levels, not sixteen).
__device__ __forceinline__ float lane_max(const float (&x)[2][2][4]) {
  float m[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float* p = &x[i >> 2][(i >> 1) & 1][2 * (i & 1)];
    m[i] = fmaxf(fabsf(p[0]), fabsf(p[1]));
  }
#pragma unroll
  for (int w = 4; w > 0; w >>= 1) {
#pragma unroll
    for (int i = 0; i < w; ++i) m[i] = fmaxf(m[i], m[i + w]);
  }
  return m[0];
}

// step_one_group for ChainOperands::f16_scaled (the same phases; see RowScales). `anchor`: 16
// bytes of shared memory per thread (two float2), written with the state's row maxima before the
// A products' wait and never read: ptxas sees no stall at a wgmma wait and otherwise schedules
// the maxima after it, on the chain's critical path (the SASS of the first version of this).
__device__ __forceinline__ void step_one_group_f16(float (&st)[2][16][4], RowScales& rs,
                                                   uint32_t buf, const unsigned char* rec,
                                                   unsigned char* otile, float2* anchor,
                                                   int tid) {
  const int lane = tid & 31, warp = tid >> 5;
  const int t2 = 2 * (lane & 3);
  // The plan (made while the last step's B products ran): rows whose b left its window (rare).
  if (rs.replan) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        rescale_row(st, rs, h, hh, row_scale_change(window_b(rs, h, hh), rs.log2_lambda[h][hh]));
      }
    }
    update_unit(rs);
  }
  // A and V_new^T = lambda U^T - acc in fp32, per half; while a half's products run, the exact
  // row maxima of the state entering the step (the wgmma reads its fp16 copy, not st).
  float pacc[2][2][4], x[2][2][4];  // x[h][nt][e]: token 8 nt + t2 + (e & 1), row hh = e >> 1
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float acc[2][4];
    products_a<false, true>(st[h], desc_sw128(buf + kRecW, 16, kSBO),
                            desc_sw128(buf + kRecQP, 16, kSBO), acc, pacc[h], [&] {
#pragma unroll
                              for (int hh = 0; hh < 2; ++hh) {
                                rs.bound[h][hh] = group_max<4>(lane_row_max(st[h], hh));
                              }
                              anchor[2 * tid + h] = make_float2(rs.bound[h][0], rs.bound[h][1]);
                            });
    const int row0 = 64 * h + 16 * warp + (lane >> 2);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float lambda = exact_pow2(rs.log2_lambda[h][hh]);
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const float2 u =
            *reinterpret_cast<const float2*>(rec + rec_ut(row0 + 8 * hh, 8 * nt + t2));
        x[h][nt][2 * hh] = fmaf(u.x, lambda, -acc[nt][2 * hh]);
        x[h][nt][2 * hh + 1] = fmaf(u.y, lambda, -acc[nt][2 * hh + 1]);
      }
    }
  }
  // Rows whose V_new would reach 2^14 rescale before the rounding (rare; the test is lane-local).
  if (__any_sync(0xffffffffu, lane_max(x) >= 16384.0f)) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const float b = fmaxf(16.0f * rs.bound[h][hh], group_max<4>(lane_row_max(x[h], hh)));
        const int change = outside_row_window(b) ? row_scale_change(b, rs.log2_lambda[h][hh]) : 0;
        const float f = exact_pow2(change);
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          x[h][nt][2 * hh] *= f;
          x[h][nt][2 * hh + 1] *= f;
          pacc[h][nt][2 * hh] *= f;
          pacc[h][nt][2 * hh + 1] *= f;
        }
        rescale_row(st, rs, h, hh, change);
      }
    }
    update_unit(rs);
  }
  // V_new^T rounded once to fp16; S^T diag(A).
  uint32_t av[2][4];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        av[h][2 * nt + hh] = pack_f16(x[h][nt][2 * hh], x[h][nt][2 * hh + 1]);
      }
    }
  }
  decay_one_group(st, rec, t2);
  wg::fence();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    m64n16k16<true, true>(pacc[h], av[h], desc_sw128(buf + kRecAQK, 16, kSBO));
    wg::m64n128k16_rs_mn<false>(st[h], av[h], desc_sw128(buf + kRecKG, kHalfTileBytes, kSBO));
  }
  wg::commit();
  // While B runs: the next step's bound, max |lambda S| + sum_t |lambda V_new_t| (a <= 1,
  // |KG| <= 1), V_new's row maxima, and the next step's plan.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      rs.bound[h][hh] += group_sum<4>(fabsf(x[h][0][2 * hh]) + fabsf(x[h][0][2 * hh + 1]) +
                                      fabsf(x[h][1][2 * hh]) + fabsf(x[h][1][2 * hh + 1]));
      rs.vmax[h][hh] = group_max<4>(lane_row_max(x[h], hh));
    }
  }
  plan_rows(rs);
  wg::wait<0>();
  // O^T / lambda (skipped while every lambda of the warp is 1).
  if (!rs.unit) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const float inv = exact_pow2(-rs.log2_lambda[h][hh]);
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          pacc[h][nt][2 * hh] *= inv;
          pacc[h][nt][2 * hh + 1] *= inv;
        }
      }
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) write_o(otile, pacc[h], 64 * h + 16 * warp + (lane >> 2), t2);
}

// The f16_scaled chain's final state: lambda S^T / lambda.
__device__ __forceinline__ void store_state_scaled(const float (&st)[2][16][4],
                                                   const RowScales& rs, float* final_state,
                                                   int64_t offset, int tid) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float inv[2] = {exact_pow2(-rs.log2_lambda[h][0]), exact_pow2(-rs.log2_lambda[h][1])};
    for_each_state_entry(tid + 128 * h, [&](int j, int e, int key, int value) {
      final_state[offset + key * kDim + value] = st[h][j][e] * inv[e >> 1];
    });
  }
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
