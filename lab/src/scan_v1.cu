// SCAN, variant v1_mma: the chunk recurrence on tensor cores (mma.sync m16n8k16, bf16 operands,
// fp32 accumulators), one CTA per (sequence, head, 32-column value slice) like v0.
//
// Per 64-token chunk (kda-forward.md §2.2, kernel-design.md §4.1), with the fp32 state slice
// S[128 keys][32 cols] held in registers as mma accumulators for the whole sequence (warp w owns
// keys 16w..16w+15) and a bf16 copy of it in shared memory as the B operand of phase A:
//   A   V_new = U - W S,  P = q' S          (64x128 . 128x32; bf16 S copy; V_new -> smem bf16)
//   B2  S <- diag(a) S + kg^T V_new          (128x64 . 64x32, accumulating into the registers)
//   B1  O = P + A_qk V_new                   (64x64 . 64x32, causal k-blocks only) -> out bf16
// Every address comes from scan_v1_layout.h (shared with the CPU emulation test). The record is
// loaded with 16-byte cp.async in two groups so each overlaps the phase that does not need it:
//   barrier X | issue KGA(c) (kg, A_qk, a) | phase A(c) | wait | barrier Y |
//   issue WQU(c+1) (W, q', U slice) | phases B2, B1 (c) | wait | barrier X ...
// Single buffer (74 KB of shared memory) so three CTAs share an SM and hide each other's
// latencies. Packed batches are scanned longest sequence first (scan_v1_kernel's CTA map).
// Fixed k order, no atomics: bitwise reproducible (the CTA map changes no arithmetic).
#include <cuda_bf16.h>

#include "device/ptx.cuh"     // lib/kda/src
#include "ladder.h"
#include "records.h"
#include "scan/scan.h"          // lib/kda/src
#include "scan/scan_order.cuh"  // lib/kda/src
#include "scan_v1_layout.h"

namespace kda::lab {
namespace {

using namespace v1;           // NOLINT: the layout helpers are this file's vocabulary
using namespace detail::ptx;  // NOLINT: and so are the PTX wrappers
using detail::ScanArgs;

constexpr int kThreads = kWarps * 32;
constexpr int kBV = kScanSliceColumns;
static_assert(kBV == 32 && kThreads == 256, "the v1 work split assumes 32 columns, 8 warps");

__global__ void __launch_bounds__(kThreads, 3) scan_v1_kernel(const ScanArgs args) {
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sbase = smem_u32(smem);
  auto word = [&](int byte) -> uint32_t& { return *reinterpret_cast<uint32_t*>(smem + byte); };
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;

  // Which (sequence, head, value slice) this CTA scans. CTAs are handed out in launch order, so
  // the linear block index runs over ranks of the sequences, then heads, then slices: the value
  // slices of one (sequence, head) are adjacent (they run together and share the W / q' / kg /
  // A_qk reads through L2), and every head of a sequence is launched before the next sequence.
  // Ranks follow the sequences' lengths, longest first (packed batches of at most
  // kLongestFirstMaxSeqs sequences): the longest chains start in the first wave instead of
  // wherever their index puts them, so they do not run alone at the end (a ragged batch's scan
  // takes as long as its slowest wave, and varied from call to call with where its longest chains
  // landed). The grid keeps the (4 N, H) shape: only its linear index is decoded this way.
  const int64_t linear = blockIdx.x + int64_t{gridDim.x} * blockIdx.y;
  const int64_t per_rank = int64_t{kScanSlices} * args.heads;
  const int rank = static_cast<int>(linear / per_rank);
  const int h = static_cast<int>((linear % per_rank) / kScanSlices);
  const int slice = static_cast<int>(linear % kScanSlices);
  const int col0 = slice * kBV;
  const int s = detail::sequence_of_rank(args.seqs, rank);
  const auto [begin, length, chunks, first_record] = detail::scan_chain(args, s, h);
  const int64_t state_offset = (static_cast<int64_t>(s) * args.heads + h) * kHeadDim * kHeadDim +
                               col0;

  // ---- State: st[j][2 half + e] = S[state_row(warp, lane, half)][state_col(lane, j) + e] (the C
  // fragments of the warp's 16 keys x 4 n tiles), fp32 for the whole sequence; bf16 copy in smem.
  float st[4][4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float2 v = make_float2(0.0f, 0.0f);
      if (args.initial_state != nullptr) {
        v = *reinterpret_cast<const float2*>(args.initial_state + state_offset +
                                             state_row(warp, lane, half) * kHeadDim +
                                             state_col(lane, j));
      }
      st[j][2 * half] = v.x;
      st[j][2 * half + 1] = v.y;
      word(sb_pair(warp, lane, j, half)) = pack_bf16(v.x, v.y);
    }
  }

  // ---- Record copies (scan_v1_layout.h copy plan).
  static_assert(kCopyWQ % kThreads == 0 && kCopyU == kThreads && kCopyKA % kThreads == 0 &&
                kCopyA <= kThreads, "copy loops assume whole rounds of 256 16-byte copies");
  auto issue_wqu = [&](const char* rec) {  // W, q' (contiguous), this CTA's U slice
#pragma unroll
    for (int k = 0; k < kCopyWQ / kThreads; ++k) {
      const int e = tid + k * kThreads;
      cp_async16(sbase + kS1W + 16 * e, rec + kRec1W + 16 * e);
    }
    cp_async16(sbase + kS1U + 16 * tid, rec + kRec1U + slice * kRec1USlice + 16 * tid);
    cp_async_commit();
  };
  auto issue_kga = [&](const char* rec) {  // kg, A_qk (contiguous), a
#pragma unroll
    for (int k = 0; k < kCopyKA / kThreads; ++k) {
      const int e = tid + k * kThreads;
      cp_async16(sbase + kS1KG + 16 * e, rec + kRec1KG + 16 * e);
    }
    if (tid < kCopyA) cp_async16(sbase + kS1A + 16 * tid, rec + kRec1A + 16 * tid);
    cp_async_commit();
  };

  if (chunks > 0) issue_wqu(first_record);
  for (int64_t c = 0; c < chunks; ++c) {
    const char* rec = first_record + c * kRecord1Bytes;
    const int64_t left = length - c * kChunk;
    const int n = left < kChunk ? static_cast<int>(left) : kChunk;

    cp_async_wait_all();  // WQU(c)
    __syncthreads();      // X: WQU(c) and the bf16 state visible; phase B(c-1) done with kg, A_qk
    issue_kga(rec);

    // ---- Phase A: warp tile = token rows out_m0 .. +15 x columns out_n0 .. +15 (2 n tiles);
    // k-loop over the 128 keys in order.
    float vw[2][4] = {};  // W S
    float pq[2][4] = {};  // q' S, continued by phase B1
#pragma unroll
    for (int ks = 0; ks < kHeadDim / 16; ++ks) {
      uint32_t aw[4], aq[4], b[4];
      ldsm_x4(sbase + pa_w(warp, lane, ks), aw);
      ldsm_x4(sbase + pa_qp(warp, lane, ks), aq);
      ldsm_x4_trans(sbase + pa_s(warp, lane, ks), b);
      mma_bf16(vw[0], aw, b[0], b[1]);
      mma_bf16(vw[1], aw, b[2], b[3]);
      mma_bf16(pq[0], aq, b[0], b[1]);
      mma_bf16(pq[1], aq, b[2], b[3]);
    }
    // V_new = U - W S (fp32), rounded once to bf16: the B operand of phases B1 and B2.
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float2 u = unpack_bf16(word(u_pair(warp, lane, j, half)));
        word(vn_pair(warp, lane, j, half)) =
            pack_bf16(u.x - vw[j][2 * half], u.y - vw[j][2 * half + 1]);
      }
    }

    cp_async_wait_all();  // KGA(c)
    __syncthreads();      // Y: V_new, kg, A_qk, a visible; phase A done with W, q', U, S copy
    if (c + 1 < chunks) issue_wqu(rec + kRecord1Bytes);

    // ---- Phase B2 (the chain): S <- diag(a) S + kg^T V_new on the register state; then the
    // bf16 copy for the next chunk's phase A (each warp rewrites its own 16 keys; every read of
    // the copy by phase A happened before barrier Y).
    {
      const float a_lo = *reinterpret_cast<const float*>(smem + kS1A +
                                                          4 * state_row(warp, lane, 0));
      const float a_hi = *reinterpret_cast<const float*>(smem + kS1A +
                                                          4 * state_row(warp, lane, 1));
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        st[j][0] *= a_lo;
        st[j][1] *= a_lo;
        st[j][2] *= a_hi;
        st[j][3] *= a_hi;
      }
#pragma unroll
      for (int ks = 0; ks < kChunk / 16; ++ks) {
        uint32_t ak[4], b01[4], b23[4];
        ldsm_x4_trans(sbase + b2_kg(warp, lane, ks), ak);
        ldsm_x4_trans(sbase + b2_vn(lane, ks, 0), b01);
        ldsm_x4_trans(sbase + b2_vn(lane, ks, 1), b23);
        mma_bf16(st[0], ak, b01[0], b01[1]);
        mma_bf16(st[1], ak, b01[2], b01[3]);
        mma_bf16(st[2], ak, b23[0], b23[1]);
        mma_bf16(st[3], ak, b23[2], b23[3]);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          word(sb_pair(warp, lane, j, half)) = pack_bf16(st[j][2 * half], st[j][2 * half + 1]);
        }
      }
    }

    // ---- Phase B1: O = P + A_qk V_new over the k blocks at or below the diagonal of the warp's
    // row block (A_qk is zero above the diagonal inside the record); rows < n stored as bf16.
    {
      const int mt = warp & 3;
#pragma unroll
      for (int ks = 0; ks < kChunk / 16; ++ks) {
        if (ks <= mt) {  // warp-uniform
          uint32_t a[4], b[4];
          ldsm_x4(sbase + b1_aqk(warp, lane, ks), a);
          ldsm_x4_trans(sbase + b1_vn(warp, lane, ks), b);
          mma_bf16(pq[0], a, b[0], b[1]);
          mma_bf16(pq[1], a, b[2], b[3]);
        }
      }
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = out_row(warp, lane, half);
        if (row < n) {
          __nv_bfloat16* dst = args.out + (begin + c * kChunk + row) * args.out_stride +
                               static_cast<int64_t>(h) * kHeadDim + col0;
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            *reinterpret_cast<uint32_t*>(dst + out_col(warp, lane, j)) =
                pack_bf16(pq[j][2 * half], pq[j][2 * half + 1]);
          }
        }
      }
    }
  }

  // ---- Final state straight from the fp32 registers (initial state or zeros when empty).
  if (args.final_state != nullptr) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        *reinterpret_cast<float2*>(args.final_state + state_offset +
                                   state_row(warp, lane, half) * kHeadDim + state_col(lane, j)) =
            make_float2(st[j][2 * half], st[j][2 * half + 1]);
      }
    }
  }
}

}  // namespace

void launch_scan_v1(const ScanArgs& args, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(int64_t{args.seqs.num_seqs} * kScanSlices),
                  static_cast<unsigned>(args.heads));
  detail::set_dynamic_smem(reinterpret_cast<const void*>(&scan_v1_kernel), kS1Bytes,
                           "chunk_forward: scan (v1)", /*max_carveout=*/true);
  scan_v1_kernel<<<grid, kThreads, kS1Bytes, stream>>>(args);
  detail::check_launch("chunk_forward: scan (v1)");
}

}  // namespace kda::lab
