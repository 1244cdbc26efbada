// Device pieces of the transposed-state SCAN (scan.cu, wgmma), shared with the lab's v2t SCAN
// (mma.sync): the CTA's (sequence, head) chain, the register state's load, decay and store,
// V_new^T from U^T, O^T into an O tile and the tile's rows out. Every map is transposed.h's:
// warp w owns value rows 16 w .. 16 w + 15 in both kernels, with mma.sync's C-fragment layout
// (wgmma's accumulators give each warp the same fragments).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "config.h"
#include "device/ptx.cuh"
#include "scan/scan.h"
#include "scan/scan_order.cuh"
#include "scan/transposed.h"

namespace kda::detail::scan {

inline constexpr int kKeyTiles = kHeadDim / 8;  // 16 state n-tiles per warp
inline constexpr int kTokenTiles = kChunk / 8;  // 8 output n-tiles per warp

// The (sequence, head) chain of this CTA: ranks outermost, longest sequence first
// (scan_order.cuh), so the grid's linear block index is rank * H + head.
struct Chain {
  int h;
  int64_t begin, length, chunks;
  const char* first_record;
  int64_t state_offset;  // of S[s][h] in the [N, H, 128, 128] states
};
__device__ __forceinline__ Chain cta_chain(const ScanArgs& args) {
  const int64_t linear = blockIdx.x + int64_t{gridDim.x} * blockIdx.y;
  const int rank = static_cast<int>(linear / args.heads);
  const int h = static_cast<int>(linear % args.heads);
  const int s = sequence_of_rank(args.seqs, rank);
  const auto [begin, length, chunks, first_record] = scan_chain(args, s, h);
  return {h, begin, length, chunks, first_record,
          (static_cast<int64_t>(s) * args.heads + h) * kHeadDim * kHeadDim};
}

// st[j][reg] = S[state_key(lane, j, reg)][state_value(warp, lane, reg)]: the initial state, or 0.
__device__ __forceinline__ void load_state(const ScanArgs& args, const Chain& chain, int warp,
                                           int lane, float (&st)[kKeyTiles][4]) {
#pragma unroll
  for (int j = 0; j < kKeyTiles; ++j) {
#pragma unroll
    for (int reg = 0; reg < 4; ++reg) {
      st[j][reg] = args.initial_state == nullptr
                       ? 0.0f
                       : args.initial_state[chain.state_offset +
                                            state_key(lane, j, reg) * kHeadDim +
                                            state_value(warp, lane, reg)];
    }
  }
}

// The final state from the fp32 registers (initial state or zeros when empty), times
// row_mult[h] for the thread's value rows h = 0 (registers 0, 1) and 1 (registers 2, 3): the exact
// power of two 1 / lambda that undoes the SCAN's row scale (1 for the lab's v2t).
__device__ __forceinline__ void store_state(const ScanArgs& args, const Chain& chain, int warp,
                                            int lane, const float (&st)[kKeyTiles][4],
                                            const float (&row_mult)[2]) {
  if (args.final_state == nullptr) return;
#pragma unroll
  for (int j = 0; j < kKeyTiles; ++j) {
#pragma unroll
    for (int reg = 0; reg < 4; ++reg) {
      args.final_state[chain.state_offset + state_key(lane, j, reg) * kHeadDim +
                       state_value(warp, lane, reg)] = st[j][reg] * row_mult[reg >> 1];
    }
  }
}

// S^T <- S^T diag(a): key column k of the state times the record's decay a[k] (fp32, in the
// record buffer `rec_smem`).
__device__ __forceinline__ void decay_state(const unsigned char* rec_smem, int lane,
                                            float (&st)[kKeyTiles][4]) {
#pragma unroll
  for (int j = 0; j < kKeyTiles; ++j) {
    const float2 d = *reinterpret_cast<const float2*>(rec_smem + decay(state_key(lane, j, 0)));
    st[j][0] *= d.x;
    st[j][1] *= d.y;
    st[j][2] *= d.x;
    st[j][3] *= d.y;
  }
}

// V_new^T = u_mult U^T - acc (fp32), rounded once to fp16, the MMA operand type:
// vn[tile][half] holds the pair of registers (2 half, 2 half + 1) of token tile `tile`, the form
// the C -> A reuse needs; half h is the thread's value row h, and u_mult[h] its factor (the row
// scale over the record's U scale). U^T comes from the record buffer at shared address `buf` by
// ldmatrix.trans. With abs_sum, also adds each row's sum of |V_new| (fp32, before the rounding)
// over the thread's tokens into (*abs_sum)[h] (the SCAN's state bound). (The lab's v2t SCAN has
// the bf16 twin, v_new_bf16.)
__device__ __forceinline__ void v_new(uint32_t buf, int warp, int lane,
                                      const float (&acc)[kTokenTiles][4],
                                      const float (&u_mult)[2],
                                      uint32_t (&vn)[kTokenTiles][2],
                                      float (*abs_sum)[2] = nullptr) {
#pragma unroll
  for (int p = 0; p < kChunk / 16; ++p) {
    uint32_t u[4];
    ptx::ldsm_x4_trans(buf + u_trans(warp, lane, p), u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int tile = 2 * p + (i >> 1);
      const int half = i & 1;
      const float2 uu = ptx::unpack_f16(u[i]);
      const float x = fmaf(uu.x, u_mult[half], -acc[tile][2 * half]);
      const float y = fmaf(uu.y, u_mult[half], -acc[tile][2 * half + 1]);
      vn[tile][half] = ptx::pack_f16(x, y);
      if (abs_sum != nullptr) (*abs_sum)[half] += fabsf(x) + fabsf(y);
    }
  }
}

// The A fragment of k-step kt (tokens 16 kt .. +15) from V_new^T (C -> A).
__device__ __forceinline__ void v_new_a(const uint32_t (&vn)[kTokenTiles][2], int kt,
                                        uint32_t (&a)[4]) {
#pragma unroll
  for (int q = 0; q < 4; ++q) a[q] = vn[2 * kt + a_tile(q)][a_half(q)];
}

// O^T times row_mult[h] for the thread's value row h (the SCAN's 1 / lambda; 1 for v2t), as
// bf16 -> the O tile at shared address `tile` as [token][value] rows (stmatrix.trans).
__device__ __forceinline__ void store_o_tile(uint32_t tile, int warp, int lane,
                                             const float (&pq)[kTokenTiles][4],
                                             const float (&row_mult)[2]) {
#pragma unroll
  for (int p = 0; p < kChunk / 16; ++p) {
    uint32_t o[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int t = 2 * p + (i >> 1);
      const int half = i & 1;
      o[i] = ptx::pack_bf16(pq[t][2 * half] * row_mult[half], pq[t][2 * half + 1] * row_mult[half]);
    }
    ptx::stsm_x4_trans(tile + o_trans_in_tile(warp, lane, p), o);
  }
}

// Chunk c's output rows (fewer than 64 in a tail) from the O tile at byte `tile` of `smem` to
// global memory, as 16-byte row segments (8 values): a CTA of kCtaThreads moves kSegments of each
// row's 16, from first_segment on (the whole row by default; a value-halves SCAN CTA its 8), thread
// t segment first_segment + t % kSegments of rows t / kSegments + 16 i. Rows 16 apart are
// 16 * 256 bytes apart in the tile (swz128 depends on the row only through row & 7), so a row
// costs one shared and one global address increment.
template <int kCtaThreads = kThreads, int kSegments = 16>
__device__ __forceinline__ void copy_out_rows(const ScanArgs& args, const Chain& chain, int64_t c,
                                              const unsigned char* smem, int tile, int tid,
                                              int first_segment = 0) {
  constexpr int kRowsPerRound = kCtaThreads / kSegments;
  static_assert(kRowsPerRound == 16, "16 rows per round: one address step per row");
  const int64_t left = chain.length - c * kChunk;
  const int n = left < kChunk ? static_cast<int>(left) : kChunk;
  static_assert(kSegments == 8 || kSegments == 16, "a power of two: mask and shift");
  const int u = first_segment + (tid & (kSegments - 1));
  const int row = tid >> (kSegments == 16 ? 4 : 3);
  const unsigned char* src = smem + tile + o_row_in_tile(row, u);
  __nv_bfloat16* dst = args.out + (chain.begin + c * kChunk + row) * args.out_stride +
                       static_cast<int64_t>(chain.h) * kHeadDim + 8 * u;
  const int64_t dst_step = kRowsPerRound * args.out_stride;
  // Unrolled for whole rows; a loop for half rows, where the unrolled copies' hoisted loads
  // (under phase A's wgmmas, scan.cu) made ptxas inject a warpgroup.arrive (C7519).
#pragma unroll (kSegments == 16 ? kChunk / kRowsPerRound : 1)
  for (int token = row, i = 0; i < kChunk / kRowsPerRound; ++i, token += kRowsPerRound) {
    if (token < n) {
      *reinterpret_cast<uint4*>(dst) =
          *reinterpret_cast<const uint4*>(src + i * (2 * kRowsPerRound * 128));
    }
    dst += dst_step;
  }
}

}  // namespace kda::detail::scan
