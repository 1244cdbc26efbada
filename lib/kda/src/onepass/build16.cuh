// The 16-token factor build of one sub-chunk by one 128-thread warpgroup (record16.h has the
// math): run by the one-pass forward's builder warpgroups (kernel.cuh) and by the lab's standalone
// builder (lab/experiments/factors16.cu, one CTA per sub-chunk), which differ only in where the
// record goes (a shared-memory ring buffer or global memory), in the barrier that separates the
// phases (a named barrier of the warpgroup or the CTA's) and in when the inputs are asked for
// (each builder asks for its next sub-chunk's before it builds this one: with at most two into a
// second input set, with three in place, build_sub_chunk's load_ahead).
// Shared memory is an input set (q, k, v, G,
// the gate row before the sub-chunk, beta: what issue_loads fills; several phases overwrite parts
// of it in place) and a work region. Phases, a barrier between each:
//   1  issue_loads: q, k, v (bf16), G (fp32, rows >= n: G_{n-1}), the row before and beta by
//      cp.async; rows >= n of q, k, v and beta zeros by selection (that memory belongs to the next
//      sequence or lies past the end); build_sub_chunk waits for them
//   2  thread (channels 4 (t % 32) .. +3, rows t / 32 + 4 r): the channels' anchors
//      cs = 2^(Gm - Gs), ce = 2^(Ge - Gm) (and A = 2^(Ge - Gs) to the record, warp 0), the fused
//      q norm's and raw k's norm factors (a warp's 4 rows reduced side by side), two
//      exponentials per element and every elementwise factor: the grams' operands (bf16:
//      k 2^(G - Gm), scale r q 2^(G - Gm) rows over k and q in place, k 2^(Gm - G) columns), W's right-hand side beta k 2^(G - Gs)
//      (fp16), QP and KG (bf16, to the record), each the one before it times a per-channel
//      factor where it can be (8 multiplies per element); every shared access of a warp is
//      consecutive bytes (no bank conflicts)
//   3  grams on mma.sync: warp w runs k-steps 2w, 2w + 1 of both (16 x 16, shared column
//      operand); partials summed in warp order, beta folded in (q's rows carry scale r
//      already), AQK to the record
//   4  T = (I + A_kk)^-1 in 8 x 8 blocks on warp 0
//   5  W = T rhs (fp16 operands), U = beta v + (T - I) diag(beta) v (bf16 operands, the diagonal
//      term in fp32); warp w owns columns 32 w .. +31; U goes out transposed, in fp32
// Every sum has a fixed order: bitwise reproducible, and the same bits wherever the record goes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "device/ptx.cuh"
#include "device/wgmma.cuh"  // mbarrier_wait
#include "gate_activation.cuh"
#include "l2norm_row.cuh"
#include "onepass/record16.h"
#include "prep/prep_chunk.cuh"  // deferred_row_norm
#include "raw_inputs.h"

namespace kda::detail::onepass::build {

using namespace kda::detail::ptx;  // NOLINT: the PTX wrappers are this file's vocabulary
using kda::detail::gate_log2;
using kda::detail::gate_second_half_base;
using kda::detail::gate_sigmoid;
using kda::detail::GateChannel;
using kda::detail::RawPrepArgs;
using kda::detail::sigmoid_fast;

// ---- Shared memory (bytes). 16-bit tiles have 136-element rows (272 bytes): ldmatrix's 8 row
// addresses then fall in 8 distinct 16-byte bank groups. fp32 16 x 16 tiles have 24-float rows.
constexpr int kLd16 = 136;
constexpr int kLdG = 132;
constexpr int kLdS = 24;
constexpr int kTile16 = kSub * kLd16 * 2;  // 4,352
// The input set (offsets from its base).
constexpr int kSQ = 0;  // q bf16; the grams' q rows scale r q 2^(G - Gm) after 2
constexpr int kSK = kSQ + kTile16;          // k bf16; the grams' k rows k 2^(G - Gm) after 2
constexpr int kSV = kSK + kTile16;          // v bf16
constexpr int kSG = kSV + kTile16;          // G fp32 [16][132]; the grams' partials after 2
constexpr int kSPart = kSG;                  // [4 warps][2 grams][16][16] fp32
constexpr int kSGs = kSG + kSub * kLdG * 4;  // the gate row before the sub-chunk [128]
constexpr int kSBeta = kSGs + kDim * 4;      // [2 slots][16] (build_sub_chunk's beta_slot)
constexpr int kInBytes = kSBeta + 2 * kSub * 4;  // 22,144
constexpr int kSRowK = kSK;
constexpr int kSRowQ = kSQ;
static_assert(4 * 2 * kSub * kSub * 4 <= kSGs - kSG, "the partials fit in G's region");
// The work region (offsets from its base).
constexpr int kSColK = 0;                    // bf16 k 2^(Gm - G)
constexpr int kSRhsW = kSColK + kTile16;     // fp16 beta k 2^(G - Gs)
constexpr int kSA = kSRhsW + kTile16;        // A_kk fp32 [16][24]
constexpr int kST = kSA + kSub * kLdS * 4;   // T fp32 [16][24]
constexpr int kWorkBytes = kST + kSub * kLdS * 4;  // 11,776
static_assert(kSA % 16 == 0 && kST % 16 == 0 && kLdS % 4 == 0, "A's and T's rows as float4s");
// One input set and the work region after it: the standalone builder's shared memory.
constexpr int kSBytes = kInBytes + kWorkBytes;
static_assert(kSBytes == 33920, "six CTAs per SM");

__device__ __forceinline__ int s16(int region, int row, int col) {
  return region + 2 * (row * kLd16 + col);
}
__device__ __forceinline__ int sg(int row, int col) { return kSG + 4 * (row * kLdG + col); }
__device__ __forceinline__ int ss(int region, int row, int col) {
  return region + 4 * (row * kLdS + col);
}

struct SubChunk {
  int64_t first_token;
  int rows;       // n, 1..16
  bool at_chunk;  // the sub-chunk starts a 64-token chunk (its Gs is 0)
};

// 4 bf16 values (8 bytes, one uint2) as floats; load4_bf16: those at byte `byte` of `s`.
__device__ __forceinline__ void unpack4_bf16(uint2 w, float (&x)[4]) {
  const float2 lo = unpack_bf16(w.x), hi = unpack_bf16(w.y);
  x[0] = lo.x;
  x[1] = lo.y;
  x[2] = hi.x;
  x[3] = hi.y;
}
__device__ __forceinline__ void load4_bf16(const unsigned char* s, int byte, float (&x)[4]) {
  unpack4_bf16(*reinterpret_cast<const uint2*>(s + byte), x);
}
// 4 values as bf16 (kF16 false) or fp16 in 8 bytes; store4: one 8-byte store at `dst` (shared
// or global).
template <bool kF16>
__device__ __forceinline__ uint2 pack4(const float (&x)[4]) {
  return kF16 ? make_uint2(pack_f16(x[0], x[1]), pack_f16(x[2], x[3]))
              : make_uint2(pack_bf16(x[0], x[1]), pack_bf16(x[2], x[3]));
}
template <bool kF16>
__device__ __forceinline__ void store4(void* dst, const float (&x)[4]) {
  *reinterpret_cast<uint2*>(dst) = pack4<kF16>(x);
}

// Where a build's record goes (build_sub_chunk's `rec`): put for QP, KG and AQK (phases 2, 3),
// put_w for W (phase 5), put_a for A, put_u for U^T.
//   OneRecord     one record16.h record: a ring buffer of the one-pass kernel's own chain (or of
//                 the value-halves CTA that builds it, halves.cuh, which then copies it whole
//                 to its peer), or global memory (the lab's standalone builder);
//   StagedRecord  below.
struct OneRecord {
  unsigned char* rec;
  template <class T>
  __device__ __forceinline__ void put(int64_t offset, T x) const {
    *reinterpret_cast<T*>(rec + offset) = x;
  }
  template <class T>
  __device__ __forceinline__ void put_w(int64_t offset, T x) const {
    put(offset, x);
  }
  __device__ __forceinline__ void put_a(int d, float4 x) const { put(rec_a(d), x); }
  __device__ __forceinline__ void put_u(int d, int i, float x) const { put(rec_ut(d, i), x); }
};
// A record whose value-independent parts before phase 5 (QP, KG, AQK, A: written in phases 2
// and 3) go to the builder's own staging area, and W and U^T (phase 5) to `target`: a ring buffer
// is then needed only from phase 5 on (build_sub_chunk's `acquire`, which waits for it and copies
// the staged parts in: copy_staged), not for the whole build. Staging layout: QP, KG, AQK's tile
// as in the record from kRecQP on, then A.
inline constexpr int kStageA = kRecUT - kRecQP;               // 10,240
inline constexpr int kStageBytes = kStageA + kDim * 4;        // 10,752
struct StagedRecord {
  unsigned char* stage;  // kStageBytes, 16-byte aligned
  OneRecord target;
  template <class T>
  __device__ __forceinline__ void put(int64_t offset, T x) const {
    *reinterpret_cast<T*>(stage + (offset - kRecQP)) = x;
  }
  template <class T>
  __device__ __forceinline__ void put_w(int64_t offset, T x) const {
    target.put(offset, x);
  }
  __device__ __forceinline__ void put_a(int d, float4 x) const {
    *reinterpret_cast<float4*>(stage + kStageA + 4 * d) = x;
  }
  __device__ __forceinline__ void put_u(int d, int i, float x) const { target.put_u(d, i, x); }
};
// The staged parts into `target` by thread tid (0 .. 127) of the builder: 16-byte units, the
// tiles' at their record offsets, A at the record's A.
__device__ __forceinline__ void copy_staged(const unsigned char* stage, const OneRecord& target,
                                            int tid) {
  constexpr int kUnits = kStageBytes / 16;  // 672
#pragma unroll
  for (int it = 0; it < (kUnits + kWarpgroup - 1) / kWarpgroup; ++it) {
    const int u = tid + kWarpgroup * it;
    if (u < kUnits) {
      const uint4 x = *reinterpret_cast<const uint4*>(stage + 16 * u);
      target.put(16 * u < kStageA ? kRecQP + 16 * u : rec_a(0) + (16 * u - kStageA), x);
    }
  }
}
// 4 bytes from global to shared memory, asynchronously (cp.async's 4-byte form).
// x[0 .. n - 1] = p[0 .. n - 1] (n <= 8, a compile-time constant after unrolling; p 16-byte
// aligned) in as few shared-memory loads as widths allow: 4, then 2, then 1 floats (a whole row
// of 8: prep_chunk.cuh load8_f32).
__device__ __forceinline__ void load_prefix(const float* p, int n, float (&x)[8]) {
  int at = 0;
#pragma unroll
  for (int width = 4; width > 0; width >>= 1) {
#pragma unroll
    for (int rep = 0; rep < 2; ++rep) {
      if (n - at >= width) {
        if (width == 4) {
          const float4 v = *reinterpret_cast<const float4*>(p + at);
          x[at] = v.x, x[at + 1] = v.y, x[at + 2] = v.z, x[at + 3] = v.w;
        } else if (width == 2) {
          const float2 v = *reinterpret_cast<const float2*>(p + at);
          x[at] = v.x, x[at + 1] = v.y;
        } else {
          x[at] = p[at];
        }
        at += width;
      }
    }
  }
}
__device__ __forceinline__ void cp_async4(uint32_t smem_dst, const void* gmem_src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_dst), "l"(gmem_src)
               : "memory");
}
// 16 rows of one bf16 tensor of sub-chunk `sc` of head h into `region` of the input set `in` by
// thread tid (0 .. 127) of a warpgroup, cp.async (rows >= n: zeros by selection). The tensor's
// first row is one 64-bit address, the rows after it 32-bit offsets (record16.h
// row_offsets_fit).
__device__ __forceinline__ void issue_rows(const __nv_bfloat16* x, int64_t stride,
                                           const SubChunk& sc, int h, int tid, unsigned char* in,
                                           int region) {
  const __nv_bfloat16* const x0 = x + sc.first_token * stride + static_cast<int64_t>(h) * kDim;
  const int xs = static_cast<int>(stride);
#pragma unroll
  for (int it = 0; it < 2; ++it) {  // 16 rows x 16 units, two units per thread
    const int u = tid + kWarpgroup * it;
    const int i = u >> 4, c = 8 * (u & 15);
    if (i < sc.rows) {
      cp_async16(smem_u32(in + s16(region, i, c)), x0 + (i * xs + c));
    } else {
      *reinterpret_cast<uint4*>(in + s16(region, i, c)) = make_uint4(0u, 0u, 0u, 0u);
    }
  }
}
// The contract's G (rows >= n repeat row n - 1) and the row before it, Gs (0 at a 64-token
// chunk's start), from `gate` [tokens][heads][128] fp32, cp.async.
__device__ __forceinline__ void issue_gate(const float* gate, int heads, const SubChunk& sc, int h,
                                           int tid, unsigned char* in) {
  const int n = sc.rows;
  const int gate_row = heads * kDim;
  const float* const g0 = gate + sc.first_token * gate_row + static_cast<int64_t>(h) * kDim;
#pragma unroll
  for (int it = 0; it < 4; ++it) {  // G: 16 rows x 32 units
    const int u = tid + kWarpgroup * it;
    const int i = u >> 5, c = 4 * (u & 31);
    cp_async16(smem_u32(in + sg(i, c)), g0 + (min(i, n - 1) * gate_row + c));
  }
  if (tid < 32) {
    const int c = 4 * tid;
    if (sc.at_chunk) {
      *reinterpret_cast<float4*>(in + kSGs + 4 * c) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    } else {
      cp_async16(smem_u32(in + kSGs + 4 * c), g0 + (c - gate_row));
    }
  }
}

// Beta's rows of sub-chunk `sc` of head h into slot `beta_slot` of the input set by thread tid
// (rows >= n: 0), cp.async.
__device__ __forceinline__ void issue_beta(const BuildInputs& a, const SubChunk& sc, int h, int tid,
                                           unsigned char* in, int beta_slot) {
  if (tid >= 32 && tid < 32 + kSub) {
    const int i = tid - 32;
    unsigned char* const at = in + kSBeta + kSub * 4 * beta_slot + 4 * i;
    if (i < sc.rows) {
      cp_async4(smem_u32(at), a.beta + (sc.first_token * a.heads + h) + i * a.heads);
    } else {
      *reinterpret_cast<float*>(at) = 0.0f;
    }
  }
}

// Phase 1 for sub-chunk `sc` of head h (the contract's inputs) into the input set `in` (16-byte
// aligned) by thread tid (0 .. 127) of a warpgroup: its cp.async copies form one group, committed
// here; beta to slot 0.
__device__ __forceinline__ void issue_loads(const BuildInputs& a, const SubChunk& sc, int h,
                                            int tid, unsigned char* in) {
  issue_rows(a.q, a.q_stride, sc, h, tid, in, kSQ);
  issue_rows(a.k, a.k_stride, sc, h, tid, in, kSK);
  issue_rows(a.v, a.v_stride, sc, h, tid, in, kSV);
  issue_gate(a.gate, a.heads, sc, h, tid, in);
  issue_beta(a, sc, h, tid, in, 0);
  cp_async_commit();
}

// Phase 1 in two groups, for a builder that asks for its next sub-chunk's inputs while it builds
// this one, in place (build_sub_chunk's load_ahead): issue_ahead's group (q, k, G, Gs, beta to
// `beta_slot`) goes out during the previous build, once phase 3 has left those regions dead;
// issue_v's group (v, read only by phase 5) when this build starts. Each commits its group.
__device__ __forceinline__ void issue_ahead(const BuildInputs& a, const SubChunk& sc, int h,
                                            int tid, unsigned char* in, int beta_slot) {
  issue_rows(a.q, a.q_stride, sc, h, tid, in, kSQ);
  issue_rows(a.k, a.k_stride, sc, h, tid, in, kSK);
  issue_gate(a.gate, a.heads, sc, h, tid, in);
  issue_beta(a, sc, h, tid, in, beta_slot);
  cp_async_commit();
}
__device__ __forceinline__ void issue_v(const BuildInputs& a, const SubChunk& sc, int h, int tid,
                                        unsigned char* in) {
  issue_rows(a.v, a.v_stride, sc, h, tid, in, kSV);
  cp_async_commit();
}

// The deferred norm factors 1 / sqrt(|x_i|^2 + 1e-6) of the warp's 4 rows i = warp + 4 r of the
// bf16 tile `region` of the input set (lane: channels d0 .. d0 + 3), by a reduce-scatter: the
// first two butterfly levels (lane offsets 16, 8) send only the rows the partner keeps, so after
// them lane l holds row r = 2 (l / 16 % 2) + l / 8 % 2's partial sum over its 8 lanes' peers, the
// last three levels reduce that one value, one MUFU rsqrt (relative error < 2^-22, as PREP's)
// takes its factor, and four shuffles hand every lane all four (6 + 4 shuffles and 6 adds
// instead of 20 and 20). Each sum is group_sum<32>'s tree, levels in the same order: a + b = b + a
// exactly, so the bits of every row are the butterfly's.
// Returns true when a row of the warp has an fp32 sum of squares that overflows (a huge or
// non-finite row, uniform in the warp): the caller then takes deferred_row_norm row by row,
// which rescales such rows exactly first, and ignores `factor`.
__device__ __forceinline__ bool batched_row_norms(const unsigned char* in, int region, int warp,
                                                  int d0, float (&factor)[4]) {
  float ssq[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    float x[4];
    load4_bf16(in, s16(region, warp + 4 * r, d0), x);
    ssq[r] = kda::detail::prep::partial_ssq(x);
  }
  const int lane = d0 >> 2;
  const bool hi16 = (lane & 16) != 0, hi8 = (lane & 8) != 0;
  // Offset 16: lanes < 16 keep rows 0, 1 and send rows 2, 3; lanes >= 16 the other way round.
  float pair[2];
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const float keep = hi16 ? ssq[2 + e] : ssq[e];
    const float send = hi16 ? ssq[e] : ssq[2 + e];
    pair[e] = __fadd_rn(keep, __shfl_xor_sync(0xffffffffu, send, 16));
  }
  // Offset 8: the lanes whose bit 3 is clear keep the first of the pair.
  float sum;
  {
    const float keep = hi8 ? pair[1] : pair[0];
    const float send = hi8 ? pair[0] : pair[1];
    sum = __fadd_rn(keep, __shfl_xor_sync(0xffffffffu, send, 8));
  }
#pragma unroll
  for (int offset = 4; offset > 0; offset >>= 1) {
    sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, offset));
  }
  const float mine = rsqrtf(sum + kL2NormEps);
#pragma unroll
  for (int r = 0; r < 4; ++r) factor[r] = __shfl_sync(0xffffffffu, mine, 8 * r);
  return __any_sync(0xffffffffu, isinf(sum));
}

// ---- Raw inputs (raw_inputs.h: GateInput::raw, BetaInput::logits, bf16 beta, fuse_k_l2norm).
// The raw gate's cumsum runs along each 64-token chunk, across the sub-chunks that different
// builders build: sub-chunk c's builder continues the running sums of c - 1's (and, in a chunk's
// second half, takes the first half's total as its base), exactly in gate_activation.cuh's order,
// so G is gate_cumsum's bit for bit. The running sums go from sub-chunk to sub-chunk through a
// ring of kCarrySlots shared-memory rows, each with an mbarrier of 128 arrivals (one per channel).
// A slot is reused by sub-chunk c + kCarrySlots only after its readers c + 1 and c + 2 are done:
// that builder waits for ring buffer (c + kCarrySlots) % 4, which the chain frees after step
// c + kCarrySlots - 4 >= c + 2, whose record was built after its prologue read the slot.
// The carry's interface (raw_prologue's `carry`): wait(c) until sub-chunk c's row (the previous
// sub-chunk's) is here and read(c, tid) its channel tid; wait_two_back(c) and read_two_back(c,
// tid) the same for the row two back (a chunk's fourth sub-chunk reads its first half's total);
// publish(c, x, tid, sync) this build's row (every thread its channel). GateCarry: one CTA's
// builders (kernel.cuh), each slot's mbarrier taking the 128 threads' arrivals; halves.cuh has
// the value halves' PairCarry.
inline constexpr int kCarrySlots = 8;
struct GateCarry {
  static constexpr int kSlots = kCarrySlots;
  float* running;    // shared [kCarrySlots][128]: the running sum at sub-chunk c's last row
  uint32_t barrier;  // shared address of kCarrySlots mbarriers, 8 bytes apart
  __device__ __forceinline__ void wait(int64_t c) const {
    kda::detail::wgmma::mbarrier_wait(barrier + 8 * static_cast<uint32_t>(c % kSlots),
                                      static_cast<uint32_t>((c / kSlots) & 1));
  }
  // c - 2's row for c (a chunk's fourth sub-chunk): c - 1's wait has seen it already.
  __device__ __forceinline__ void wait_two_back(int64_t) const {}
  __device__ __forceinline__ float read(int64_t c, int tid) const {
    return running[(c % kSlots) * kDim + tid];
  }
  __device__ __forceinline__ float read_two_back(int64_t c, int tid) const { return read(c, tid); }
  template <class Sync>
  __device__ __forceinline__ void publish(int64_t c, float x, int tid, const Sync&) const {
    running[(c % kSlots) * kDim + tid] = x;
    kda::detail::wgmma::mbarrier_arrive(barrier + 8 * static_cast<uint32_t>(c % kSlots));
  }
};
// Where the raw gate tile lands: G's region of the input set ([16][128] bf16 or fp32, compact
// rows), which raw_prologue turns into G once every thread has read its channel's raw values.
constexpr int kSRawGate = kSG;
static_assert(kSub * kDim * 4 <= kSGs - kSG, "the raw gate tile fits in G's region");

// Phase 1 ahead for raw inputs (issue_ahead's counterpart, for build_sub_chunk's load_ahead): q, k
// (raw when fuse_k_l2norm), the raw gate's rows < n into G's region (or G and Gs as the
// contract's when the gate is not raw); v comes with issue_v. Beta by a plain load whose value
// (thread < n < 16: row tid's, a logit if beta_logits) the prologue stores, so its latency passes
// under the build that asks for it. One cp.async group, committed here.
__device__ __forceinline__ float issue_raw_ahead(const BuildInputs& a, const RawPrepArgs& raw,
                                                 const SubChunk& sc, int h, int tid,
                                                 unsigned char* in) {
  const int n = sc.rows;
  issue_rows(a.q, a.q_stride, sc, h, tid, in, kSQ);
  issue_rows(a.k, a.k_stride, sc, h, tid, in, kSK);
  if (raw.raw_gate) {  // uniform
    const int64_t at = (sc.first_token * a.heads + h) * kDim;
    const int gate_row = a.heads * kDim;
    if (raw.gate_bf16) {  // 16 rows x 16 units
      const auto* g0 = static_cast<const __nv_bfloat16*>(raw.gate) + at;
#pragma unroll
      for (int it = 0; it < 2; ++it) {
        const int u = tid + kWarpgroup * it;
        const int i = u >> 4, c = 8 * (u & 15);
        if (i < n) {
          cp_async16(smem_u32(in + kSRawGate + 2 * (i * kDim + c)), g0 + (i * gate_row + c));
        }
      }
    } else {  // 16 rows x 32 units
      const auto* g0 = static_cast<const float*>(raw.gate) + at;
#pragma unroll
      for (int it = 0; it < 4; ++it) {
        const int u = tid + kWarpgroup * it;
        const int i = u >> 5, c = 4 * (u & 31);
        if (i < n) {
          cp_async16(smem_u32(in + kSRawGate + 4 * (i * kDim + c)), g0 + (i * gate_row + c));
        }
      }
    }
  } else {
    issue_gate(static_cast<const float*>(raw.gate), a.heads, sc, h, tid, in);
  }
  cp_async_commit();
  float beta = 0.0f;
  if (tid < n) {
    const int64_t at = (sc.first_token + tid) * a.heads + h;
    using kda::detail::load_as_float;
    beta = raw.beta_bf16 ? load_as_float(static_cast<const __nv_bfloat16*>(raw.beta) + at)
                         : load_as_float(static_cast<const float*>(raw.beta) + at);
  }
  return beta;
}

// The raw-input prologue of sub-chunk c (index within its sequence) by thread tid = channel tid,
// between the load barrier and phase 2: beta (rows >= n: 0), and with the raw gate this channel's
// G rows from the raw tile, the row before Gs, and its running sum handed on to c + 1. The raw
// tile lies in G's region: each thread first activates all 16 of its channel's raw values into
// registers, and only after `sync()` (every thread has read its raw values) continues the running
// sums and writes G over the tile; the activations so also stay off the chain of running sums
// from sub-chunk to sub-chunk (the carry's wait comes after them).
// The 16 activations are independent: the loads go out back to back and the MUFU pairs overlap,
// with no branch between them (a row-by-row `if (i < n)` made each row one load -> FFMA -> EX2
// -> FADD -> RCP latency chain, ~16 x 80 cycles a build). Rows >= n activate whatever the tile
// holds there (an earlier build's values, or NaN: never added, the running sum selects past them).
// `channel`, `scale`: gate_activation.cuh's gate_channel(A_log[h], dt_bias[h, tid]) and
// gate_scale(lower_bound).
template <class Carry, class Sync>
__device__ __forceinline__ void raw_prologue(const RawPrepArgs& raw, GateChannel channel,
                                             float scale, int64_t c, int n, float beta,
                                             const Carry& carry, int tid, unsigned char* in,
                                             const Sync& sync) {
  if (tid < kSub) {
    float b = 0.0f;
    if (tid < n) b = raw.beta_logits ? sigmoid_fast(beta) : beta;
    *reinterpret_cast<float*>(in + kSBeta + 4 * tid) = b;
  }
  if (!raw.raw_gate) return;  // uniform: G and Gs came with the copies
  float activated[kSub];
  const unsigned char* const tile = in + kSRawGate;
  if (raw.gate_bf16) {  // uniform
#pragma unroll
    for (int i = 0; i < kSub; ++i) {
      activated[i] = kda::detail::load_as_float(
          reinterpret_cast<const __nv_bfloat16*>(tile + 2 * (i * kDim + tid)));
    }
  } else {
#pragma unroll
    for (int i = 0; i < kSub; ++i) {
      activated[i] = *reinterpret_cast<const float*>(tile + 4 * (i * kDim + tid));
    }
  }
#pragma unroll
  for (int i = 0; i < kSub; ++i) activated[i] = gate_sigmoid(activated[i], channel);
  sync();  // the raw tile is read: G may go over it
  const int position = static_cast<int>(c & 3);  // in the 64-token chunk
  float running = 0.0f, base = -0.0f, gs = 0.0f;  // a chunk's first sub-chunk: Gs = 0
  if (position != 0) {
    carry.wait(c - 1);
    const float before = carry.read(c - 1, tid);
    if (position == 2) {  // the second half: from 0 again, on the first half's total
      base = gate_second_half_base(scale, before);
      gs = gate_log2(before, scale, -0.0f);
    } else {
      running = before;
      if (position == 3) {  // c - 2's slot: the first half's total
        carry.wait_two_back(c - 2);
        base = gate_second_half_base(scale, carry.read_two_back(c - 2, tid));
      }
      gs = gate_log2(running, scale, base);
    }
  }
#pragma unroll
  for (int i = 0; i < kSub; ++i) {  // rows >= n add nothing: G_{n-1} again
    running = i < n ? __fadd_rn(running, activated[i]) : running;
    *reinterpret_cast<float*>(in + sg(i, tid)) = gate_log2(running, scale, base);
  }
  *reinterpret_cast<float*>(in + kSGs + 4 * tid) = gs;
  carry.publish(c, running, tid, sync);
}

// Phases 2 - 5: sub-chunk `sc`'s factors into `rec` (OneRecord: a record's 23,040 bytes, global
// or shared, the same bits; StagedRecord: its first parts staged) by the 128
// threads tid = 0 .. 127 of a warpgroup, from the input set `in` whose issue_loads group is this
// thread's kPending-th newest still in flight (0: the newest), with `work` its kWorkBytes of work
// region (16-byte aligned) and `sync()` a barrier of exactly those threads. Both regions are free
// again once the caller's barrier after this call has passed; the record's writes are ordinary
// stores (a consumer that reads them through the async proxy needs a proxy fence first). With raw
// inputs `prologue()` runs after the load barrier (raw_prologue: beta, G, Gs), followed by a
// barrier of its own, and fuse_k_l2norm normalizes raw k's rows in phase 2 (the factor applied to k
// in fp32 before every use: the grams' operands, W's right-hand side, KG). Beta is read from slot
// `beta_slot` of the input set. With `load_ahead` (issue_ahead / issue_v's split loads): this
// build's v rows are the newest group in flight at the start (kPending 1), and `load_ahead()` runs
// once the grams are reduced, when the q, k, G and Gs regions and the other beta slot are dead: it
// asks for the builder's next sub-chunk's (issue_ahead, or an empty group when there is none, so
// that the count stays uniform); phase 5 then waits for v's group only. The next build's inputs
// land during phases 4, 5 and the ring's hand-over instead of at its start.
struct NoPrologue {
  __device__ void operator()() const {}
};
struct NoLoadAhead {
  __device__ void operator()() const {}
};
struct NoAcquire {
  __device__ void operator()() const {}
};
template <int kPending, bool kF16Tiles = false, class Record, class Sync,
          class Prologue = NoPrologue, class LoadAhead = NoLoadAhead, class Acquire = NoAcquire>
__device__ __forceinline__ void build_sub_chunk(const SubChunk& sc, bool fuse_q_l2norm, int tid,
                                                unsigned char* in, unsigned char* work,
                                                const Record& rec, const Sync& sync,
                                                bool fuse_k_l2norm = false,
                                                const Prologue& prologue = Prologue{},
                                                const LoadAhead& load_ahead = LoadAhead{},
                                                int beta_slot = 0,
                                                const Acquire& acquire = Acquire{}) {
  constexpr bool kLoadAhead = !std::is_same_v<LoadAhead, NoLoadAhead>;
  static_assert(!kLoadAhead || kPending == 1, "with the loads ahead, v's group is still in flight");
  const int lane = tid & 31, warp = tid >> 5;
  const int n = sc.rows;
  const int beta_at = kSBeta + kSub * 4 * beta_slot;
  cp_async_wait_pending<kPending>();
  sync();
  if constexpr (!std::is_same_v<Prologue, NoPrologue>) {
    prologue();
    sync();
  }

  // ---- 2: the elementwise factors of rows warp + 4 r, channels d0 .. d0 + 3.
  {
    const int m = min(8, n - 1), d0 = 4 * lane;
    const float4 gs = *reinterpret_cast<const float4*>(in + kSGs + 4 * d0);
    const float4 gm4 = *reinterpret_cast<const float4*>(in + sg(m, d0));
    const float4 ge = *reinterpret_cast<const float4*>(in + sg(n - 1, d0));
    const float gm[4] = {gm4.x, gm4.y, gm4.z, gm4.w};
    const float cs[4] = {ex2_approx(gm4.x - gs.x), ex2_approx(gm4.y - gs.y),
                         ex2_approx(gm4.z - gs.z), ex2_approx(gm4.w - gs.w)};
    const float ce[4] = {ex2_approx(ge.x - gm4.x), ex2_approx(ge.y - gm4.y),
                         ex2_approx(ge.z - gm4.z), ex2_approx(ge.w - gm4.w)};
    if (warp == 0) {
      rec.put_a(d0, make_float4(ex2_approx(ge.x - gs.x), ex2_approx(ge.y - gs.y),
                                ex2_approx(ge.z - gs.z), ex2_approx(ge.w - gs.w)));
    }
    // The fused q norm's and raw k's norm factors of the warp's 4 rows (batched_row_norms; a
    // warp holding a huge or non-finite row takes deferred_row_norm row by row instead). The bf16
    // tiles' build computes both on every build, without a branch (a path that does not fuse q's
    // norm takes the factor 1 by selection below; k's is used only where fused): behind
    // `if (fuse)` each reduction's shuffle chain (~350 cycles) was a basic block of its own, run
    // after the other and before any of the rows' work below; branch-free, the two chains and the
    // rows' q-independent work overlap. The fp16 tiles' build (the library's explicit path: q is
    // not fused) keeps the branch, so as not to pay for a norm it discards.
    float qnorm[4] = {1.0f, 1.0f, 1.0f, 1.0f}, knorm[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    bool q_huge = false, k_huge = false;
    if (!kF16Tiles || fuse_q_l2norm) q_huge = batched_row_norms(in, kSQ, warp, d0, qnorm);
    if (!kF16Tiles || fuse_k_l2norm) k_huge = batched_row_norms(in, kSK, warp, d0, knorm);
    const bool qnorm_by_row = fuse_q_l2norm && q_huge;
    const bool knorm_by_row = fuse_k_l2norm && k_huge;
    // Row r + 1's q, k, G and beta are loaded before row r's stores (software pipelined: the
    // stores go over loaded values, and a load behind them would wait for row r's whole
    // computation, ptxas unable to prove the addresses apart: the 4 rows one latency chain
    // after another). Not in the fp16 tiles' build, whose builders would spill the extra row.
    constexpr bool kPipelineRows = !kF16Tiles;
    struct Row {
      uint2 q, k;
      float4 g;
      float beta;
    };
    const auto load_row = [&](int i) {
      return Row{*reinterpret_cast<const uint2*>(in + s16(kSQ, i, d0)),
                 *reinterpret_cast<const uint2*>(in + s16(kSK, i, d0)),
                 *reinterpret_cast<const float4*>(in + sg(i, d0)),
                 *reinterpret_cast<const float*>(in + beta_at + 4 * i)};
    };
    Row next{};
    if constexpr (kPipelineRows) next = load_row(warp);
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int i = warp + 4 * r;
      const Row row = kPipelineRows ? next : load_row(i);
      if (kPipelineRows && r + 1 < 4) next = load_row(i + 4);
      float q[4], k[4];
      unpack4_bf16(row.q, q);
      unpack4_bf16(row.k, k);
      const float g[4] = {row.g.x, row.g.y, row.g.z, row.g.w};
      float qscale = kda::detail::kScale;
      if (qnorm_by_row) {  // uniform, rare
        bool rescaled;
        // huge rows: q rescaled
        qscale *= kda::detail::prep::deferred_row_norm<32, 4>(q, rescaled);
      } else {
        qscale *= fuse_q_l2norm ? qnorm[r] : 1.0f;
      }
      if (fuse_k_l2norm) {  // uniform: raw k normalized (huge rows rescaled first, exactly)
        float factor = knorm[r];
        if (knorm_by_row) {  // uniform, rare
          bool rescaled;
          factor = kda::detail::prep::deferred_row_norm<32, 4>(k, rescaled);
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) k[e] *= factor;
      }
      const float beta = row.beta;
      float rk[4], rq[4], ck[4], rhs[4], qp[4], kg[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float x = g[e] - gm[e];
        const float fr = ex2_approx(x);   // 2^(G_i - Gm), within 2^+-68
        const float fc = ex2_approx(-x);  // 2^(Gm - G_i)
        rk[e] = k[e] * fr;
        rq[e] = (q[e] * qscale) * fr;  // the scaled, normalized q: |q r| <= 2^-3.5, so <= 2^65
        ck[e] = k[e] * fc;
        rhs[e] = rk[e] * (beta * cs[e]);  // beta k 2^(G_i - Gs) <= 1
        qp[e] = rq[e] * cs[e];            // scale r q 2^(G_i - Gs)
        kg[e] = ck[e] * ce[e];            // k 2^(Ge - G_i) <= 1
      }
      store4<false>(in + s16(kSRowK, i, d0), rk);  // over k's own values, loaded above
      store4<false>(in + s16(kSRowQ, i, d0), rq);  // over q's
      store4<false>(work + s16(kSColK, i, d0), ck);
      store4<true>(work + s16(kSRhsW, i, d0), rhs);
      rec.put(rec_split(kRecQP, i, d0), pack4<kF16Tiles>(qp));
      rec.put(rec_split(kRecKG, i, d0), pack4<kF16Tiles>(kg));
    }
  }
  sync();

  // ---- 3: the grams' k-steps 2 warp, 2 warp + 1 (channels 32 warp .. +31).
  {
    float acck[2][4] = {}, accq[2][4] = {};
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int d0 = 32 * warp + 16 * s;
      uint32_t ak[4], aq[4], b[4];
      const int arow = lane & 15, acol = d0 + 8 * (lane >> 4);
      ldsm_x4(smem_u32(in + s16(kSRowK, arow, acol)), ak);
      ldsm_x4(smem_u32(in + s16(kSRowQ, arow, acol)), aq);
      // B = the column operand stored [j][d]: matrix mi = lane / 8 is (j 0-7 | 8-15 for mi / 2,
      // d 0-7 | 8-15 for mi % 2): registers b0, b1 of n tile 0, then of n tile 1.
      const int mi = lane >> 3;
      ldsm_x4(smem_u32(work + s16(kSColK, (lane & 7) + 8 * (mi >> 1), d0 + 8 * (mi & 1))), b);
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        mma_bf16(acck[nt], ak, b[2 * nt], b[2 * nt + 1]);
        mma_bf16(accq[nt], aq, b[2 * nt], b[2 * nt + 1]);
      }
    }
    const int gr = lane >> 2, gc = 2 * (lane & 3);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int i = gr + 8 * half, j = 8 * nt + gc;
        float* pk = reinterpret_cast<float*>(in + kSPart) + ((warp * 2 + 0) * kSub + i) * kSub + j;
        float* pq = reinterpret_cast<float*>(in + kSPart) + ((warp * 2 + 1) * kSub + i) * kSub + j;
        *reinterpret_cast<float2*>(pk) = make_float2(acck[nt][2 * half], acck[nt][2 * half + 1]);
        *reinterpret_cast<float2*>(pq) = make_float2(accq[nt][2 * half], accq[nt][2 * half + 1]);
      }
    }
  }
  sync();
  {  // thread t: entries (i, 2 (t % 8) .. +1) of both grams, summed in warp order
    const int i = tid >> 3, j = 2 * (tid & 7);
    const float* part = reinterpret_cast<const float*>(in + kSPart);
    float sk[2], sq[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      sk[e] = sq[e] = 0.0f;
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        sk[e] += part[((w * 2 + 0) * kSub + i) * kSub + j + e];
        sq[e] += part[((w * 2 + 1) * kSub + i) * kSub + j + e];
      }
    }
    const float beta = *reinterpret_cast<const float*>(in + beta_at + 4 * i);
    float out_q[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      *reinterpret_cast<float*>(work + ss(kSA, i, j + e)) =
          (j + e < i && i < n) ? beta * sk[e] : 0.0f;
      out_q[e] = (j + e <= i && i < n) ? sq[e] : 0.0f;
    }
    rec.put(rec_aqk(i, j),
            kF16Tiles ? pack_f16(out_q[0], out_q[1]) : pack_bf16(out_q[0], out_q[1]));
  }
  sync();
  if constexpr (kLoadAhead) load_ahead();

  // ---- 4: T = (I + A_kk)^-1 in 8 x 8 blocks (warp 0): the diagonal blocks by forward
  // substitution, lane j < 8 column j of T11, lane 8 + j column j of T22, side by side (lanes
  // 16 .. 31 repeat lanes 0 .. 15 and store nothing); then T21 = -T22 A21 T11, lane l entries
  // (8 + l / 8, l % 8) and (12 + l / 8, l % 8). Dependent depth 28 + 8 + 8 FMAs instead of the 120
  // of one 16-row substitution. A's and T22's rows are read as vectors (load_prefix, load8_f32)
  // and T is stored after the substitution: a store between the rows' loads kept every row's loads
  // behind the previous row's store (ptxas cannot tell A from T), one shared-memory latency a row.
  // (Shuffling T11's columns and y instead of reading them back made the contract kernel's
  // builders spill at 88 registers.)
  if (warp == 0) {
    const float* A = reinterpret_cast<const float*>(work + kSA);
    float* T = reinterpret_cast<float*>(work + kST);
    const int o = lane & 8, j = lane & 7;
    float x[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      float a[8];  // A[o + i][o + r], r < i
      load_prefix(A + (o + i) * kLdS + o, i, a);
      float s = 0.0f;
#pragma unroll
      for (int r = 0; r < i; ++r) s = fmaf(a[r], x[r], s);
      x[i] = (i == j ? 1.0f : 0.0f) - s;
    }
    if (lane < kSub) {
#pragma unroll
      for (int i = 0; i < 8; ++i) T[(o + i) * kLdS + o + j] = x[i];
    }
    if (lane < 8) {  // T12 = 0: row `lane`, columns 8 .. 15
      float4* row = reinterpret_cast<float4*>(T + lane * kLdS + 8);
      row[0] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      row[1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    __syncwarp();  // T11's and T22's columns stored
    const int c = lane & 7;
    float y[8];  // y = A21 T11[:, c]
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      float a[8];  // A21's row k
      kda::detail::prep::load8_f32(work, ss(kSA, 8 + k, 0), a);
      float s = 0.0f;
#pragma unroll
      for (int r = 0; r < 8; ++r) s = fmaf(a[r], T[r * kLdS + c], s);
      y[k] = s;
    }
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const int i = (lane >> 3) + 4 * q;  // row 8 + i
      float t22[8];  // T22's row i
      kda::detail::prep::load8_f32(work, ss(kST, 8 + i, 8), t22);
      float s = 0.0f;
#pragma unroll
      for (int k = 0; k < 8; ++k) s = fmaf(t22[k], y[k], s);
      T[(8 + i) * kLdS + c] = -s;
    }
  }
  if constexpr (kLoadAhead) cp_async_wait_pending<1>();  // v's rows (the next build's may pend)
  sync();
  acquire();  // a StagedRecord's buffer: waited for, the staged parts copied in

  // ---- 5: W and U, columns n0 .. n0 + 31 of warp `warp`.
  {
    const int gr = lane >> 2, gc = 2 * (lane & 3);
    uint32_t at[4], au[4];  // A fragments: T (fp16), (T - I) diag(beta) (bf16)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int i = gr + 8 * (r & 1), j = gc + 8 * (r >> 1);
      const float2 t = *reinterpret_cast<const float2*>(work + ss(kST, i, j));
      const float b0 = *reinterpret_cast<const float*>(in + beta_at + 4 * j);
      const float b1 = *reinterpret_cast<const float*>(in + beta_at + 4 * (j + 1));
      at[r] = pack_f16(t.x, t.y);
      au[r] = pack_bf16((t.x - (i == j ? 1.0f : 0.0f)) * b0, (t.y - (i == j + 1 ? 1.0f : 0.0f)) * b1);
    }
    const int n0 = 32 * warp;
    float accw[4][4] = {}, accu[4][4] = {};
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // B = rhs / v stored [j][d]: ldmatrix .trans
      const int row = (lane & 7) + 8 * ((lane >> 3) & 1);
      const int col = n0 + 16 * half + 8 * (lane >> 4);
      uint32_t bw[4], bv[4];
      ldsm_x4_trans(smem_u32(work + s16(kSRhsW, row, col)), bw);
      ldsm_x4_trans(smem_u32(in + s16(kSV, row, col)), bv);
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        mma_f16(accw[2 * half + t], at, bw[2 * t], bw[2 * t + 1]);
        mma_bf16(accu[2 * half + t], au, bv[2 * t], bv[2 * t + 1]);
      }
    }
    // U's diagonal term beta_i v_i: beta once, and each column tile's v rows before its stores
    // to the record (a load after a store to the record waits behind it: ptxas cannot tell the
    // input set from the ring; all of v up front made the fp16 builders spill).
    float beta[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      beta[half] = *reinterpret_cast<const float*>(in + beta_at + 4 * (gr + 8 * half));
    }
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int col = n0 + 8 * nt + gc;
      uint32_t vv[2];  // bf16 pairs (v[i][col], v[i][col + 1]), i = gr + 8 half
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        vv[half] = *reinterpret_cast<const uint32_t*>(in + s16(kSV, gr + 8 * half, col));
      }
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int i = gr + 8 * half;
        rec.put_w(rec_split(kRecW, i, col),
                  kF16Tiles ? pack_f16(accw[nt][2 * half], accw[nt][2 * half + 1])
                            : pack_bf16(accw[nt][2 * half], accw[nt][2 * half + 1]));
        const float2 v = unpack_bf16(vv[half]);
        rec.put_u(col, i, fmaf(beta[half], v.x, accu[nt][2 * half]));
        rec.put_u(col + 1, i, fmaf(beta[half], v.y, accu[nt][2 * half + 1]));
      }
    }
  }
}

// A raw-input build (raw_prologue, then build_sub_chunk's phases with its loads ahead) of
// sub-chunk c (`sc`) of its chain by thread tid of a builder: `beta` what issue_raw_ahead returned
// for it, `channel` / `scale` the thread's gate channel, `carry` the running sums' hand-over.
template <bool kF16Tiles = false, class Record, class Sync, class Carry, class LoadAhead>
__device__ __forceinline__ void build_raw_sub_chunk(const BuildInputs& a, const RawPrepArgs& raw,
                                                    GateChannel channel, float scale, int64_t c,
                                                    const SubChunk& sc, float beta,
                                                    const Carry& carry, int tid, unsigned char* in,
                                                    unsigned char* work, const Record& rec,
                                                    const Sync& sync, const LoadAhead& load_ahead) {
  const auto prologue = [&] {
    raw_prologue(raw, channel, scale, c, sc.rows, beta, carry, tid, in, sync);
  };
  build_sub_chunk<1, kF16Tiles>(sc, a.fuse_q_l2norm, tid, in, work, rec, sync, raw.fuse_k_l2norm,
                                prologue, load_ahead);
}

}  // namespace kda::detail::onepass::build
