// SCAN, variant v2w_mma: scan_t's transposed-state recurrence (one CTA of 8 warps per (sequence,
// head), S^T [128 values][128 keys] fp32 in registers, warp w owning value rows 16 w .. +15) with
// every product on warpgroup MMA. Warpgroup g (warps 4 g .. 4 g + 3) owns value rows
// 64 g .. 64 g + 63, and its state is the accumulator of one m64n128 wgmma. Against scan_t:
//   - a B operand (W, q', A_qk, kg) is read from shared memory once per warpgroup instead of
//     once per warp: ~110 KB of operand traffic per chunk instead of ~430 KB, which bound scan_t
//     (docs/perf-notes.md "v2t — measured");
//   - the tensor pipe runs at wgmma's rate (kernel-design.md §5.2) and the q' product and the
//     V_new pass overlap: phase A is two commit groups, V_new waits only for the first.
// Per chunk and warpgroup (scan_w.h has the shared-memory plan):
//   A   acc = S^T W^T (8 x m64n64k16), then P^T = S^T q'^T (8 more); A = the bf16 state
//   V   V_new^T = U^T - acc, one bf16 rounding (the A operand of B1 and B2)
//   B1  P^T += V_new^T A_qk^T (4 x m64n64k16)      B2  S^T = S^T diag(a) + V_new^T kg (4 x m64n128)
//   O   O^T -> stmatrix.trans -> O tile c % 2 -> 16-byte rows out during chunk c + 1
// Roundings as v1 and scan_t (state operand and V_new to bf16 once per chunk, fp32 accumulation);
// fixed k order, no atomics: bitwise reproducible.
#include <cuda_bf16.h>

#include "ptx.cuh"
#include "scan_transposed.cuh"
#include "scan_v1.cuh"
#include "scan_w.h"
#include "wgmma.cuh"

namespace kda::detail {
namespace {

using namespace wscan;  // NOLINT: the shared-memory plan is this file's vocabulary
using namespace ptx;    // NOLINT: and so are the PTX wrappers
using tscan::a_half;
using tscan::a_tile;
using tscan::Chain;
using tscan::kKeyTiles;
using tscan::kTokenTiles;

__global__ void __launch_bounds__(kThreads, 1) scan_w_kernel(const ScanArgs args) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // The swizzled wgmma tiles need 1024-byte alignment; the dynamic base only promises 16.
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t sbase = (raw + 1023u) & ~1023u;
  unsigned char* const smem = smem_raw + (sbase - raw);
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const Chain chain = tscan::cta_chain(args);

  // The state, warpgroup g's m64n128 accumulators: st[j][reg] = S[state_key(lane, j, reg)]
  // [state_value(warp, lane, reg)] (scan_t.h).
  float st[kKeyTiles][4];
  tscan::load_state(args, chain, warp, lane, st);

  auto issue_record = [&](int64_t c) {  // record c -> buffer c % 2, one commit group
    const char* rec = chain.first_record + c * kRecord1Bytes;
    const uint32_t dst = sbase + buffer(static_cast<int>(c & 1));
    for (int e = tid; e < kCopyUnits; e += kThreads) cp_async16(dst + copy_dst(e), rec + 16 * e);
    cp_async_commit();
  };
  // Chunk c's output rows from O tile c % 2.
  auto copy_out = [&](int64_t c) {
    tscan::copy_out_rows(args, chain, c, smem, o_tile(static_cast<int>(c & 1)), tid, kThreads);
  };

  // One CTA barrier per chunk, at its top. After it a thread issues record c + 1's copy into the
  // other buffer (whose last reads, chunk c - 1's, every thread finished before the barrier) --
  // as early as possible: the scan is bound by the record traffic --, issues phase A, copies
  // chunk c - 1's O tile out (its stmatrix writes are before the barrier), runs V_new and
  // phase B, and writes O tile c % 2 (last read by chunk c - 2's copy-out, before the barrier).
  if (chain.chunks > 0) issue_record(0);
  for (int64_t c = 0; c < chain.chunks; ++c) {
    cp_async_wait_all();              // record c, the only copy in flight
    wgmma::fence_proxy_async_smem();  // this thread's copies -> visible to wgmma's reads
    __syncthreads();
    if (c + 1 < chain.chunks) issue_record(c + 1);
    const uint32_t buf = sbase + buffer(static_cast<int>(c & 1));
    const unsigned char* rec_smem = smem + buffer(static_cast<int>(c & 1));

    // ---- Phase A: the bf16 state as the A operand (C -> A: key tiles 2 ks, 2 ks + 1 are the
    // A fragment of k-step ks), held until both groups are done.
    uint32_t sa[kHeadDim / 16][4];
#pragma unroll
    for (int ks = 0; ks < kHeadDim / 16; ++ks) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float* pair = &st[2 * ks + a_tile(q)][2 * a_half(q)];
        sa[ks][q] = pack_bf16(pair[0], pair[1]);
      }
    }
    // The decay of the state, before the groups are issued: the fp32 state registers are the
    // accumulators of B2, and ptxas serializes wgmma around any access it cannot prove safe.
    tscan::decay_state(rec_smem, lane, st);
    float acc[kTokenTiles][4];
    float pq[kTokenTiles][4];
    wgmma::fence();
    wgmma::m64n64k16_rs_first(acc, sa[0], desc_sw128(buf + a_w(0), 16, kSBO));
#pragma unroll
    for (int ks = 1; ks < kHeadDim / 16; ++ks) {
      wgmma::m64n64k16_rs(acc, sa[ks], desc_sw128(buf + a_w(ks), 16, kSBO));
    }
    wgmma::commit();
    wgmma::m64n64k16_rs_first(pq, sa[0], desc_sw128(buf + a_qp(0), 16, kSBO));
#pragma unroll
    for (int ks = 1; ks < kHeadDim / 16; ++ks) {
      wgmma::m64n64k16_rs(pq, sa[ks], desc_sw128(buf + a_qp(ks), 16, kSBO));
    }
    wgmma::commit();

    // Under the tensor work: the previous chunk's output rows.
    if (c > 0) copy_out(c - 1);

    // ---- V_new^T = U^T - acc, rounded once to bf16, once acc's group is done.
    wgmma::wait<1>();
    uint32_t vn[kTokenTiles][2];
    tscan::v_new(buf, warp, lane, acc, vn);

    // ---- Phases B1 (onto P^T, after the q' group in issue order) and B2 (onto the state).
    wgmma::fence();
#pragma unroll
    for (int kt = 0; kt < kChunk / 16; ++kt) {
      uint32_t a[4];
      tscan::v_new_a(vn, kt, a);
      wgmma::m64n64k16_rs(pq, a, desc_sw128(buf + b1_aqk(kt), 16, kSBO));
      wgmma::m64n128k16_rs_mn(st, a, desc_sw128(buf + b2_kg(kt), kKeyHalfLBO, kSBO));
    }
    wgmma::commit();
    wgmma::wait<0>();

    // ---- O^T -> O tile c % 2 [token][value] (stmatrix.trans); copied out during chunk c + 1.
    tscan::store_o_tile(sbase + o_tile(static_cast<int>(c & 1)), warp, lane, pq);
  }
  if (chain.chunks > 0) {
    __syncthreads();  // the last O tile is complete
    copy_out(chain.chunks - 1);
  }
  tscan::store_state(args, chain, warp, lane, st);
}

}  // namespace

void launch_scan_w(const ScanArgs& args, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(args.seqs.num_seqs), static_cast<unsigned>(args.heads));
  set_dynamic_smem(reinterpret_cast<const void*>(&scan_w_kernel), kSBytes,
                   "chunk_forward: scan (v2w, wgmma)", /*max_carveout=*/true);
  scan_w_kernel<<<grid, kThreads, kSBytes, stream>>>(args);
  check_launch("chunk_forward: scan (v2w, wgmma)");
}

}  // namespace kda::detail
