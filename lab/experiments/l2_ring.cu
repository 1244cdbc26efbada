// The L2-ring experiment's kernel (l2_ring.h says what it measures and why).
#include <string>

#include "l2_ring.h"

namespace kda::lab::l2ring {
namespace {

constexpr int kThreads = 512;
// Loads in flight per thread: the roles stream, so memory-level parallelism sets their rate
// (96 CTAs x 512 threads x 8 x 16 B = 6.3 MB in flight for h96-fixed's producers).
constexpr int kBatch = 8;

// L2 eviction policies (PTX createpolicy) and 16-byte global accesses that carry one.
__device__ __forceinline__ uint64_t policy_evict_last() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}
__device__ __forceinline__ uint64_t policy_evict_first() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}
// .cg: the ring's lines are rewritten by another SM between uses, so they must not come from L1.
__device__ __forceinline__ uint4 load_l2(const uint4* p, bool hint, uint64_t policy) {
  uint4 v;
  if (hint) {
    asm volatile("ld.global.cg.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p), "l"(policy));
  } else {
    asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  }
  return v;
}
__device__ __forceinline__ void store(uint4* p, uint4 v, bool hint, uint64_t policy) {
  if (hint) {
    asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;\n" ::"l"(p), "r"(v.x),
                 "r"(v.y), "r"(v.z), "r"(v.w), "l"(policy)
                 : "memory");
  } else {
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(v.x), "r"(v.y),
                 "r"(v.z), "r"(v.w)
                 : "memory");
  }
}

__device__ __forceinline__ int load_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void store_release(int* p, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
// Thread 0 waits until *counter >= target; then the whole CTA goes on.
__device__ __forceinline__ void wait_at_least(const int* counter, int target) {
  if (threadIdx.x == 0) {
    while (load_acquire(counter) < target) __nanosleep(64);
  }
  __syncthreads();
}
// The whole CTA's writes (ordered by the barrier), then thread 0 publishes.
__device__ __forceinline__ void publish(int* counter, int value) {
  __syncthreads();
  if (threadIdx.x == 0) store_release(counter, value);
}

// The record's content, a function of (chain, chunk, unit): the consumer recomputes it.
__device__ __forceinline__ uint4 record_word(int chain, int chunk, int64_t unit) {
  const uint32_t h = static_cast<uint32_t>(chain) * 0x9E3779B1u ^
                     static_cast<uint32_t>(chunk) * 0x85EBCA77u ^
                     static_cast<uint32_t>(unit) * 0xC2B2AE3Du;
  return make_uint4(h, h ^ 0x1u, h ^ 0x2u, h + 0x3u);
}

struct RingArgs {
  const uint4* input;
  uint4* records;
  uint4* output;
  int* produced;
  int* consumed;
  unsigned long long* stats;
  int chains, chunks, slots;
  int64_t input_units, record_units, output_units;  // 16-byte units per chunk
  bool hints;
  int producer_delay_ns;
};

__global__ void __launch_bounds__(kThreads) ring_kernel(const RingArgs a) {
  const bool producer = blockIdx.x < static_cast<unsigned>(a.chains);
  const int chain = producer ? blockIdx.x : blockIdx.x - a.chains;
  const uint64_t keep = policy_evict_last();
  const uint64_t stream = policy_evict_first();
  unsigned long long local = 0;  // producer: an input checksum; consumer: mismatched units
  for (int c = 0; c < a.chunks; ++c) {
    uint4* slot =
        a.records + (static_cast<int64_t>(chain) * a.slots + c % a.slots) * a.record_units;
    if (producer) {
      const uint4* in = a.input + (static_cast<int64_t>(chain) * a.chunks + c) * a.input_units;
      for (int64_t u0 = threadIdx.x; u0 < a.input_units; u0 += kBatch * kThreads) {
        uint4 v[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          const int64_t u = u0 + j * kThreads;
          v[j] = u < a.input_units ? load_l2(in + u, a.hints, stream) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j) local += v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
      }
      if (a.producer_delay_ns > 0 && threadIdx.x == 0) __nanosleep(a.producer_delay_ns);
      wait_at_least(a.consumed + chain, c - a.slots + 1);  // the slot's previous record is read
      for (int64_t u = threadIdx.x; u < a.record_units; u += kThreads) {
        store(slot + u, record_word(chain, c, u), a.hints, keep);
      }
      publish(a.produced + chain, c + 1);
    } else {
      wait_at_least(a.produced + chain, c + 1);
      uint4* out = a.output + (static_cast<int64_t>(chain) * a.chunks + c) * a.output_units;
      uint32_t fold = 0;
      for (int64_t u0 = threadIdx.x; u0 < a.record_units; u0 += kBatch * kThreads) {
        uint4 v[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          const int64_t u = u0 + j * kThreads;
          v[j] = u < a.record_units ? load_l2(slot + u, a.hints, keep) : record_word(chain, c, u);
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          const uint4 want = record_word(chain, c, u0 + j * kThreads);
          local += (v[j].x != want.x || v[j].y != want.y || v[j].z != want.z || v[j].w != want.w)
                       ? 1
                       : 0;
          fold ^= v[j].x;
        }
      }
      for (int64_t u = threadIdx.x; u < a.output_units; u += kThreads) {
        store(out + u, make_uint4(fold, static_cast<uint32_t>(u), c, chain), a.hints, stream);
      }
      publish(a.consumed + chain, c + 1);
    }
  }
  if (local != 0) atomicAdd(a.stats + (producer ? 1 : 0), local);
}

__global__ void fill_kernel(uint4* p, int64_t units) {
  for (int64_t u = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; u < units;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint32_t h = static_cast<uint32_t>(u) * 0x9E3779B1u + 1u;
    p[u] = make_uint4(h, h + 1u, h + 2u, h + 3u);
  }
}

}  // namespace

RingSizes ring_buffer_bytes(const RingShape& s) {
  const int64_t chains = s.chains, chunks = s.chunks, slots = s.slots;
  return {chains * chunks * s.input_bytes, chains * slots * s.record_bytes,
          chains * chunks * s.output_bytes, 2 * chains * static_cast<int64_t>(sizeof(int)),
          2 * static_cast<int64_t>(sizeof(unsigned long long))};
}

std::string ring_refusal(const RingShape& s) {
  if (s.chains < 1 || s.chunks < 1 || s.slots < 1 || s.slots > s.chunks) {
    return "chains and chunks must be >= 1 and slots in [1, chunks]";
  }
  for (const int64_t b : {s.input_bytes, s.record_bytes, s.output_bytes}) {
    if (b < 16 || b % 16 != 0)
      return "every per-chunk byte count must be a positive multiple of 16";
  }
  if (s.producer_delay_ns < 0 || s.producer_delay_ns > 1000000) {
    return "producer delay must be in [0, 1e6] ns";
  }
  int device = 0, sms = 0, per_sm = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ring_kernel, kThreads, 0) !=
          cudaSuccess) {
    return "no usable CUDA device";
  }
  if (2LL * s.chains > static_cast<long long>(sms) * per_sm) {
    return "2 x chains CTAs (" + std::to_string(2 * s.chains) + ") exceed the " +
           std::to_string(sms * per_sm) +
           " that can be resident at once: a producer could wait for a consumer that never starts";
  }
  return "";
}

void fill_input(const RingShape& s, const RingBuffers& b, cudaStream_t stream) {
  const int64_t units = ring_buffer_bytes(s).input / 16;
  fill_kernel<<<1024, kThreads, 0, stream>>>(static_cast<uint4*>(b.input), units);
}

cudaError_t run_ring(const RingShape& s, const RingBuffers& b, cudaStream_t stream) {
  const RingSizes sizes = ring_buffer_bytes(s);
  if (cudaError_t e = cudaMemsetAsync(b.counters, 0, sizes.counters, stream); e != cudaSuccess)
    return e;
  if (cudaError_t e = cudaMemsetAsync(b.stats, 0, sizes.stats, stream); e != cudaSuccess) return e;
  RingArgs a;
  a.input = static_cast<const uint4*>(b.input);
  a.records = static_cast<uint4*>(b.records);
  a.output = static_cast<uint4*>(b.output);
  a.produced = b.counters;
  a.consumed = b.counters + s.chains;
  a.stats = b.stats;
  a.chains = s.chains;
  a.chunks = s.chunks;
  a.slots = s.slots;
  a.input_units = s.input_bytes / 16;
  a.record_units = s.record_bytes / 16;
  a.output_units = s.output_bytes / 16;
  a.hints = s.cache_hints;
  a.producer_delay_ns = s.producer_delay_ns;
  ring_kernel<<<2 * s.chains, kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace kda::lab::l2ring
