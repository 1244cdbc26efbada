// The 16-token chain (scan16.h has the steps). Fragment maps: warp w owns value rows
// 16 w .. 16 w + 15 (the C-fragment rows g = lane / 4 and g + 8 of its warpgroup's m64 tiles);
// st[j][e] holds S^T[row(e)][key 8 j + 2 t + (e & 1)], row(e) = 16 w + g + 8 (e >> 1),
// t = lane % 4: wgmma's accumulators give each warp mma.sync's C fragments, and a pair of them,
// packed, is the A fragment of the next product (keys 16 kt .. +15 from tiles 2 kt, 2 kt + 1).
#include <cuda_bf16.h>

#include <cstdint>

#include "device/ptx.cuh"
#include "device/wgmma.cuh"
#include "factors16.h"
#include "scan/scan_layout.h"  // desc_sw128
#include "scan16.h"

namespace kda::lab::factors16 {
namespace {

using kda::detail::ptx::pack_bf16;
using kda::detail::ptx::smem_u32;
namespace wg = kda::detail::wgmma;
using kda::detail::scan::desc_sw128;

constexpr int kChainThreads = 256;
constexpr int kBuffer = 23 * 1024;  // a record (23,040 B), 1024-byte aligned buffers
static_assert(kBuffer >= kRecordBytes, "a record fits a buffer");
// Records c + 1 .. c + 3 are in flight while c runs: one record's copy takes longer than a step.
constexpr int kBuffers = 4;
constexpr int kOTile = kSub * kDim * 2;              // O [16 tokens][128 values] bf16, two of them
constexpr int kSO = kBuffers * kBuffer;
constexpr int kSBar = kSO + 2 * kOTile;              // kBuffers 8-byte mbarriers
constexpr int kSBytes = kSBar + 8 * kBuffers + 1024;  // + the base's alignment slack
constexpr int kSBO = 1024;                           // 8 rows of 128 bytes

// D[64 x 16] (+)= A[64 x 16] (registers, bf16) . B[16 x 16] (K-major descriptor).
template <bool kAccumulate>
__device__ __forceinline__ void m64n16k16(float (&d)[2][4], const uint32_t (&a)[4], uint64_t b) {
  if constexpr (kAccumulate) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7},"
        " {%8, %9, %10, %11}, %12, 1, 1, 1, 0;\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]),
          "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
  } else {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7},"
        " {%8, %9, %10, %11}, %12, 0, 1, 1, 0;\n"
        : "=f"(d[0][0]), "=f"(d[0][1]), "=f"(d[0][2]), "=f"(d[0][3]), "=f"(d[1][0]),
          "=f"(d[1][1]), "=f"(d[1][2]), "=f"(d[1][3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
  }
}

// The bf16 A fragment of key k-step kt from the state's accumulator tiles 2 kt, 2 kt + 1.
__device__ __forceinline__ void state_a(const float (&st)[16][4], int kt, uint32_t (&a)[4]) {
  a[0] = pack_bf16(st[2 * kt][0], st[2 * kt][1]);
  a[1] = pack_bf16(st[2 * kt][2], st[2 * kt][3]);
  a[2] = pack_bf16(st[2 * kt + 1][0], st[2 * kt + 1][1]);
  a[3] = pack_bf16(st[2 * kt + 1][2], st[2 * kt + 1][3]);
}

__global__ void __launch_bounds__(kChainThreads, 1) chain_kernel(const ChainArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // the swizzled tiles need 1024-byte alignment
  const unsigned char* const smem = smem_raw + (base - raw);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int s = static_cast<int>(blockIdx.x / a.heads), h = static_cast<int>(blockIdx.x % a.heads);
  const int64_t begin = a.cu != nullptr ? a.cu[s] : static_cast<int64_t>(s) * a.seq_len;
  const int64_t end = a.cu != nullptr ? a.cu[s + 1] : begin + a.seq_len;
  const int64_t chunks = (end - begin + kSub - 1) / kSub;
  const char* const first = a.records + (static_cast<int64_t>(h) * a.capacity + begin / kSub + s) *
                                            kRecordBytes;
  const int gr = lane >> 2, t2 = 2 * (lane & 3);
  const int row0 = 16 * warp + gr;  // the thread's value rows row0, row0 + 8
  const int64_t state_offset = (static_cast<int64_t>(s) * a.heads + h) * kDim * kDim;

  float st[16][4];
#pragma unroll
  for (int j = 0; j < 16; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = 8 * j + t2 + (e & 1), value = row0 + 8 * (e >> 1);
      st[j][e] = a.initial_state == nullptr
                     ? 0.0f
                     : a.initial_state[state_offset + key * kDim + value];
    }
  }

  const uint32_t bars = base + kSBar;
  if (tid == 0) {
    for (int b = 0; b < kBuffers; ++b) wg::mbarrier_init(bars + 8 * b, 1);
    wg::fence_mbarrier_init();
  }
  __syncthreads();
  auto issue = [&](int64_t c) {
    const uint32_t b = static_cast<uint32_t>(c % kBuffers);
    wg::bulk_copy_to_smem(tid == 0, base + b * kBuffer, first + c * kRecordBytes, kRecordBytes,
                          bars + 8 * b);
  };
  for (int64_t c = 0; c < kBuffers - 1 && c < chunks; ++c) issue(c);
  // Sub-chunk c - 1's output rows, from O tile (c - 1) % 2: 16 rows of 16 16-byte units, one per
  // thread (after the barrier that ends the tile's writes).
  auto copy_out = [&](int64_t c) {
    const int64_t token = begin + c * kSub + (tid >> 4);
    if (token < end) {
      const int unit = tid & 15;
      *reinterpret_cast<uint4*>(a.out + token * a.out_stride + static_cast<int64_t>(h) * kDim +
                                8 * unit) =
          *reinterpret_cast<const uint4*>(smem + kSO + (c & 1) * kOTile + 16 * tid);
    }
  };
  for (int64_t c = 0; c < chunks; ++c) {
    __syncthreads();  // every warp is done with chunk c - 1: its buffer and its O tile's writes
    if (c + kBuffers - 1 < chunks) issue(c + kBuffers - 1);
    if (c > 0) copy_out(c - 1);
    const uint32_t b = static_cast<uint32_t>(c % kBuffers);
    wg::mbarrier_wait(bars + 8 * b, static_cast<uint32_t>((c / kBuffers) & 1));
    const uint32_t buf = base + b * kBuffer;
    const unsigned char* const rec = smem + b * kBuffer;
    // Descriptors of the buffer's tiles; a k-step's is the tile's plus its byte offset / 16.
    const uint64_t desc_w = desc_sw128(buf + kRecW, 16, kSBO);
    const uint64_t desc_qp = desc_sw128(buf + kRecQP, 16, kSBO);

    // A: acc = S^T W^T, pacc = S^T QP^T (key k-step kt: key half kt / 4, +32 bytes per k16).
    float acc[2][4], pacc[2][4];
    uint32_t sa[8][4];  // every A fragment before the fence: no register writes between wgmmas
#pragma unroll
    for (int kt = 0; kt < 8; ++kt) state_a(st, kt, sa[kt]);
    wg::fence();
#pragma unroll
    for (int kt = 0; kt < 8; ++kt) {
      const uint64_t off = static_cast<uint64_t>((kt >> 2) * kHalfTileBytes + (kt & 3) * 32) >> 4;
      if (kt == 0) {
        m64n16k16<false>(acc, sa[kt], desc_w + off);
        m64n16k16<false>(pacc, sa[kt], desc_qp + off);
      } else {
        m64n16k16<true>(acc, sa[kt], desc_w + off);
        m64n16k16<true>(pacc, sa[kt], desc_qp + off);
      }
    }
    wg::commit();
    wg::wait<0>();

    // V: V_new^T = U^T - acc; tile nt, register e: token 8 nt + t2 + (e & 1), value row(e).
    uint32_t av[4];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int value = row0 + 8 * hh, token = 8 * nt + t2;
        const float2 u = *reinterpret_cast<const float2*>(rec + rec_ut(value, token));
        av[2 * nt + hh] = pack_bf16(u.x - acc[nt][2 * hh], u.y - acc[nt][2 * hh + 1]);
      }
    }
    // S^T diag(A): key column 8 j + t2 (+1) times its decay.
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const float2 d = *reinterpret_cast<const float2*>(rec + rec_a(8 * j + t2));
      st[j][0] *= d.x;
      st[j][1] *= d.y;
      st[j][2] *= d.x;
      st[j][3] *= d.y;
    }
    // B: pacc += V_new^T AQK^T; S^T += V_new^T KG (64 keys per 128-byte row: LBO = a key half).
    wg::fence();
    m64n16k16<true>(pacc, av, desc_sw128(buf + kRecAQK, 16, kSBO));
    wg::m64n128k16_rs_mn<true>(st, av, desc_sw128(buf + kRecKG, kHalfTileBytes, kSBO));
    wg::commit();
    wg::wait<0>();

    // O: into tile c % 2 as [token][value] rows (copied out at the top of chunk c + 1).
    unsigned char* const otile = smem_raw + (base - raw) + kSO + (c & 1) * kOTile;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int token = 8 * nt + t2 + (e & 1), value = row0 + 8 * (e >> 1);
        *reinterpret_cast<__nv_bfloat16*>(otile + 2 * (token * kDim + value)) =
            __float2bfloat16_rn(pacc[nt][e]);
      }
    }
  }
  __syncthreads();
  if (chunks > 0) copy_out(chunks - 1);
  if (a.final_state != nullptr) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = 8 * j + t2 + (e & 1), value = row0 + 8 * (e >> 1);
        a.final_state[state_offset + key * kDim + value] = st[j][e];
      }
    }
  }
}

}  // namespace

cudaError_t launch_chain(const ChainArgs& args, cudaStream_t stream) {
  const cudaError_t e =
      cudaFuncSetAttribute(chain_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSBytes);
  if (e != cudaSuccess) return e;
  chain_kernel<<<static_cast<unsigned>(args.num_seqs) * static_cast<unsigned>(args.heads),
                 kChainThreads, kSBytes, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace kda::lab::factors16
