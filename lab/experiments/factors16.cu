// The standalone 16-token factor builder: one CTA = one warpgroup = one (16-token sub-chunk, head)
// slot, or two consecutive ones (the second's rows asked into L2 while the first is built), the
// phases of factors16_build.cuh between CTA barriers (one input set, loaded first), the records to
// global memory.
#include <cuda_bf16.h>

#include <cstdint>

#include "factors16.h"
#include "factors16_build.cuh"

namespace kda::lab::factors16 {
namespace {

using build::kSBytes;
using build::SubChunk;

static_assert(6 * (kSBytes + 1024) <= 228 * 1024, "six CTAs per SM");
constexpr int kCtasPerSm = 6;

// Slot -> sub-chunk (factors16.h slot_capacity); false when no sequence owns the slot.
__device__ __forceinline__ bool find_sub_chunk(const Args& a, int64_t slot, SubChunk& out) {
  auto begin = [&](int s) {
    return a.cu != nullptr ? static_cast<int64_t>(a.cu[s]) : static_cast<int64_t>(s) * a.seq_len;
  };
  int lo = 0, hi = a.num_seqs - 1;  // the largest s with begin(s) / 16 + s <= slot
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (begin(mid) / kSub + mid <= slot) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const int64_t b = begin(lo), e = begin(lo + 1);
  const int64_t local = slot - (b / kSub + lo);
  if (local < 0 || local * kSub >= e - b) return false;
  out.seq = lo;
  out.first_token = b + local * kSub;
  const int64_t left = e - out.first_token;
  out.rows = left < kSub ? static_cast<int>(left) : kSub;
  out.at_chunk = (local & 3) == 0;
  return true;
}

// The SM this thread runs on (the on-chip timing mode's record).
__device__ __forceinline__ uint32_t sm_id() {
  uint32_t id;
  asm volatile("mov.u32 %0, %%smid;\n" : "=r"(id));
  return id;
}

// Sub-chunk sc's rows (q, k, v, G, the row before, beta) asked into L2 by the CTA's threads, a
// 128-byte line each: 96 lines of q, k, v (two per row), 64 of G (four per row), then the row
// before and the betas.
__device__ __forceinline__ void prefetch_l2(const Args& a, const SubChunk& sc, int h, int tid) {
  auto line = [](const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); };
  const int64_t head_offset = static_cast<int64_t>(h) * kDim;
  const int64_t gate_row = static_cast<int64_t>(a.heads) * kDim;
  if (tid < 96) {
    const int tensor = tid >> 5, i = (tid & 31) >> 1, half = tid & 1;
    if (i < sc.rows) {
      const __nv_bfloat16* base = tensor == 0 ? a.q : tensor == 1 ? a.k : a.v;
      const int64_t stride = tensor == 0 ? a.q_stride : tensor == 1 ? a.k_stride : a.v_stride;
      line(base + (sc.first_token + i) * stride + head_offset + 64 * half);
    }
  } else {
    const int u = tid - 96;  // 32 threads, two G lines each
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int i = (2 * u + e) >> 2, quarter = (2 * u + e) & 3;
      if (i < sc.rows) line(a.gate + (sc.first_token + i) * gate_row + head_offset + 32 * quarter);
    }
  }
  if (tid < 4 && !sc.at_chunk) {
    line(a.gate + (sc.first_token - 1) * gate_row + head_offset + 32 * tid);
  } else if (tid >= 4 && tid < 4 + sc.rows) {
    line(a.beta + (sc.first_token + tid - 4) * a.heads + h);
  }
}

template <int kSlots>
__global__ void __launch_bounds__(kThreads, kCtasPerSm) factors16_kernel(const Args a) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int h = blockIdx.y, tid = static_cast<int>(threadIdx.x);
#pragma unroll 1
  for (int j = 0; j < kSlots; ++j) {
    const int64_t slot = static_cast<int64_t>(blockIdx.x) * kSlots + j;
    SubChunk sc;
    if (slot >= a.capacity || !find_sub_chunk(a, slot, sc)) continue;  // uniform
    if (j + 1 < kSlots) {
      SubChunk next;
      if (slot + 1 < a.capacity && find_sub_chunk(a, slot + 1, next)) prefetch_l2(a, next, h, tid);
    }
    if (j > 0) __syncthreads();  // the previous build's last readers are done with the scratch
    const int64_t own = static_cast<int64_t>(h) * a.capacity + slot;
    const int64_t record =
        a.on_chip ? (int64_t{sm_id()} * 8 + (slot & 7)) % (a.capacity * a.heads) : own;
    unsigned char* const rec = reinterpret_cast<unsigned char*>(a.records) + record * kRecordBytes;
    build::issue_loads(a, sc, h, tid, smem);
    build::build_sub_chunk<0>(sc, a.fuse_q_l2norm, tid, smem, smem + build::kInBytes, rec,
                              [] { __syncthreads(); });
  }
}

template <int kSlots>
cudaError_t launch_with(const Args& args, cudaStream_t stream) {
  cudaError_t e = cudaFuncSetAttribute(factors16_kernel<kSlots>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, kSBytes);
  if (e != cudaSuccess) return e;
  e = cudaFuncSetAttribute(factors16_kernel<kSlots>,
                           cudaFuncAttributePreferredSharedMemoryCarveout,
                           cudaSharedmemCarveoutMaxShared);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>((args.capacity + kSlots - 1) / kSlots),
                  static_cast<unsigned>(args.heads));
  factors16_kernel<kSlots><<<grid, kThreads, kSBytes, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch(const Args& args, cudaStream_t stream) {
  if (!build::row_offsets_fit(args)) return cudaErrorInvalidValue;
  if (args.slots_per_cta == 1) return launch_with<1>(args, stream);
  if (args.slots_per_cta == 2) return launch_with<2>(args, stream);
  return cudaErrorInvalidValue;
}

}  // namespace kda::lab::factors16
