// PREP in channel halves: the factors of prep_chunk.cuh, bit for bit, in 75 KB of shared memory
// instead of 107 KB, so that three CTAs (chunks) share an SM instead of
// two (docs/perf-notes.md "PREP at one CTA per SM": PREP's time is set by how many chunks overlap
// per SM, not by one unit). prep_layout.h `halves` has the regions.
//
// Phases (CTA barriers between them), against prep_chunk.cuh's:
//   1  q whole (each warp its own 8 rows, their own cp.async group), k and G of channels 0..63,
//      beta; v is not loaded yet
//   2a the fused norm's row factors, as prep_chunk.cuh
//   for each half h of the channels (h = 1: its k and G loaded over h = 0's after the grams):
//     2  q', kg, a, beta k Gamma (W's right-hand side, fp16; prep_chunk.cuh builds it in 4a) and
//        the grams' column operands for the half's channels
//     3  the grams' k-steps of the half, accumulated in registers over both halves
//   3' A_qk into the record, A_kk into the q region; v's copy issued (it lands during the inverse)
//   4  the inverse, 5a T's copies, 5 W and U: prep_chunk.cuh's code on this layout's regions
// The sums and roundings are prep_chunk.cuh's in the same order (the grams' k-steps ascending
// through both halves into one accumulator, every factor rounded once from the same fp32 values),
// so the record is the same. The price: two more load waits (half 1, v) and three more barriers,
// which the third CTA's chunk is there to cover.
//   Raw inputs (kRawInputs, the raw-input kernel): raw k is loaded whole into KT (its deferred
// norm needs whole rows; prep_chunk.cuh's raw_k_row_factors), phase 2 copies each half's raw k
// into the half's k region for the grams and writes beta k Gamma over it (k's row factors go in
// where prep_chunk.cuh puts them); the raw gate is staged and activated one half at a time by
// warps 0..3 in the half's G region (prep_chunk.cuh's strips, HalfGateStrips), the same sums.
#pragma once

#include "prep/prep_chunk.cuh"

namespace kda::detail::prep {

// One half's k (bf16, 16-byte cp.async; unless load_k is false) and G (fp32, rows >= n: G_{n-1};
// `gate`: a contract gate) into the halves' regions, the half's channels from first_channel (0 or
// 64); rows >= n of k are zeros by selection. The caller commits the group.
__device__ __forceinline__ void load_half_k_g(const PrepArgs& args, const float* gate,
                                              const ChunkRef& chunk, int h, int first_channel,
                                              bool load_k, unsigned char* smem) {
  const int n = chunk.rows;
  const int64_t channel0 = static_cast<int64_t>(h) * kD + first_channel;
  for (int e = threadIdx.x; load_k && e < kC * (halves::kHalf / 8); e += kThreads) {
    const int i = e >> 3;
    const int c = (e & 7) * 8;
    if (i < n) {
      cp_async16(smem_u32(smem + halves::sk(i, c)),
                 args.k + (chunk.first_token + i) * args.k_stride + channel0 + c);
    } else {
      *reinterpret_cast<uint4*>(smem + halves::sk(i, c)) = make_uint4(0u, 0u, 0u, 0u);
    }
  }
  for (int e = threadIdx.x; e < kC * (halves::kHalf / 4); e += kThreads) {  // 16 units per row
    const int i = e >> 4;
    const int c = (e & 15) * 4;
    const int64_t g_token = chunk.first_token + min(i, n - 1);
    cp_async16(smem_u32(smem + halves::sg(i, c)), gate + g_token * args.heads * kD + channel0 + c);
  }
}

// v (bf16) into its region once the grams are done; rows >= n zeros. Its own group.
__device__ __forceinline__ void load_v(const PrepArgs& args, const ChunkRef& chunk, int h,
                                       unsigned char* smem) {
  const int n = chunk.rows;
  const int64_t head_offset = static_cast<int64_t>(h) * kD;
  for (int e = threadIdx.x; e < kC * (kD / 8); e += kThreads) {  // 16 units per row
    const int i = e >> 4;
    const int c = (e & 15) * 8;
    if (i < n) {
      cp_async16(smem_u32(smem + halves::Tail::v(i, c)),
                 args.v + (chunk.first_token + i) * args.v_stride + head_offset + c);
    } else {
      *reinterpret_cast<uint4*>(smem + halves::Tail::v(i, c)) = make_uint4(0u, 0u, 0u, 0u);
    }
  }
  cp_async_commit();
}

// Warp `warp`'s own 8 rows (ssq_row) of a bf16 input whose row i is at src + (first token + i)
// stride (q, or raw k) into the [64][136] region `region`, by 16-byte cp.async, two rows of 256
// bytes per instruction (q_load_row / q_load_col); rows >= n zeros by selection. Only this warp
// reads those rows before the load barrier: its group's wait and a __syncwarp order them.
__device__ __forceinline__ void copy_warp_rows(const __nv_bfloat16* src, int64_t stride,
                                               const ChunkRef& chunk, int region, int warp,
                                               int lane, unsigned char* smem) {
#pragma unroll
  for (int it = 0; it < kC / 8 / 2; ++it) {  // 4 loads per lane
    const int i = q_load_row(warp, lane, it);
    const int c = q_load_col(lane);
    if (i < chunk.rows) {
      cp_async16(smem_u32(smem + s16(region, i, c)), src + (chunk.first_token + i) * stride + c);
    } else {
      *reinterpret_cast<uint4*>(smem + s16(region, i, c)) = make_uint4(0u, 0u, 0u, 0u);
    }
  }
}

// The raw gate's strips in the halves' G region: warps 0..3, 16 channels each (prep_chunk.cuh's
// issue_raw_gate_loads and activate_raw_gate).
struct HalfGateStrips {
  static constexpr int kStripWarps = halves::kHalf / 16;
  __device__ static int strip(int row, int warp) { return halves::sg(row, 16 * warp); }
  __device__ static int g(int row, int c) { return halves::sg(row, c); }  // c: within the half
};

// The raw gate of `half` (staged by issue_raw_gate_loads<HalfGateStrips>, its group landed) into
// G over the half's strips, warps 0..3; the caller synchronizes the warp before.
__device__ __forceinline__ void activate_raw_gate_half(const RawPrepArgs& raw, float a_log,
                                                       float dt_bias, int n,
                                                       unsigned char* smem) {
  if (!raw.raw_gate || (threadIdx.x >> 5) >= HalfGateStrips::kStripWarps) return;  // uniform
  const GateChannel channel = gate_channel(a_log, dt_bias);
  if (n == kC) {  // uniform: whole chunks need no row predicates
    activate_raw_gate<true, HalfGateStrips>(raw, smem, n, channel);
  } else {
    activate_raw_gate<false, HalfGateStrips>(raw, smem, n, channel);
  }
}

// Phases 1 and 2a, up to the load barrier: q (its own group per warp), half 0's k and G, beta,
// q's row factors. Raw inputs: the raw gate's half 0 first (its own group), then q, then raw k
// whole into KT (warp w its own 8 rows, q's pattern: its own group), each waited for by the
// warps that use it (gate: warps 0..3 activate it; q and k: every warp its own rows' norms).
template <bool kRawInputs>
__device__ __forceinline__ void load_chunk_halves(const PrepArgs& args, const RawPrepArgs& raw,
                                                  const RawScalars& scalars,
                                                  const ChunkRef& chunk, int h, int tid, int lane,
                                                  int warp, unsigned char* smem) {
  const int n = chunk.rows;
  const int64_t head_offset = static_cast<int64_t>(h) * kD;
  if constexpr (kRawInputs) issue_raw_gate_loads<HalfGateStrips>(args, raw, chunk, h, 0, smem);
  copy_warp_rows(args.q + head_offset, args.q_stride, chunk, kSQ, warp, lane, smem);
  cp_async_commit();
  if constexpr (kRawInputs) {
    copy_warp_rows(args.k + head_offset, args.k_stride, chunk, halves::kSKT, warp, lane, smem);
    if (!raw.raw_gate) {  // uniform: a contract gate, in raw k's group
      load_half_k_g(args, static_cast<const float*>(raw.gate), chunk, h, 0, false, smem);
    }
    cp_async_commit();
    // Groups: gate, q, raw k (+ a contract G). The gate's is the oldest of three.
    cp_async_wait_pending<2>();
    __syncwarp();
    activate_raw_gate_half(raw, scalars.a_log, scalars.dt_bias, n, smem);
  } else {
    load_half_k_g(args, args.gate, chunk, h, 0, true, smem);
    cp_async_commit();
    if (tid < kC) {
      stf(smem, halves::kSBeta + 4 * tid,
          tid < n ? args.beta[(chunk.first_token + tid) * args.heads + h] : 0.0f);
    }
  }
  if (args.fuse_q_l2norm) {  // uniform; q's group is the second to last (prep_chunk.cuh 2a)
    cp_async_wait_pending<1>();
    __syncwarp();
    deferred_row_factors(smem, kSQ, halves::kSQScale, kScale, warp, lane);
  } else if (tid < kC) {
    stf(smem, halves::kSQScale + 4 * tid, kScale);
  }
  if constexpr (kRawInputs) {
    if (raw.fuse_k_l2norm) {  // uniform: raw k's deferred norm, its group the last
      cp_async_wait_all();
      __syncwarp();
      deferred_row_factors(smem, halves::kSKT, halves::kSKScale, 1.0f, warp, lane);
    } else if (tid < kC) {
      stf(smem, halves::kSKScale + 4 * tid, 1.0f);
    }
    if (tid < kC) {  // rows >= n: 0
      float b = 0.0f;
      if (tid < n) b = raw.beta_logits ? sigmoid_fast(scalars.beta) : scalars.beta;
      stf(smem, halves::kSBeta + 4 * tid, b);
    }
  }
  cp_async_wait_all();
  __syncthreads();
}

// Half 1's inputs over half 0's (the caller's barrier has passed): k and G (contract), G alone
// (raw kernel, contract gate), or the raw gate's half 1, activated by warps 0..3. Ends in a
// barrier. Raw inputs: the half's first channel and the chunk's first token go through an empty
// asm, which the compiler cannot see through: without it the load addresses are loop-invariant,
// and the compiler computes them before the caller's loop over the halves and spills them over
// phases 2 and 3.
template <bool kRawInputs>
__device__ __forceinline__ void load_second_half(const PrepArgs& args, const RawPrepArgs& raw,
                                                 const ChunkRef& chunk, int h, int half,
                                                 unsigned char* smem) {
  if constexpr (kRawInputs) {
    int channel0 = halves::kHalf * half;
    ChunkRef at = chunk;
    asm volatile("" : "+r"(channel0), "+l"(at.first_token));
    if (raw.raw_gate) {  // uniform
      const int tid = threadIdx.x;
      float a_log = 0.0f, dt_bias = 0.0f;  // read beside the cp.async: their latencies overlap
      if (tid < 32 * HalfGateStrips::kStripWarps) {
        a_log = raw.a_log[h];
        dt_bias = raw.dt_bias[h * kD + channel0 + raw_gate_channel(tid >> 5, tid & 31)];
      }
      issue_raw_gate_loads<HalfGateStrips>(args, raw, at, h, channel0, smem);
      cp_async_wait_all();
      __syncwarp();
      activate_raw_gate_half(raw, a_log, dt_bias, at.rows, smem);
    } else {
      load_half_k_g(args, static_cast<const float*>(raw.gate), at, h, channel0, false, smem);
      cp_async_commit();
      cp_async_wait_all();
    }
  } else {  // (the asm costs the contract kernel 8 bytes of spills more than it saves)
    load_half_k_g(args, args.gate, chunk, h, halves::kHalf * half, true, smem);
    cp_async_commit();
    cp_async_wait_all();
  }
  __syncthreads();
}

// Phase 2 for the channels of `half`: q' = (scale r_i) q Gamma, kg = k 2^(G_{n-1} - G) and
// a = 2^(G_{n-1}) into the record, beta k Gamma (fp16) into the KT region, the grams' column
// operands k_j 2^(G_{m_c} - G_j) (bf16) into the half's column region; half 0 also writes the zero
// upper blocks of A_qk. Gamma's exponential is shared by q' and beta k Gamma. Rows >= n: zeros.
// kKFactors (the raw-input kernel): k is read raw from KT (all of it loaded there), copied into
// the half's k region for the grams, and its row factors multiply it where prep_chunk.cuh's
// store_factors and compute_w_rhs put them (kg and the column operands: k r; W's right-hand side:
// (beta r) k); beta k Gamma then goes over the raw k it came from (the same thread's bytes).
template <class Record, bool kKFactors>
__device__ __forceinline__ void store_factors_half(int n, int tid, int half, unsigned char* smem,
                                                   char* rec) {
#pragma unroll 1
  for (int u = tid; u < kC * halves::kHalf / 8; u += kThreads) {
    const int i = u >> 3;
    const int d0 = 8 * (u & 7);                // channel within the half
    const int d = halves::kHalf * half + d0;  // channel
    const float rq = ldf(smem, halves::kSQScale + 4 * i);
    float qv[8];
    load8_bf16(smem, sq(i, d), qv);
    uint4 qp_bits = make_uint4(0u, 0u, 0u, 0u);
    uint4 kg_bits = qp_bits;
    uint4 col_bits = qp_bits;
    uint4 kt_bits = qp_bits;
    if constexpr (kKFactors) {  // raw k (rows >= n: zeros) into the half's k region
      *reinterpret_cast<uint4*>(smem + halves::sk(i, d0)) =
          *reinterpret_cast<const uint4*>(smem + halves::skt(i, d));
    }
    if (i < n) {  // rows >= n: zeros (their G is G_{n-1}: 2^(G_m - G) could overflow there)
      const int m = anchor(i >> 4, n);
      float b = ldf(smem, halves::kSBeta + 4 * i);
      float g[8], gl[8], gm[8], kv[8];
      load8_f32(smem, halves::sg(i, d0), g);
      load8_f32(smem, halves::sg(n - 1, d0), gl);
      load8_f32(smem, halves::sg(m, d0), gm);
      load8_bf16(smem, kKFactors ? halves::skt(i, d) : halves::sk(i, d0), kv);
      float qp[8], kg[8], col[8], kt[8];
      const float rk = kKFactors ? ldf(smem, halves::kSKScale + 4 * i) : 1.0f;
      if constexpr (kKFactors) b *= rk;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float gamma = ex2_approx(g[e]);
        qp[e] = rq * qv[e] * gamma;
        kt[e] = b * kv[e] * gamma;  // raw inputs: (beta r) k, as prep_chunk.cuh's compute_w_rhs
        const float kr = kKFactors ? kv[e] * rk : kv[e];
        kg[e] = kr * ex2_approx(gl[e] - g[e]);
        col[e] = kr * ex2_approx(gm[e] - g[e]);
      }
      qp_bits = pack8_record<Record::kF16>(qp);
      kg_bits = pack8_record<Record::kF16>(kg);
      col_bits = pack8_bf16(col);
      kt_bits = pack8_f16(kt);
    }
    *reinterpret_cast<uint4*>(rec + Record::qp(i, d)) = qp_bits;
    *reinterpret_cast<uint4*>(rec + Record::kg(i, d)) = kg_bits;
    *reinterpret_cast<uint4*>(smem + halves::scol(i, d0)) = col_bits;
    *reinterpret_cast<uint4*>(smem + halves::skt(i, d)) = kt_bits;
  }
  if (tid < halves::kHalf) {
    *reinterpret_cast<float*>(rec + Record::a(halves::kHalf * half + tid)) =
        exp2f(ldf(smem, halves::sg(n - 1, tid)));
  }
  if (half == 0) zero_aqk_upper_blocks<Record>(tid, rec);
}

// Phase 3 for the channels of `half`: warp w's block pairs w and w + 8 (prep_layout.h), their
// k-steps 4 half .. 4 half + 3 added into acck / accq [task slot][n tile][C register], which
// the caller zeroes before half 0 and keeps over both halves. The operands are prep_chunk.cuh's
// compute_grams' (A: x_i 2^(G_i - G_m) per element, B: the column operands).
__device__ __forceinline__ void accumulate_grams_half(int n, int lane, int warp, int half,
                                                      const unsigned char* smem,
                                                      float (&acck)[2][2][4],
                                                      float (&accq)[2][2][4]) {
#pragma unroll
  for (int slot = 0; slot < 2; ++slot) {
    const int task = warp + 8 * slot;
    if (task >= kGramTasks) break;  // warp-uniform
    const int p = gram_p(task);
    const int c = gram_c(task);
    if (16 * c < n && 16 * p < n) {  // uniform; otherwise the block is zero
      const int m = anchor(c, n);
#pragma unroll 2
      for (int ks = 0; ks < halves::kHalf / 16; ++ks) {
        const int d0 = 16 * ks;  // channel within the half
        uint32_t ak[4], aq[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int row = 16 * p + a_row(lane, r);
          const int col = d0 + a_col(lane, r, 0);
          const float2 gi = ldf2(smem, halves::sg(row, col));
          const float2 gm = ldf2(smem, halves::sg(m, col));
          const float2 kk = ldh2(smem, halves::sk(row, col));
          const float2 qq = ldh2(smem, sq(row, halves::kHalf * half + col));
          const float f0 = ex2_approx(gi.x - gm.x);
          const float f1 = ex2_approx(gi.y - gm.y);
          ak[r] = pack_bf16(kk.x * f0, kk.y * f1);
          aq[r] = pack_bf16(qq.x * f0, qq.y * f1);
        }
        gram_block_step<halves::scol>(lane, c, d0, smem, ak, aq, acck[slot], accq[slot]);
      }
    }
  }
}

// Phase 3': A_kk = beta_i A (j < i) into shared memory (the q region: every warp is past the
// grams' last barrier) and A_qk = (scale r_i) A (j <= i) into the record; rows >= n zero.
// kKFactors: k's row factors scale A_kk's rows with beta (the column operands carry the columns').
template <class Record, bool kKFactors>
__device__ __forceinline__ void finish_grams_halves(int n, int lane, int warp,
                                                    unsigned char* smem, char* rec,
                                                    const float (&acck)[2][2][4],
                                                    const float (&accq)[2][2][4]) {
#pragma unroll
  for (int slot = 0; slot < 2; ++slot) {
    const int task = warp + 8 * slot;
    if (task >= kGramTasks) break;
    const int p = gram_p(task);
    const int c = gram_c(task);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int i = 16 * p + c_row(lane, 2 * half);
        const float b = kKFactors
                            ? ldf(smem, halves::kSBeta + 4 * i) * ldf(smem, halves::kSKScale + 4 * i)
                            : ldf(smem, halves::kSBeta + 4 * i);
        const float rq = ldf(smem, halves::kSQScale + 4 * i);  // scale * r_i
        float out_q[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int j = 16 * c + 8 * nt + c_col(lane, e);
          const int reg = 2 * half + e;
          stf(smem, sa(i, j), (j < i && i < n) ? b * acck[slot][nt][reg] : 0.0f);
          out_q[e] = (j <= i && i < n) ? rq * accq[slot][nt][reg] : 0.0f;
        }
        put_pair(rec, Record::aqk(i, 16 * c + 8 * nt + c_col(lane, 0)),
                 pack_record<Record::kF16>(out_q[0], out_q[1]));
      }
    }
  }
}

// One chunk of the channel-halves PREP (the library's two kernels, prep.cu).
template <class Record, bool kRawInputs>
__device__ __forceinline__ void prep_chunk_halves(const PrepArgs& args, const RawPrepArgs& raw) {
  extern __shared__ __align__(128) unsigned char smem[];

  ChunkRef chunk;
  if (!find_chunk(args.seqs, blockIdx.x, chunk)) return;  // unused slot
  const int h = blockIdx.y;
  const int n = chunk.rows;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  char* const rec = chunk_record<Record>(args, h);

  RawScalars scalars{};  // beta, A_log, half 0's dt_bias (half 1's: read with half 1's gate)
  if constexpr (kRawInputs) scalars = load_raw_scalars<HalfGateStrips>(args, raw, chunk, h);
  load_chunk_halves<kRawInputs>(args, raw, scalars, chunk, h, tid, lane, warp, smem);  // barrier

  // 2 and 3, half by half; the grams' accumulators live over both halves.
  float acck[2][2][4], accq[2][2][4];  // [task slot][n tile][C register]
#pragma unroll
  for (int slot = 0; slot < 2; ++slot) {
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int reg = 0; reg < 4; ++reg) acck[slot][nt][reg] = accq[slot][nt][reg] = 0.0f;
    }
  }
#pragma unroll 1
  for (int half = 0; half < 2; ++half) {
    if (half == 1) {  // half 0's k, G and column operands are dead: half 1's go over them
      load_second_half<kRawInputs>(args, raw, chunk, h, half, smem);  // ends in a barrier
    }
    // Raw inputs: the record's base through an empty asm, or the compiler computes phase 2's
    // loop-invariant store addresses before the loop and spills them over it.
    char* rec_half = rec;
    if constexpr (kRawInputs) asm volatile("" : "+l"(rec_half));
    store_factors_half<Record, kRawInputs>(n, tid, half, smem, rec_half);
    __syncthreads();
    accumulate_grams_half(n, lane, warp, half, smem, acck, accq);
    __syncthreads();
  }
  // q, k, G and the column operands are dead: v goes over the halves' region (beside X), and
  // lands while the inverse runs.
  load_v(args, chunk, h, smem);
  finish_grams_halves<Record, kRawInputs>(n, lane, warp, smem, rec, acck, accq);
  __syncthreads();

  // 4a. X's diagonal blocks (warps 0..3; W's right-hand side is already in KT).
  if (warp < 4) {
    float x[16];
    invert_diagonal_blocks<halves::Tail>(lane, warp, smem, x);
  }
  __syncthreads();

  // 4b. X's off-diagonal blocks, level by level.
#pragma unroll 1
  for (int level = 1; level <= 3; ++level) {
    if (warp < schur_units(level)) {  // uniform
      invert_off_diagonal_level<halves::Tail>(level, lane, warp, smem);
    }
    __syncthreads();
  }

  // 5a. T's fp16 and bf16 copies for phase 5's ldmatrix; v has landed after this wait.
  float t[8], b[8], tb[8];
  copy_t_operands<halves::Tail>(tid, smem, t, b, tb);
  cp_async_wait_all();
  __syncthreads();

  // 5. W and U into the record.
  float acc[4][2][4];  // [m tile][n tile][C register]
  float u_mult[2][2];  // [n tile][column of the pair]
  multiply_w_u<Record, halves::Tail, true, /*kStagedStores=*/true>(n, lane, warp, smem, rec, acc,
                                                                 u_mult);
}

}  // namespace kda::detail::prep
