// v0_fp32 (and v1_mma's PREP): the correct-first forward (kernel-design.md §6.8), fp32 on CUDA
// cores, two kernels that communicate through per-chunk records:
//   PREP      grid (chunk slots, H), 256 threads: one 64-token chunk of one head. Loads q (and
//             normalizes it when fused, with the l2norm kernel's own row function), k, v, G,
//             beta; builds the anchored grams A_kk and A_qk, solves (I + A_kk) X = [beta k Gamma |
//             beta v] by forward substitution, and writes the record W, U, q', kg, A_qk, a: the
//             v0 record (fp32), or for v1_mma the same arithmetic rounded into the bf16 v1 record
//             (records.h).
//   SCAN      grid (N * 128 / 32, H), 256 threads: one (sequence, head, 32-column value slice)
//             chain. Keeps its fp32 state slice S[128 x 32] in shared memory and walks the
//             sequence's chunks in order: V_new = U - W S; O = q' S + A_qk V_new;
//             S <- diag(a) S + kg^T V_new. Writes O (bf16) and the final state.
// The library's host side (lib/kda/src/forward.h) plans the call and zeroes the tail.
//
// Every reduction has a fixed order (plain k-loops, no atomics, no split-K), so results are
// bitwise reproducible. See docs/design.md for traffic, FLOPs and the path to faster designs.
#include "common.cuh"       // lib/kda/src
#include "device/ptx.cuh"   // lib/kda/src
#include "l2norm_row.cuh"   // lib/kda/src
#include "ladder.h"
#include "records.h"

namespace kda::lab {
namespace {

static_assert(sizeof(RecordT) == sizeof(float),
              "SCAN copies records into fp32 shared memory with cp.async; a bf16 record needs a "
              "converting load");

using detail::kC;
using detail::kD;
using detail::kScale;
using detail::kThreads;
constexpr int kBV = kScanSliceColumns;

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
struct RecordV0 {  // fp32, records.h kRec0*
  static constexpr int64_t kBytes = kRecord0Bytes;
  RecordT* rec;
  __device__ __forceinline__ void qp(int i, int d, float x) const {
    rec[kRec0QP + i * kD + d] = x;
  }
  __device__ __forceinline__ void kg(int i, int d, float x) const {
    rec[kRec0KG + i * kD + d] = x;
  }
  __device__ __forceinline__ void a(int d, float x) const { rec[kRec0A + d] = x; }
  __device__ __forceinline__ void aqk(int i, int j, float x) const {
    rec[kRec0AQK + i * kC + j] = x;
  }
  __device__ __forceinline__ void wu(bool is_w, int i, int d, float x) const {
    rec[(is_w ? kRec0W : kRec0U) + i * kD + d] = x;
  }
};

struct RecordV1 {  // bf16 (round to nearest even) in the v1 SCAN's swizzled image, a fp32
  static constexpr int64_t kBytes = kRecord1Bytes;
  char* rec;
  __device__ __forceinline__ void put(int64_t byte, float x) const {
    *reinterpret_cast<__nv_bfloat16*>(rec + byte) = __float2bfloat16_rn(x);
  }
  __device__ __forceinline__ void qp(int i, int d, float x) const {
    put(v1::rec1_qp(i, d), x);
  }
  __device__ __forceinline__ void kg(int i, int d, float x) const {
    put(v1::rec1_kg(i, d), x);
  }
  __device__ __forceinline__ void a(int d, float x) const {
    *reinterpret_cast<float*>(rec + v1::rec1_a(d)) = x;
  }
  __device__ __forceinline__ void aqk(int i, int j, float x) const {
    put(v1::rec1_aqk(i, j), x);
  }
  __device__ __forceinline__ void wu(bool is_w, int i, int d, float x) const {
    put(is_w ? v1::rec1_w(i, d) : v1::rec1_u(i, d), x);
  }
};

using detail::PrepArgs;
using detail::ScanArgs;

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
__global__ void __launch_bounds__(kThreads, 1) prep_v0_kernel(const PrepArgs args) {
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

__global__ void __launch_bounds__(kThreads, 1) scan_v0_kernel(const ScanArgs args) {
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
  const int s = static_cast<int>(blockIdx.x / kScanSlices);
  const int col0 = static_cast<int>(blockIdx.x % kScanSlices) * kBV;
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
        static_cast<const RecordT*>(args.records) + (first_slot + c) * kRec0Elems;

    // ---- Load the record (cp.async, 16 bytes per copy) into padded shared memory.
    for (int e = tid; e < kC * kD / 4; e += kThreads) {
      const int row = e >> 5;
      const int col = (e & 31) * 4;
      cp_async16(sw + row * kLdD + col, rec + kRec0W + row * kD + col);
      cp_async16(sqp + row * kLdD + col, rec + kRec0QP + row * kD + col);
      cp_async16(skg + row * kD + col, rec + kRec0KG + row * kD + col);
    }
    for (int e = tid; e < kC * kC / 4; e += kThreads) {
      const int row = e >> 4;
      const int col = (e & 15) * 4;
      cp_async16(saqk + row * kLdA + col, rec + kRec0AQK + row * kC + col);
    }
    for (int e = tid; e < kC * kBV / 4; e += kThreads) {
      const int row = e >> 3;
      const int col = (e & 7) * 4;
      cp_async16(su + row * kBV + col, rec + kRec0U + row * kD + col0 + col);
    }
    if (tid < kD / 4) cp_async16(sa + 4 * tid, rec + kRec0A + 4 * tid);
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

}  // namespace

void launch_prep_v0(const PrepArgs& args, bool v1_record, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(args.capacity), static_cast<unsigned>(args.heads));
  if (v1_record) {
    detail::set_dynamic_smem(reinterpret_cast<const void*>(&prep_v0_kernel<RecordV1>),
                             kPrepSmemBytes, "chunk_forward: prep (v1)");
    prep_v0_kernel<RecordV1><<<grid, kThreads, kPrepSmemBytes, stream>>>(args);
  } else {
    detail::set_dynamic_smem(reinterpret_cast<const void*>(&prep_v0_kernel<RecordV0>),
                             kPrepSmemBytes, "chunk_forward: prep (v0)");
    prep_v0_kernel<RecordV0><<<grid, kThreads, kPrepSmemBytes, stream>>>(args);
  }
  detail::check_launch("chunk_forward: prep (v0)");
}

void launch_scan_v0(const ScanArgs& args, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(int64_t{args.seqs.num_seqs} * kScanSlices),
                  static_cast<unsigned>(args.heads));
  detail::set_dynamic_smem(reinterpret_cast<const void*>(&scan_v0_kernel), kScanSmemBytes,
                           "chunk_forward: scan (v0)");
  scan_v0_kernel<<<grid, kThreads, kScanSmemBytes, stream>>>(args);
  detail::check_launch("chunk_forward: scan (v0)");
}

}  // namespace kda::lab
