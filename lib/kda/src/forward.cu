// chunk_forward: two kernels that communicate through per-chunk records in the workspace, plus a
// tail zeroing kernel for packed inputs. Two variants (ForwardParams::variant):
//   v0_fp32  correct-first (kernel-design.md §6.8): fp32 records, fp32 CUDA-core SCAN (this file).
//   v1_mma   the same PREP arithmetic writing bf16 records in the tensor-core SCAN's shared-memory
//            image (mma_layout.h), and an mma.sync SCAN with the fp32 state in registers
//            (scan_v1.cu).
//   v2_mma   v1's record; PREP on tensor cores with a blocked fp32 inverse (prep_v2.cu); the SCAN
//            chosen per call (layout.h transposed_scan_pays): the transposed-state one when the
//            (sequence, head) chains fill the SMs, else v1's value-sliced one.
//   v2t_mma  v2's PREP and record; always the transposed-state SCAN (scan_t.cu).
//   v2w_mma  v2's PREP and record; the transposed-state SCAN on warpgroup MMA (scan_w.cu).
//
//   PREP      grid (chunk slots, H), 256 threads: one 64-token chunk of one head. Loads q (and
//             normalizes it when fused), k, v, G, beta; builds the anchored grams A_kk and A_qk,
//             solves (I + A_kk) X = [beta k Gamma | beta v] by forward substitution, and writes
//             the record W, U, q', kg, A_qk, a (layout.h).
//   SCAN      grid (N * 128 / 32, H), 256 threads: one (sequence, head, 32-column value slice)
//             chain. Keeps its fp32 state slice S[128 x 32] in shared memory and walks the
//             sequence's chunks in order: V_new = U - W S; O = q' S + A_qk V_new;
//             S <- diag(a) S + kg^T V_new. Writes O (bf16) and the final state.
//   ZERO_TAIL packed inputs only: output rows at or after cu[N] become zeros.
//
// Every reduction has a fixed order (plain k-loops, no atomics, no split-K), so results are
// bitwise reproducible. See docs/design.md for traffic, FLOPs and the path to faster designs.
#include <algorithm>

#include "common.cuh"
#include "l2norm_row.cuh"
#include "mma_layout.h"
#include "prep_v2.cuh"
#include "ptx.cuh"
#include "scan_v1.cuh"

namespace kda {
namespace {

using detail::RecordT;
static_assert(sizeof(RecordT) == sizeof(float),
              "SCAN copies records into fp32 shared memory with cp.async; a bf16 record needs a "
              "converting load");

constexpr int kThreads = 256;
constexpr int kC = kChunk;    // 64 tokens per chunk
constexpr int kD = kHeadDim;  // 128 channels
constexpr int kBV = detail::kScanSliceColumns;
using detail::kScale;

// Padded shared-memory row strides (floats). 132 = 128 + 4: float4 reads of 8 different rows in
// one warp land in 8 different 16-byte bank groups. 68 = 64 + 4 for the 64-wide grams.
constexpr int kLdD = kD + 4;
constexpr int kLdA = kC + 4;

// ------------------------------------------------------------------------------------------------
// Small device helpers

__device__ __forceinline__ float4 lds4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}
__device__ __forceinline__ void sts4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
__device__ __forceinline__ void sts4(float* p, const float (&v)[4]) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ float get(const float4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// 16-byte copy of record data into shared memory (ptx.cuh's cp.async), and the wait for all of
// this thread's copies (cp.async.wait_all = commit the open group, then wait for every group).
__device__ __forceinline__ void cp_async16(float* smem_dst, const RecordT* gmem_src) {
  detail::ptx::cp_async16(detail::ptx::smem_u32(smem_dst), gmem_src);
}
__device__ __forceinline__ void cp_async_wait_all() {
  detail::ptx::cp_async_commit();
  detail::ptx::cp_async_wait_all();
}

// ------------------------------------------------------------------------------------------------
// PREP

// Record writers: where PREP puts each factor. The arithmetic is the same for both variants; only
// the element type and the addresses differ.
struct RecordV0 {  // fp32, layout.h kRec*
  static constexpr int64_t kBytes = detail::kRecordBytes;
  RecordT* rec;
  __device__ __forceinline__ void qp(int i, int d, float x) const {
    rec[detail::kRecQP + i * kD + d] = x;
  }
  __device__ __forceinline__ void kg(int i, int d, float x) const {
    rec[detail::kRecKG + i * kD + d] = x;
  }
  __device__ __forceinline__ void a(int d, float x) const { rec[detail::kRecA + d] = x; }
  __device__ __forceinline__ void aqk(int i, int j, float x) const {
    rec[detail::kRecAQK + i * kC + j] = x;
  }
  __device__ __forceinline__ void wu(bool is_w, int i, int d, float x) const {
    rec[(is_w ? detail::kRecW : detail::kRecU) + i * kD + d] = x;
  }
};

struct RecordV1 {  // bf16 (round to nearest even) in SCAN v1's swizzled image, a fp32; layout.h
  static constexpr int64_t kBytes = detail::kRecord1Bytes;
  char* rec;
  __device__ __forceinline__ void put(int64_t byte, float x) const {
    *reinterpret_cast<__nv_bfloat16*>(rec + byte) = __float2bfloat16_rn(x);
  }
  __device__ __forceinline__ void qp(int i, int d, float x) const {
    put(detail::v1::rec1_qp(i, d), x);
  }
  __device__ __forceinline__ void kg(int i, int d, float x) const {
    put(detail::v1::rec1_kg(i, d), x);
  }
  __device__ __forceinline__ void a(int d, float x) const {
    *reinterpret_cast<float*>(rec + detail::v1::rec1_a(d)) = x;
  }
  __device__ __forceinline__ void aqk(int i, int j, float x) const {
    put(detail::v1::rec1_aqk(i, j), x);
  }
  __device__ __forceinline__ void wu(bool is_w, int i, int d, float x) const {
    put(is_w ? detail::v1::rec1_w(i, d) : detail::v1::rec1_u(i, d), x);
  }
};

using detail::PrepArgs;

// Shared memory of PREP, in floats.
constexpr int kPrepQ = 0;                        // [64][kLdD] q (normalized when fused), fp32
constexpr int kPrepK = kPrepQ + kC * kLdD;       // [64][kLdD] k
constexpr int kPrepG = kPrepK + kC * kLdD;       // [64][kLdD] G (rows >= n repeat row n-1)
constexpr int kPrepV = kPrepG + kC * kLdD;       // [64][128]  v
constexpr int kPrepKC = kPrepV + kC * kD;        // [16][kLdD] column operand of one column block
constexpr int kPrepAKK = kPrepKC + 16 * kLdD;    // [64][kLdA] A_kk (beta folded in)
constexpr int kPrepAQK = kPrepAKK + kC * kLdA;   // [64][kLdA] A_qk (scale folded in)
constexpr int kPrepBeta = kPrepAQK + kC * kLdA;  // [64]
constexpr int kPrepFloats = kPrepBeta + kC;
constexpr int kPrepSmemBytes = kPrepFloats * 4;
static_assert(kPrepSmemBytes <= 227 * 1024, "PREP shared memory exceeds the sm_90 opt-in limit");

template <class Record>
__global__ void __launch_bounds__(kThreads, 1) prep_kernel(const PrepArgs args) {
  extern __shared__ __align__(16) float smem[];
  float* sq = smem + kPrepQ;
  float* sk = smem + kPrepK;
  float* sg = smem + kPrepG;
  float* sv = smem + kPrepV;
  float* skc = smem + kPrepKC;
  float* sakk = smem + kPrepAKK;
  float* saqk = smem + kPrepAQK;
  float* sbeta = smem + kPrepBeta;

  detail::ChunkRef chunk;
  if (!detail::find_chunk(args.seqs, blockIdx.x, chunk)) return;  // unused slot
  const int h = blockIdx.y;
  const int n = chunk.rows;
  const int tid = threadIdx.x;
  const int64_t record_index = static_cast<int64_t>(h) * args.capacity + blockIdx.x;
  const Record rec{reinterpret_cast<decltype(Record::rec)>(static_cast<char*>(args.records) +
                                                           record_index * Record::kBytes)};

  // ---- 1. Load the chunk. Rows >= n: q = k = v = beta = 0 and G = G_{n-1}, by selection (the
  // memory there belongs to the next sequence or lies past the end, possibly NaN): never read.
  for (int e = tid; e < kC * kLdA; e += kThreads) {
    sakk[e] = 0.0f;
    saqk[e] = 0.0f;
  }
  // One quad of threads per row (64 rows x 4 = 256 threads), each thread a run of 32 channels:
  // every row's loads are in flight at once, and the fused q norm of all 64 rows runs in
  // parallel with exactly the l2norm kernel's function (measured: one warp per row, 8 rows in
  // series, cost +250 us per h96 forward, more than the l2norm pass it replaces).
  {
    const int i = tid >> 2;
    const int c0 = (tid & 3) * detail::kRowRun;
    const bool valid = i < n;
    const int64_t token = chunk.first_token + i;
    const int64_t head_offset = static_cast<int64_t>(h) * kD + c0;
    float x[detail::kRowRun];
    auto load_or_zero = [&](const __nv_bfloat16* base, int64_t stride) {
      if (valid) {
        detail::load_run(base + token * stride + head_offset, x);
      } else {
#pragma unroll
        for (int c = 0; c < detail::kRowRun; ++c) x[c] = 0.0f;
      }
    };
    auto store_row = [&](float* dst) {
#pragma unroll
      for (int c = 0; c < detail::kRowRun; c += 4) {
        sts4(dst + c0 + c, make_float4(x[c], x[c + 1], x[c + 2], x[c + 3]));
      }
    };
    load_or_zero(args.q, args.q_stride);
    if (args.fuse_q_l2norm) {  // uniform: every thread of the quad shuffles
      // Exactly what the l2norm kernel computes and stores (bf16), widened back to fp32. A
      // masked row is a zero row and stays zero.
      __nv_bfloat16 normalized[detail::kRowRun];
      detail::l2norm_row_bf16<4, detail::kRowRun>(x, normalized);
#pragma unroll
      for (int c = 0; c < detail::kRowRun; ++c) x[c] = __bfloat162float(normalized[c]);
    }
    store_row(sq + i * kLdD);
    load_or_zero(args.k, args.k_stride);
    store_row(sk + i * kLdD);
    load_or_zero(args.v, args.v_stride);
    store_row(sv + i * kD);
    // G: rows >= n repeat the last valid row (never read past it).
    const int64_t g_token = chunk.first_token + min(i, n - 1);
    detail::load_run(args.gate + (g_token * args.heads + h) * kD + c0, x);
    store_row(sg + i * kLdD);
  }
  if (tid < kC) {
    sbeta[tid] = tid < n ? args.beta[(chunk.first_token + tid) * args.heads + h] : 0.0f;
  }
  __syncthreads();

  // ---- 2. q' = scale q Gamma, kg = k 2^(G_{n-1} - G), a = 2^(G_{n-1}); rows >= n are zero.
  // Every exponent here is <= 0 for a non-increasing gate: the factors can only underflow.
  {
    const int d = tid & (kD - 1);
    const float g_last = sg[(n - 1) * kLdD + d];
    for (int i = tid >> 7; i < kC; i += kThreads / kD) {
      const float g = sg[i * kLdD + d];
      const bool valid = i < n;
      const float qp = kScale * sq[i * kLdD + d] * exp2f(g);
      const float kg = sk[i * kLdD + d] * exp2f(g_last - g);
      rec.qp(i, d, valid ? qp : 0.0f);
      rec.kg(i, d, valid ? kg : 0.0f);
    }
    if (tid < kD) rec.a(d, exp2f(g_last));
  }

  // ---- 3. Grams, one 16-column block c at a time with its own anchor m_c (kernel-design §7.1):
  //   A[i][j] = sum_d x_i[d] 2^(G_i[d] - G_m[d]) * k_j[d] 2^(G_m[d] - G_j[d]),  x = k or q.
  // Inside the block both exponents are within +-8 per-token decays of the anchor (<= 68 at the
  // contract edge); rows of later blocks have G_i <= G_m, so their factor is <= 1 and underflows
  // only where the true entry is negligible. Blocks past the last valid row are skipped (zero).
  for (int cb = 0; cb < kC / 16; ++cb) {
    const int c0 = 16 * cb;
    if (c0 >= n) break;  // uniform
    const int m = min(c0 + 8, n - 1);
    for (int e = tid; e < 16 * kD; e += kThreads) {
      const int jj = e >> 7;
      const int d = e & (kD - 1);
      const int j = c0 + jj;
      const float col = sk[j * kLdD + d] * exp2f(sg[m * kLdD + d] - sg[j * kLdD + d]);
      skc[jj * kLdD + d] = j < n ? col : 0.0f;
    }
    __syncthreads();
    // Thread -> (row i, columns c0 + jg + 4 jj): 4 lanes share a row, 8 rows per warp.
    const int i = c0 + (tid >> 2);
    const int jg = tid & 3;
    if (i < n) {
      float acc_k[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      float acc_q[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      const float* gi_row = sg + i * kLdD;
      const float* gm_row = sg + m * kLdD;
      const float* ki_row = sk + i * kLdD;
      const float* qi_row = sq + i * kLdD;
#pragma unroll 2
      for (int d = 0; d < kD; d += 4) {
        const float4 gi = lds4(gi_row + d);
        const float4 gm = lds4(gm_row + d);
        const float4 ki = lds4(ki_row + d);
        const float4 qi = lds4(qi_row + d);
        float rk[4], rq[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const float f = exp2f(get(gi, u) - get(gm, u));
          rk[u] = get(ki, u) * f;
          rq[u] = get(qi, u) * f;
        }
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
          const float4 kc = lds4(skc + (jg + 4 * jj) * kLdD + d);
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            acc_k[jj] = fmaf(rk[u], get(kc, u), acc_k[jj]);
            acc_q[jj] = fmaf(rq[u], get(kc, u), acc_q[jj]);
          }
        }
      }
      const float b = sbeta[i];
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const int j = c0 + jg + 4 * jj;
        sakk[i * kLdA + j] = j < i ? b * acc_k[jj] : 0.0f;        // strictly lower
        saqk[i * kLdA + j] = j <= i ? kScale * acc_q[jj] : 0.0f;  // inclusive lower
      }
    }
    __syncthreads();
  }

  // ---- 4. A_qk to the record.
  for (int e = tid; e < kC * kC; e += kThreads) {
    rec.aqk(e >> 6, e & (kC - 1), saqk[(e >> 6) * kLdA + (e & (kC - 1))]);
  }

  // ---- 5. Forward substitution (I + A_kk) X = R, one thread per right-hand-side column, fixed
  // order: x_i = r_i - sum_{j<i} A_kk[i][j] x_j. Threads 0..127: R = beta k Gamma (-> W);
  // threads 128..255: R = beta v (-> U). A_kk reads are warp broadcasts.
  {
    const bool is_w = tid < kD;  // warp-uniform
    const int d = tid & (kD - 1);
    float x[kC];
#pragma unroll
    for (int i = 0; i < kC; ++i) {
      const float b = sbeta[i];
      const float rhs = is_w ? b * sk[i * kLdD + d] * exp2f(sg[i * kLdD + d]) : b * sv[i * kD + d];
      float acc = 0.0f;
#pragma unroll
      for (int j = 0; j < i; ++j) acc = fmaf(sakk[i * kLdA + j], x[j], acc);
      x[i] = rhs - acc;
    }
#pragma unroll
    for (int i = 0; i < kC; ++i) rec.wu(is_w, i, d, i < n ? x[i] : 0.0f);
  }
}

// ------------------------------------------------------------------------------------------------
// SCAN

// Shared memory of SCAN, in floats.
constexpr int kScanW = 0;                     // [64][kLdD] W
constexpr int kScanQP = kScanW + kC * kLdD;   // [64][kLdD] q'
constexpr int kScanKG = kScanQP + kC * kLdD;  // [64][128]  kg
constexpr int kScanAQK = kScanKG + kC * kD;   // [64][kLdA] A_qk
constexpr int kScanA = kScanAQK + kC * kLdA;  // [128]      a
constexpr int kScanU = kScanA + kD;           // [64][32]   U, this CTA's columns
constexpr int kScanVN = kScanU + kC * kBV;    // [64][32]   V_new
constexpr int kScanS = kScanVN + kC * kBV;    // [128][32]  state slice (row = key)
constexpr int kScanFloats = kScanS + kD * kBV;
constexpr int kScanSmemBytes = kScanFloats * 4;
static_assert(kScanSmemBytes <= 227 * 1024, "SCAN shared memory exceeds the sm_90 opt-in limit");
static_assert(kBV == 32 && kThreads == 256, "SCAN's thread tiles assume 32 columns, 256 threads");

__global__ void __launch_bounds__(kThreads, 1) scan_kernel(const detail::ScanArgs args) {
  extern __shared__ __align__(16) float smem[];
  float* sw = smem + kScanW;
  float* sqp = smem + kScanQP;
  float* skg = smem + kScanKG;
  float* saqk = smem + kScanAQK;
  float* sa = smem + kScanA;
  float* su = smem + kScanU;
  float* svn = smem + kScanVN;
  float* ss = smem + kScanS;

  // The value slices of one (sequence, head) are adjacent CTAs, so they run together and share
  // the W / q' / kg / A_qk reads through L2.
  const int s = static_cast<int>(blockIdx.x / detail::kScanSlices);
  const int col0 = static_cast<int>(blockIdx.x % detail::kScanSlices) * kBV;
  const int h = blockIdx.y;
  const int tid = threadIdx.x;
  const int64_t begin = args.seqs.begin(s);
  const int64_t length = args.seqs.begin(s + 1) - begin;
  const int64_t chunks = (length + kC - 1) / kC;
  const int64_t first_slot = static_cast<int64_t>(h) * args.capacity + args.seqs.chunk_base(s);
  const int64_t state_offset = (static_cast<int64_t>(s) * args.heads + h) * kD * kD + col0;

  // State slice: S[k][c] = initial_state[s][h][k][col0 + c], or zeros.
  for (int e = tid; e < kD * kBV / 4; e += kThreads) {
    const int k = e >> 3;
    const int c4 = (e & 7) * 4;
    float4 value = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (args.initial_state != nullptr) {
      value = *reinterpret_cast<const float4*>(args.initial_state + state_offset + k * kD + c4);
    }
    sts4(ss + k * kBV + c4, value);
  }

  // Thread tiles. Phases A and B (output): rows r0 = 2 rg, r1 = 2 rg + 1, columns 4 cg .. 4 cg + 3.
  // Phase B (state): keys 4 rg .. 4 rg + 3, columns 4 cg .. 4 cg + 3.
  const int cg = tid & 7;
  const int rg = tid >> 3;
  const int c4 = 4 * cg;
  const int r0 = 2 * rg;
  const int r1 = r0 + 1;

  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t left = length - c * kC;
    const int n = left < kC ? static_cast<int>(left) : kC;
    const RecordT* rec =
        static_cast<const RecordT*>(args.records) + (first_slot + c) * detail::kRecElems;

    // ---- Load the record (cp.async, 16 bytes per copy) into padded shared memory.
    for (int e = tid; e < kC * kD / 4; e += kThreads) {
      const int row = e >> 5;
      const int col = (e & 31) * 4;
      cp_async16(sw + row * kLdD + col, rec + detail::kRecW + row * kD + col);
      cp_async16(sqp + row * kLdD + col, rec + detail::kRecQP + row * kD + col);
      cp_async16(skg + row * kD + col, rec + detail::kRecKG + row * kD + col);
    }
    for (int e = tid; e < kC * kC / 4; e += kThreads) {
      const int row = e >> 4;
      const int col = (e & 15) * 4;
      cp_async16(saqk + row * kLdA + col, rec + detail::kRecAQK + row * kC + col);
    }
    for (int e = tid; e < kC * kBV / 4; e += kThreads) {
      const int row = e >> 3;
      const int col = (e & 7) * 4;
      cp_async16(su + row * kBV + col, rec + detail::kRecU + row * kD + col0 + col);
    }
    if (tid < kD / 4) cp_async16(sa + 4 * tid, rec + detail::kRecA + 4 * tid);
    cp_async_wait_all();
    __syncthreads();

    // ---- Phase A: V_new = U - W S and P = q' S (both k-loops over the 128 keys, in order).
    float acc_w[2][4] = {};
    float acc_p[2][4] = {};
#pragma unroll 2
    for (int k = 0; k < kD; k += 4) {
      const float4 w0 = lds4(sw + r0 * kLdD + k);
      const float4 w1 = lds4(sw + r1 * kLdD + k);
      const float4 q0 = lds4(sqp + r0 * kLdD + k);
      const float4 q1 = lds4(sqp + r1 * kLdD + k);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const float4 srow = lds4(ss + (k + u) * kBV + c4);
#pragma unroll
        for (int cc = 0; cc < 4; ++cc) {
          const float sv = get(srow, cc);
          acc_w[0][cc] = fmaf(get(w0, u), sv, acc_w[0][cc]);
          acc_w[1][cc] = fmaf(get(w1, u), sv, acc_w[1][cc]);
          acc_p[0][cc] = fmaf(get(q0, u), sv, acc_p[0][cc]);
          acc_p[1][cc] = fmaf(get(q1, u), sv, acc_p[1][cc]);
        }
      }
    }
    {
      const float4 u0 = lds4(su + r0 * kBV + c4);
      const float4 u1 = lds4(su + r1 * kBV + c4);
      float vn0[4], vn1[4];
#pragma unroll
      for (int cc = 0; cc < 4; ++cc) {
        vn0[cc] = get(u0, cc) - acc_w[0][cc];
        vn1[cc] = get(u1, cc) - acc_w[1][cc];
      }
      sts4(svn + r0 * kBV + c4, vn0);
      sts4(svn + r1 * kBV + c4, vn1);
    }
    __syncthreads();

    // ---- Phase B1: O = P + A_qk V_new over j <= row only (A_qk is inclusive lower; skipping
    // j > row keeps a row's output independent of later tokens even if they hold inf/NaN).
    {
      float o[2][4];
#pragma unroll
      for (int cc = 0; cc < 4; ++cc) {
        o[0][cc] = acc_p[0][cc];
        o[1][cc] = acc_p[1][cc];
      }
      for (int j0 = 0; j0 <= r1; j0 += 4) {
        const float4 a0 = lds4(saqk + r0 * kLdA + j0);
        const float4 a1 = lds4(saqk + r1 * kLdA + j0);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int j = j0 + u;
          const float4 vrow = lds4(svn + j * kBV + c4);
#pragma unroll
          for (int cc = 0; cc < 4; ++cc) {
            if (j <= r0) o[0][cc] = fmaf(get(a0, u), get(vrow, cc), o[0][cc]);
            if (j <= r1) o[1][cc] = fmaf(get(a1, u), get(vrow, cc), o[1][cc]);
          }
        }
      }
      const int64_t column = static_cast<int64_t>(h) * kD + col0 + c4;
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const int row = r0 + rr;
        if (row < n) {
          const int64_t token = begin + c * kC + row;
          __nv_bfloat16 y[4];
#pragma unroll
          for (int cc = 0; cc < 4; ++cc) y[cc] = __float2bfloat16_rn(o[rr][cc]);
          detail::store4(args.out + token * args.out_stride + column, y);
        }
      }
    }

    // ---- Phase B2: S <- diag(a) S + kg^T V_new, each thread on its own 4 x 4 block of S (all
    // reads of S by phase A finished at the barrier above).
    {
      const int k0 = 4 * rg;
      float acc[4][4];
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const float a = sa[k0 + kk];
        const float4 srow = lds4(ss + (k0 + kk) * kBV + c4);
#pragma unroll
        for (int cc = 0; cc < 4; ++cc) acc[kk][cc] = a * get(srow, cc);
      }
#pragma unroll 4
      for (int i = 0; i < kC; ++i) {
        const float4 kg = lds4(skg + i * kD + k0);
        const float4 vrow = lds4(svn + i * kBV + c4);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
          for (int cc = 0; cc < 4; ++cc)
            acc[kk][cc] = fmaf(get(kg, kk), get(vrow, cc), acc[kk][cc]);
        }
      }
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) sts4(ss + (k0 + kk) * kBV + c4, acc[kk]);
    }
    __syncthreads();  // S, and the record buffers, are rewritten next
  }

  if (args.final_state != nullptr) {
    __syncthreads();
    for (int e = tid; e < kD * kBV / 4; e += kThreads) {
      const int k = e >> 3;
      const int col = (e & 7) * 4;
      *reinterpret_cast<float4*>(args.final_state + state_offset + k * kD + col) =
          lds4(ss + k * kBV + col);
    }
  }
}

// ------------------------------------------------------------------------------------------------
// Host side

constexpr int kStagePrep = 0;
constexpr int kStageScan = 1;
constexpr int kStageZeroTail = 2;
constexpr int kStageCount = 3;
constexpr const char* kStageNames[kStageCount] = {"prep", "scan", "zero_tail"};

struct Plan {
  detail::Sequences seqs;
  int64_t capacity = 0;
  bool packed = false;
};

Plan make_plan(const ForwardParams& p) {
  Plan plan;
  plan.packed = p.cu_seqlens != nullptr;
  plan.seqs.cu = p.cu_seqlens;
  plan.seqs.seq_len = p.tokens;
  plan.seqs.num_seqs = plan.packed ? p.num_seqs : static_cast<int>(p.batch);
  plan.capacity = detail::chunk_capacity(p.batch * p.tokens, plan.seqs.num_seqs);
  return plan;
}

int64_t resolved(int64_t stride, int heads) {
  return stride == 0 ? static_cast<int64_t>(heads) * kHeadDim : stride;
}

void run_prep(const ForwardParams& p, const Plan& plan, cudaStream_t stream) {
  PrepArgs args;
  args.q = static_cast<const __nv_bfloat16*>(p.q);
  args.k = static_cast<const __nv_bfloat16*>(p.k);
  args.v = static_cast<const __nv_bfloat16*>(p.v);
  // Typed for the contract kernels; the v2 PREP's raw-input kernel reads RawPrepArgs' instead.
  args.gate = static_cast<const float*>(p.gate);
  args.beta = static_cast<const float*>(p.beta);
  args.q_stride = resolved(p.q_token_stride, p.heads);
  args.k_stride = resolved(p.k_token_stride, p.heads);
  args.v_stride = resolved(p.v_token_stride, p.heads);
  args.heads = p.heads;
  args.capacity = plan.capacity;
  args.seqs = plan.seqs;
  args.records = p.workspace;
  args.fuse_q_l2norm = p.fuse_q_l2norm;
  args.f16_record = p.variant == ForwardVariant::v2w_mma;
  if (detail::uses_prep_v2(p.variant)) {
    detail::RawPrepArgs raw;
    raw.gate = p.gate;
    raw.beta = p.beta;
    raw.raw_gate = p.gate_input == GateInput::raw;
    raw.gate_bf16 = p.gate_dtype == DType::bf16;
    raw.beta_bf16 = p.beta_dtype == DType::bf16;
    raw.beta_logits = p.beta_input == BetaInput::logits;
    raw.fuse_k_l2norm = p.fuse_k_l2norm;
    raw.a_log = p.a_log;
    raw.dt_bias = p.dt_bias;
    raw.lower_bound = p.lower_bound;
    detail::launch_prep_v2(args, raw, stream);
    return;
  }
  const dim3 grid(static_cast<unsigned>(plan.capacity), static_cast<unsigned>(p.heads));
  if (p.variant == ForwardVariant::v1_mma) {
    detail::set_dynamic_smem(reinterpret_cast<const void*>(&prep_kernel<RecordV1>),
                             kPrepSmemBytes, "chunk_forward: prep (v1)");
    prep_kernel<RecordV1><<<grid, kThreads, kPrepSmemBytes, stream>>>(args);
  } else {
    detail::set_dynamic_smem(reinterpret_cast<const void*>(&prep_kernel<RecordV0>),
                             kPrepSmemBytes, "chunk_forward: prep");
    prep_kernel<RecordV0><<<grid, kThreads, kPrepSmemBytes, stream>>>(args);
  }
  detail::check_launch("chunk_forward: prep");
}

void run_scan(const ForwardParams& p, const Plan& plan, cudaStream_t stream) {
  detail::ScanArgs args;
  args.records = p.workspace;
  args.out = static_cast<__nv_bfloat16*>(p.out);
  args.out_stride = resolved(p.out_token_stride, p.heads);
  args.initial_state = p.initial_state;
  args.final_state = p.final_state;
  args.heads = p.heads;
  args.capacity = plan.capacity;
  args.seqs = plan.seqs;
  args.record_bytes = detail::record_bytes(p.variant);
  if (p.variant == ForwardVariant::v2w_mma) {
    detail::launch_scan_w(args, stream);
    return;
  }
  const bool transposed =
      p.variant == ForwardVariant::v2t_mma ||
      (p.variant == ForwardVariant::v2_mma &&
       detail::transposed_scan_pays(int64_t{plan.seqs.num_seqs} * p.heads,
                                    detail::multiprocessor_count("chunk_forward: scan")));
  if (transposed) {
    detail::launch_scan_t(args, stream);
    return;
  }
  if (p.variant == ForwardVariant::v1_mma || p.variant == ForwardVariant::v2_mma) {
    detail::launch_scan_v1(args, stream);
    return;
  }
  const dim3 grid(static_cast<unsigned>(int64_t{plan.seqs.num_seqs} * detail::kScanSlices),
                  static_cast<unsigned>(p.heads));
  detail::set_dynamic_smem(reinterpret_cast<const void*>(&scan_kernel), kScanSmemBytes,
                           "chunk_forward: scan");
  scan_kernel<<<grid, kThreads, kScanSmemBytes, stream>>>(args);
  detail::check_launch("chunk_forward: scan");
}

void run_zero_tail(const ForwardParams& p, const Plan& plan, cudaStream_t stream) {
  if (!plan.packed) return;  // dense batches have no rows after the last sequence
  const int64_t pitch = resolved(p.out_token_stride, p.heads) * 2;  // bytes
  const int64_t vec16 = static_cast<int64_t>(p.heads) * kHeadDim * 2 / 16;
  detail::launch_zero_tail(p.out, pitch, vec16, p.tokens, p.cu_seqlens, p.num_seqs, stream,
                           "chunk_forward: zero_tail");
}

void run_stage(const ForwardParams& p, const Plan& plan, int stage, cudaStream_t stream) {
  switch (stage) {
    case kStagePrep:
      run_prep(p, plan, stream);
      break;
    case kStageScan:
      run_scan(p, plan, stream);
      break;
    case kStageZeroTail:
      run_zero_tail(p, plan, stream);
      break;
    default:
      break;
  }
}

void check_stage(const char* op, int stage) {
  if (stage < 0 || stage >= kStageCount) {
    throw Error(ErrorCode::invalid_argument,
                std::string(op) + ": stage = " + std::to_string(stage) +
                    " is out of range: there are forward_stage_count() = " +
                    std::to_string(kStageCount) + " stages");
  }
}

}  // namespace

int forward_stage_count() { return kStageCount; }

const char* forward_stage_name(int stage) {
  check_stage("forward_stage_name", stage);
  return kStageNames[stage];
}

void chunk_forward_stage(const ForwardParams& params, int stage, cudaStream_t stream) {
  check_stage("chunk_forward_stage", stage);
  validate(params);
  detail::current_device("chunk_forward");
  run_stage(params, make_plan(params), stage, stream);
}

void chunk_forward(const ForwardParams& params, cudaStream_t stream) {
  validate(params);
  detail::current_device("chunk_forward");
  const Plan plan = make_plan(params);
  for (int stage = 0; stage < kStageCount; ++stage) run_stage(params, plan, stage, stream);
}

}  // namespace kda
