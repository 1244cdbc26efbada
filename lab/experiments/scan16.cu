// The standalone 16-token chain (scan16.h has the steps, onepass/chain16.cuh the arithmetic): one CTA
// of two warpgroups per (sequence, head), each record by one bulk copy three sub-chunks ahead.
#include <cuda_bf16.h>

#include <cstdint>

#include "onepass/chain16.cuh"
#include "device/ptx.cuh"
#include "device/wgmma.cuh"
#include "factors16.h"
#include "scan16.h"

namespace kda::lab::factors16 {
namespace {

using kda::detail::ptx::smem_u32;
namespace wg = kda::detail::wgmma;
using chain::kBuffer;
using chain::kOTile;

// Records c + 1 .. c + 3 are in flight while c runs: one record's copy takes longer than a step.
constexpr int kBuffers = 4;
constexpr int kSO = kBuffers * kBuffer;
constexpr int kSBar = kSO + 2 * kOTile;               // kBuffers 8-byte mbarriers
constexpr int kSBytes = kSBar + 8 * kBuffers + 1024;  // + the base's alignment slack

__global__ void __launch_bounds__(chain::kThreads, 1) chain_kernel(const ChainArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // the swizzled tiles need 1024-byte alignment
  unsigned char* const smem = smem_raw + (base - raw);
  const int tid = threadIdx.x;
  const int s = static_cast<int>(blockIdx.x / a.heads), h = static_cast<int>(blockIdx.x % a.heads);
  const int64_t begin = a.cu != nullptr ? a.cu[s] : static_cast<int64_t>(s) * a.seq_len;
  const int64_t end = a.cu != nullptr ? a.cu[s + 1] : begin + a.seq_len;
  const int64_t chunks = (end - begin + kSub - 1) / kSub;
  const char* const first = a.records + (static_cast<int64_t>(h) * a.capacity + begin / kSub + s) *
                                            kRecordBytes;
  const int64_t state_offset = (static_cast<int64_t>(s) * a.heads + h) * kDim * kDim;

  float st[16][4];
  chain::load_state(st, a.initial_state, state_offset, tid);

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
  for (int64_t c = 0; c < chunks; ++c) {
    __syncthreads();  // every warp is done with chunk c - 1: its buffer and its O tile's writes
    if (c + kBuffers - 1 < chunks) issue(c + kBuffers - 1);
    if (c > 0) {
      chain::copy_out(smem + kSO + ((c - 1) & 1) * kOTile, a.out, a.out_stride, h,
                      begin + (c - 1) * kSub, end, tid);
    }
    const uint32_t b = static_cast<uint32_t>(c % kBuffers);
    wg::mbarrier_wait(bars + 8 * b, static_cast<uint32_t>((c / kBuffers) & 1));
    chain::step(st, base + b * kBuffer, smem + b * kBuffer, smem + kSO + (c & 1) * kOTile, tid);
  }
  __syncthreads();
  if (chunks > 0) {
    chain::copy_out(smem + kSO + ((chunks - 1) & 1) * kOTile, a.out, a.out_stride, h,
                    begin + (chunks - 1) * kSub, end, tid);
  }
  if (a.final_state != nullptr) chain::store_state(st, a.final_state, state_offset, tid);
}

}  // namespace

cudaError_t launch_chain(const ChainArgs& args, cudaStream_t stream) {
  const cudaError_t e =
      cudaFuncSetAttribute(chain_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSBytes);
  if (e != cudaSuccess) return e;
  chain_kernel<<<static_cast<unsigned>(args.num_seqs) * static_cast<unsigned>(args.heads),
                 chain::kThreads, kSBytes, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace kda::lab::factors16
