// SCAN: the transposed-state recurrence (one CTA of 8 warps per (sequence, head), S^T [128
// values][128 keys] fp32 in registers, warp w owning value rows 16 w .. +15) with every product on
// warpgroup MMA. Warpgroup g (warps 4 g .. 4 g + 3) owns value rows 64 g .. 64 g + 63, and its
// state is the accumulator of one m64n128 wgmma. Against the lab's v2t SCAN (the same recurrence
// on mma.sync, lab/src/scan_t.cu):
//   - a B operand (W, q', A_qk, kg) is read from shared memory once per warpgroup instead of
//     once per warp: ~110 KB of operand traffic per chunk instead of ~430 KB, which bound v2t
//     (docs/perf-notes.md "v2t — measured");
//   - the tensor pipe runs at wgmma's rate (kernel-design.md §5.2) and the q' product and the
//     V_new pass overlap: phase A is two commit groups, V_new waits only for the first.
// Per chunk and warpgroup (scan_layout.h has the shared-memory plan):
//   R   row scales: the state rows hold lambda S with lambda a power of two per value row,
//       changed only when a row's bound leaves its window (the bound is built under the MMAs)
//   A   acc = S^T W^T (8 x m64n64k16), then P^T = S^T q'^T (8 more); A = the fp16 state
//   V   V_new^T = U^T - acc, one fp16 rounding (the A operand of B1 and B2)
//   B1  P^T += V_new^T A_qk^T (4 x m64n64k16)      B2  S^T = S^T diag(a) + V_new^T kg (4 x m64n128)
//   O   O^T / lambda -> stmatrix.trans -> O tile c % 2 -> 16-byte rows out during chunk c + 1
// Precision (docs/precision.md): the products run in fp16, whose 11 significant bits carry 8x
// less rounding error than bf16's 8. Every B operand is bounded (the record, record.h), and
// the A operands (the state and V_new, which scale with v) are kept in fp16's range by the row
// scales: per value row, lambda keeps |lambda S| < 2^9 and |lambda U| < 2^13 (so |lambda V_new|
// stays far below 65504 too), from an upper bound on the row's max |S| and the record's bound on
// U, and away from fp16's subnormals; while a row's bound stays in its window (always, for inputs
// of ordinary scale) lambda does not change and nothing is multiplied on the chain. All of a row's
// products are in the same units, so one multiply by 1 / lambda at the output (and at the final
// state) undoes it exactly. fp32 accumulation, fixed k order, no atomics: bitwise reproducible.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "device/ptx.cuh"
#include "device/wgmma.cuh"
#include "l2norm_row.cuh"  // exact_pow2
#include "record.h"
#include "scan/scan.h"
#include "scan/scan_layout.h"
#include "scan/transposed_state.cuh"

namespace kda::detail {
namespace {

using namespace scan;  // NOLINT: the shared-memory plan and the maps are this file's vocabulary
using namespace ptx;   // NOLINT: and so are the PTX wrappers

// The row scales of this thread's two value rows h = 0, 1 (state registers 0, 1 and 2, 3): the
// state registers hold lambda_h S, lambda_h = 2^log2_lambda[h] in [2^-100, 2^100], and bound[h]
// is an upper bound on max |st| over the row for the state entering the chunk (the true max of
// the previous state plus the sum of |V_new| it was updated with: a <= 1, |kg| <= 1).
struct RowScales {
  int log2_lambda[2];
  float bound[2];
  bool unit;  // warp-uniform: lambda = 1 on all of the warp's rows (then the output is not scaled)
};

// Max over the thread's share of each row, then over the row's 4 lanes (xor 1, 2).
__device__ __forceinline__ void row_max_abs(const float (&st)[kKeyTiles][4], float (&m)[2]) {
  m[0] = m[1] = 0.0f;
#pragma unroll
  for (int j = 0; j < kKeyTiles; ++j) {
    m[0] = fmaxf(m[0], fmaxf(fabsf(st[j][0]), fabsf(st[j][1])));
    m[1] = fmaxf(m[1], fmaxf(fabsf(st[j][2]), fabsf(st[j][3])));
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    m[h] = fmaxf(m[h], __shfl_xor_sync(0xffffffffu, m[h], 1));
    m[h] = fmaxf(m[h], __shfl_xor_sync(0xffffffffu, m[h], 2));
  }
}

// The rows' max |x| over the fp16 state operand sa[k-step][A register] (A registers 0, 2 hold
// row h = 0, registers 1, 3 row h = 1: transposed.h a_tile / a_half), then over the row's 4
// lanes.
__device__ __forceinline__ void operand_row_max(const uint32_t (&sa)[kHeadDim / 16][4],
                                                float (&m)[2]) {
  __half2 m2[2] = {__float2half2_rn(0.0f), __float2half2_rn(0.0f)};
#pragma unroll
  for (int ks = 0; ks < kHeadDim / 16; ++ks) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      m2[q & 1] = __hmax2(m2[q & 1], __habs2(*reinterpret_cast<const __half2*>(&sa[ks][q])));
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float2 pair = __half22float2(m2[h]);
    m[h] = fmaxf(pair.x, pair.y);
    m[h] = fmaxf(m[h], __shfl_xor_sync(0xffffffffu, m[h], 1));
    m[h] = fmaxf(m[h], __shfl_xor_sync(0xffffffffu, m[h], 2));
  }
}

// The row scales' plan for the next chunk, made under the previous chunk's B2 (off the chain).
// With b = max(16 bound, lambda |U|max) (the record's U_BOUND > |U|max), the fp16 operands satisfy
// |lambda S| <= b / 16 and |lambda U| <= b; while b stays in [2^-4, 2^13) nothing changes (the
// common case: no multiply on the chain). Returns, warp-uniform, whether some row of the warp
// leaves that window; b[h] is kept for rescale_rows.
__device__ __forceinline__ bool plan_row_scales(const RowScales& rs, const float (&u_bound)[2],
                                                float (&b)[2]) {
  bool outside = false;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    b[h] = fmaxf(16.0f * rs.bound[h], exact_pow2(rs.log2_lambda[h]) * u_bound[h]);
    outside = outside || b[h] >= 8192.0f || (b[h] > 0.0f && b[h] < 0.0625f);
  }
  return __any_sync(0xffffffffu, outside);
}

// Rare, warp-uniform, at the top of a chunk whose plan said so: the warp's rows are rescaled so
// that b lands in [2^11, 2^12) (the change is clamped to 2^+-126 per chunk and lambda to
// 2^+-100; an all-zero row or a non-finite b, from a NaN or inf input that then propagates, keeps
// lambda). Then |V_new| <= |lambda U| + |lambda S| ||W_j||_1 stays far below 65504.
__device__ __forceinline__ void rescale_rows(const float (&b)[2], float (&st)[kKeyTiles][4],
                                             RowScales& rs) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    int change = 0;
    if (b[h] > 0.0f && isfinite(b[h])) {
      int e = 0;
      frexpf(b[h], &e);  // b < 2^e
      change = min(max(12 - e, -126), 127);
      change = min(max(rs.log2_lambda[h] + change, -100), 100) - rs.log2_lambda[h];
    }
    const float f = exact_pow2(change);
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) {
      st[j][2 * h] *= f;
      st[j][2 * h + 1] *= f;
    }
    rs.log2_lambda[h] += change;  // (rs.bound is rebuilt under this chunk's B2 before its use)
  }
  rs.unit = __all_sync(0xffffffffu, rs.log2_lambda[0] == 0 && rs.log2_lambda[1] == 0);
}

// U's multiplier lambda U_BOUND 2^-15 per row (the record stores U 2^15 / U_BOUND).
__device__ __forceinline__ void u_multipliers(const RowScales& rs, const float (&u_bound)[2],
                                              float (&u_mult)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) u_mult[h] = exact_pow2(rs.log2_lambda[h] - 15) * u_bound[h];
}

// The thread's two rows' U bounds of record c, read from global memory a chunk ahead (the
// record was written by the PREP kernel before this one started).
__device__ __forceinline__ void load_u_bounds(const char* record, int warp, int lane,
                                              float (&u_bound)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = state_value(warp, lane, 2 * h);
    u_bound[h] = __ldg(reinterpret_cast<const float*>(record + rec_u_bound(row)));
  }
}

// kValueHalves: the CTA is one warpgroup, 128 threads, owning the value rows of warpgroup
// blockIdx.z (grid (N, H, 2)): `warp` is the warp's index in the whole-chain CTA (4 z .. 4 z + 3),
// so every map and every product is the whole-chain kernel's for those rows, bit for bit (the two
// warpgroups of a chain never exchange data); each CTA copies the whole record (the twin's copy
// hits L2) and writes its 64 value columns of O. For few chains: two SMs per chain halve the
// tensor work and the shared-memory traffic on each SM's chain (launch_scan).
template <bool kValueHalves>
__global__ void __launch_bounds__(kValueHalves ? kThreads / 2 : kThreads, 1)
    scan_kernel(const ScanArgs args) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // The swizzled wgmma tiles need 1024-byte alignment; the dynamic base only promises 16.
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t sbase = (raw + 1023u) & ~1023u;
  unsigned char* const smem = smem_raw + (sbase - raw);
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = (tid >> 5) | (kValueHalves ? static_cast<int>(blockIdx.z) << 2 : 0);
  const Chain chain = cta_chain(args);

  // The state, warpgroup g's m64n128 accumulators: st[j][reg] = S[state_key(lane, j, reg)]
  // [state_value(warp, lane, reg)] (transposed.h).
  float st[kKeyTiles][4];
  load_state(args, chain, warp, lane, st);
  RowScales rs = {{0, 0}, {0.0f, 0.0f}, true};  // st holds lambda S, lambda = 1 to begin with
  row_max_abs(st, rs.bound);               // the initial state's own max
  float u_mult[2] = {0.0f, 0.0f}, inv_lambda[2] = {1.0f, 1.0f};
  // The plan for chunk c (plan_row_scales), made before the loop for chunk 0 and under chunk
  // c - 1's B2 for the others: U's bounds, b, and whether the warp rescales at c's top.
  float u_bound[2] = {0.0f, 0.0f}, plan_b[2] = {0.0f, 0.0f};
  bool rescale = false;
  if (chain.chunks > 0) {
    load_u_bounds(chain.first_record, warp, lane, u_bound);
    rescale = plan_row_scales(rs, u_bound, plan_b);
    u_multipliers(rs, u_bound, u_mult);
  }

  // Record c -> buffer c % 2 by one bulk copy, issued by thread 0, completing on mbarrier c % 2
  // (phase c / 2 of it).
  const uint32_t bars = sbase + kSBar;
  auto issue_record = [&](int64_t c) {  // called by every thread
    const uint32_t bar = bars + 8 * static_cast<uint32_t>(c & 1);
    wgmma::bulk_copy_to_smem(tid == 0, sbase + buffer(static_cast<int>(c & 1)),
                             chain.first_record + c * kRecordBytes, kCopyBytes, bar);
  };
  // Chunk c's output rows from O tile c % 2.
  auto copy_out = [&](int64_t c) {
    if constexpr (kValueHalves) {
      copy_out_rows<kThreads / 2, 8>(args, chain, c, smem, o_tile(static_cast<int>(c & 1)), tid,
                                     8 * static_cast<int>(blockIdx.z));
    } else {
      copy_out_rows(args, chain, c, smem, o_tile(static_cast<int>(c & 1)), tid);
    }
  };

  // One CTA barrier per chunk, at its top, once record c has landed. After it thread 0 issues
  // record c + 1's copy into the other buffer (whose last reads, chunk c - 1's, every thread
  // finished before the barrier; the generic and wgmma reads are complete, so the async-proxy
  // writes cannot overtake them) -- as early as possible: the scan is bound by the record
  // traffic --, every thread loads its rows' U bounds of record c + 1, issues phase A, copies
  // chunk c - 1's O tile out (its stmatrix writes are before the barrier), runs V_new and
  // phase B, and writes O tile c % 2 (last read by chunk c - 2's copy-out, before the barrier).
  if (tid == 0) {
    wgmma::mbarrier_init(bars, 1);
    wgmma::mbarrier_init(bars + 8, 1);
    wgmma::fence_mbarrier_init();
  }
  __syncthreads();  // the barriers are initialized before anyone waits on them
  if (chain.chunks > 0) issue_record(0);
  for (int64_t c = 0; c < chain.chunks; ++c) {
    wgmma::mbarrier_wait(bars + 8 * static_cast<uint32_t>(c & 1),
                         static_cast<uint32_t>((c >> 1) & 1));  // record c has landed
    __syncthreads();
    float next_u_bound[2] = {0.0f, 0.0f};
    if (c + 1 < chain.chunks) {
      issue_record(c + 1);
      load_u_bounds(chain.first_record + (c + 1) * kRecordBytes, warp, lane, next_u_bound);
    }
    const uint32_t buf = sbase + buffer(static_cast<int>(c & 1));
    const unsigned char* rec_smem = smem + buffer(static_cast<int>(c & 1));

    // ---- The row scales (rarely anything to do), then phase A: the fp16 state as the A operand
    // (C -> A: key tiles 2 ks, 2 ks + 1 are the A fragment of k-step ks), held until both groups
    // are done.
    if (rescale) {
      rescale_rows(plan_b, st, rs);
      u_multipliers(rs, u_bound, u_mult);
#pragma unroll
      for (int h = 0; h < 2; ++h) inv_lambda[h] = exact_pow2(-rs.log2_lambda[h]);
    }
    uint32_t sa[kHeadDim / 16][4];
#pragma unroll
    for (int ks = 0; ks < kHeadDim / 16; ++ks) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float* pair = &st[2 * ks + a_tile(q)][2 * a_half(q)];
        sa[ks][q] = pack_f16(pair[0], pair[1]);
      }
    }
    // The decay of the state, before the groups are issued: the fp32 state registers are the
    // accumulators of B2, and ptxas serializes wgmma around any access it cannot prove safe.
    decay_state(rec_smem, lane, st);
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

    // Under the tensor work: the first half of the next chunk's bound, the row maxima of the fp16
    // state operand (>= max |a S_c|: a <= 1; read from sa, the A registers, because ptxas makes
    // any read of an accumulator register wait for the wgmmas in flight), and the previous
    // chunk's output rows.
    float state_max[2];
    operand_row_max(sa, state_max);
    if (c > 0) copy_out(c - 1);

    // ---- V_new^T = U^T - acc (U^T unscaled from the record into lambda units), rounded once
    // to fp16, once acc's group is done.
    wgmma::wait<1>();
    uint32_t vn[kTokenTiles][2];
    float v_abs[2] = {0.0f, 0.0f};  // sum of |V_new| over the thread's tokens of each row
    v_new(buf, warp, lane, acc, u_mult, vn, &v_abs);

    // ---- Phases B1 (onto P^T, after the q' group in issue order) and B2 (onto the state).
    wgmma::fence();
#pragma unroll
    for (int kt = 0; kt < kChunk / 16; ++kt) {
      uint32_t a[4];
      v_new_a(vn, kt, a);
      wgmma::m64n64k16_rs(pq, a, desc_sw128(buf + b1_aqk(kt), 16, kSBO));
      wgmma::m64n128k16_rs_mn(st, a, desc_sw128(buf + b2_kg(kt), kKeyHalfLBO, kSBO));
    }
    wgmma::commit();
    // Under B2: the next chunk's bound, max |a S_c| + sum_t |V_new_t| per row (|kg| <= 1), and
    // its plan (U's multipliers change only with lambda, at a rescale).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      v_abs[h] += __shfl_xor_sync(0xffffffffu, v_abs[h], 1);
      v_abs[h] += __shfl_xor_sync(0xffffffffu, v_abs[h], 2);
      rs.bound[h] = state_max[h] + v_abs[h];
    }
    if (c + 1 < chain.chunks) {
#pragma unroll
      for (int h = 0; h < 2; ++h) u_bound[h] = next_u_bound[h];
      rescale = plan_row_scales(rs, u_bound, plan_b);
      u_multipliers(rs, u_bound, u_mult);
    }
    wgmma::wait<0>();

    // ---- O^T / lambda -> O tile c % 2 [token][value] (stmatrix.trans); copied out during
    // chunk c + 1. The common case lambda = 1 skips the multiplies: the epilogue is on the chain.
    const uint32_t o_dst = sbase + o_tile(static_cast<int>(c & 1));
    if (rs.unit) {
      const float unscaled[2] = {1.0f, 1.0f};
      store_o_tile(o_dst, warp, lane, pq, unscaled);
    } else {
      store_o_tile(o_dst, warp, lane, pq, inv_lambda);
    }
  }
  if (chain.chunks > 0) {
    __syncthreads();  // the last O tile is complete
    copy_out(chain.chunks - 1);
  }
  store_state(args, chain, warp, lane, st, inv_lambda);
}

}  // namespace

void launch_scan(const ScanArgs& args, cudaStream_t stream, ScanCtas ctas) {
  const char* what = "chunk_forward: scan";
  const int64_t chains = int64_t{args.seqs.num_seqs} * args.heads;
  const bool halves = ctas == ScanCtas::value_halves ||
                      (ctas == ScanCtas::automatic &&
                       scan_value_halves_pay(chains, multiprocessor_count(what)));
  const void* kernel = halves ? reinterpret_cast<const void*>(&scan_kernel<true>)
                              : reinterpret_cast<const void*>(&scan_kernel<false>);
  set_dynamic_smem(kernel, kSBytes, what, /*max_carveout=*/true);
  const unsigned n = static_cast<unsigned>(args.seqs.num_seqs);
  const unsigned heads = static_cast<unsigned>(args.heads);
  if (halves) {
    scan_kernel<true><<<dim3(n, heads, 2), kThreads / 2, kSBytes, stream>>>(args);
  } else {
    scan_kernel<false><<<dim3(n, heads), kThreads, kSBytes, stream>>>(args);
  }
  check_launch(what);
}

}  // namespace kda::detail
