// SCAN, variant v2t_mma: the chunk recurrence with the whole state of a (sequence, head) held
// transposed, S^T [128 values][128 keys] in fp32 mma accumulators, one CTA of 8 warps per
// (sequence, head), warp w owning value rows 16 w .. 16 w + 15 (scan_t_layout.h and the
// library's scan/transposed.h have every map and the phase list; docs/design.md "Worked plan" the
// reasons and the prediction). The library's SCAN is this recurrence on wgmma. Against the v1
// SCAN:
//   - the state is the A operand of phase A straight from the accumulators (C -> A register
//     reuse), so there is no bf16 state copy in shared memory, and V_new^T, also produced as
//     accumulators, is the A operand of phases B1 and B2: no V_new round trip either;
//   - one CTA reads each record once, where v1's four value-slice CTAs each copy and read W, q',
//     kg and A_qk (about half the shared-memory traffic per chunk and head);
//   - a warp needs only its own value rows: no CTA barrier between the phases of a chunk. Two per
//     chunk remain: the record double buffer (chunk c + 1 arrives by cp.async during chunk c) and
//     the output tile (O^T is transposed through shared memory by stmatrix for 16-byte stores).
// Roundings as v1: the state operand and V_new to bf16 once per chunk, fp32 accumulation.
// Fixed k order, no atomics: bitwise reproducible.
#include <cuda_bf16.h>

#include "device/ptx.cuh"           // lib/kda/src
#include "ladder.h"
#include "records.h"
#include "scan/scan.h"                // lib/kda/src
#include "scan/transposed_state.cuh"  // lib/kda/src
#include "scan_t_layout.h"

namespace kda::lab {
namespace {

using namespace tscan;        // NOLINT: the layout helpers are this file's vocabulary
using namespace detail::ptx;  // NOLINT: and so are the PTX wrappers
using detail::ScanArgs;
// The library SCAN's pieces of the transposed-state recurrence (scan/transposed_state.cuh).
using detail::scan::Chain;
using detail::scan::copy_out_rows;
using detail::scan::cta_chain;
using detail::scan::decay_state;
using detail::scan::kKeyTiles;
using detail::scan::kTokenTiles;
using detail::scan::load_state;
using detail::scan::store_o_tile;
using detail::scan::store_state;
using detail::scan::v_new_a;

// V_new^T = U^T - acc (fp32), rounded once to bf16, the MMA operand type of the v1 record: the
// bf16 twin of the library's v_new (scan/transposed_state.cuh), with the same register layout
// (vn[tile][half] = the pair of registers (2 half, 2 half + 1) of token tile `tile`); u_mult[h]
// is 1 here (no row scales).
__device__ __forceinline__ void v_new_bf16(uint32_t buf, int warp, int lane,
                                           const float (&acc)[kTokenTiles][4],
                                           const float (&u_mult)[2],
                                           uint32_t (&vn)[kTokenTiles][2]) {
#pragma unroll
  for (int p = 0; p < kChunk / 16; ++p) {
    uint32_t u[4];
    ldsm_x4_trans(buf + u_trans(warp, lane, p), u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int tile = 2 * p + (i >> 1);
      const int half = i & 1;
      const float2 uu = unpack_bf16(u[i]);
      vn[tile][half] = pack_bf16(uu.x * u_mult[half] - acc[tile][2 * half],
                                 uu.y * u_mult[half] - acc[tile][2 * half + 1]);
    }
  }
}

__global__ void __launch_bounds__(kThreads, 1) scan_t_kernel(const ScanArgs args) {
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sbase = smem_u32(smem);
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const Chain chain = cta_chain(args);

  float st[kKeyTiles][4];  // st[j][reg] = S[state_key(lane, j, reg)][state_value(warp, lane, reg)]
  load_state(args, chain, warp, lane, st);
  const float kUnscaled[2] = {1.0f, 1.0f};  // scan_t's state and outputs carry no row scale

  auto issue_record = [&](int64_t c) {  // record c -> buffer c % 2, one commit group
    const char* rec = chain.first_record + c * kRecord1Bytes;
    const uint32_t dst = sbase + buffer(static_cast<int>(c & 1));
    for (int e = tid; e < kCopyUnits; e += kThreads) cp_async16(dst + 16 * e, rec + 16 * e);
    cp_async_commit();
  };

  if (chain.chunks > 0) issue_record(0);
  for (int64_t c = 0; c < chain.chunks; ++c) {
    if (c + 1 < chain.chunks) {
      issue_record(c + 1);  // its buffer's last reader (chunk c - 1) passed the barrier below
      cp_async_wait_pending<1>();
    } else {
      cp_async_wait_all();
    }
    __syncthreads();  // record c visible; the O tile of chunk c - 1 copied out by every thread
    const uint32_t buf = sbase + buffer(static_cast<int>(c & 1));
    const unsigned char* rec_smem = smem + buffer(static_cast<int>(c & 1));

    // ---- Phase A: acc = S^T W^T and P^T = S^T q'^T over the 128 keys in order; A = the bf16
    // state (C -> A), B = rows of W / q' (plain ldmatrix), two token tiles per ldmatrix.
    float acc[kTokenTiles][4] = {};
    float pq[kTokenTiles][4] = {};
#pragma unroll
    for (int ks = 0; ks < kHeadDim / 16; ++ks) {
      uint32_t a[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float* pair = &st[2 * ks + a_tile(q)][2 * a_half(q)];
        a[q] = pack_bf16(pair[0], pair[1]);
      }
#pragma unroll
      for (int p = 0; p < kChunk / 16; ++p) {
        uint32_t bw[4], bq[4];
        ldsm_x4(buf + a_w(lane, p, ks), bw);
        ldsm_x4(buf + a_qp(lane, p, ks), bq);
        mma_bf16(acc[2 * p], a, bw[0], bw[1]);
        mma_bf16(acc[2 * p + 1], a, bw[2], bw[3]);
        mma_bf16(pq[2 * p], a, bq[0], bq[1]);
        mma_bf16(pq[2 * p + 1], a, bq[2], bq[3]);
      }
    }
    uint32_t vn[kTokenTiles][2];  // V_new^T = U^T - acc, bf16 A fragments
    v_new_bf16(buf, warp, lane, acc, kUnscaled, vn);

    // ---- Phase B1: O^T = P^T + V_new^T A_qk^T over the token blocks at or below the diagonal
    // (A_qk is zero above it inside the record).
#pragma unroll
    for (int p = 0; p < kChunk / 16; ++p) {
#pragma unroll
      for (int kt = 0; kt <= p; ++kt) {
        uint32_t a[4], b[4];
        v_new_a(vn, kt, a);
        ldsm_x4(buf + b1_aqk(lane, p, kt), b);
        mma_bf16(pq[2 * p], a, b[0], b[1]);
        mma_bf16(pq[2 * p + 1], a, b[2], b[3]);
      }
    }

    // ---- Phase B2 (the chain): S^T <- S^T diag(a) + V_new^T kg on the register state.
    decay_state(rec_smem, lane, st);
#pragma unroll
    for (int kt = 0; kt < kChunk / 16; ++kt) {
      uint32_t a[4];
      v_new_a(vn, kt, a);
#pragma unroll
      for (int q = 0; q < kHeadDim / 16; ++q) {
        uint32_t b[4];
        ldsm_x4_trans(buf + b2_kg(lane, q, kt), b);
        mma_bf16(st[2 * q], a, b[0], b[1]);
        mma_bf16(st[2 * q + 1], a, b[2], b[3]);
      }
    }

    // ---- O^T -> the O tile [token][value] (stmatrix.trans), then rows < n out as 16-byte rows.
    store_o_tile(sbase + kSO, warp, lane, pq, kUnscaled);
    __syncthreads();  // the O tile is complete; every read of buffer c % 2 is done
    copy_out_rows(args, chain, c, smem, kSO, tid);
  }
  store_state(args, chain, warp, lane, st, kUnscaled);
}

}  // namespace

void launch_scan_t(const ScanArgs& args, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(args.seqs.num_seqs), static_cast<unsigned>(args.heads));
  detail::set_dynamic_smem(reinterpret_cast<const void*>(&scan_t_kernel), kSBytes,
                           "chunk_forward: scan (v2t, transposed state)", /*max_carveout=*/true);
  scan_t_kernel<<<grid, kThreads, kSBytes, stream>>>(args);
  detail::check_launch("chunk_forward: scan (v2t, transposed state)");
}

}  // namespace kda::lab
