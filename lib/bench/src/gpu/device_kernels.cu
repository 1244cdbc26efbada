// Blocking kernel and clock-stamp kernel (nvbench's method, our code): see gpu_timing.h.
#include "device_kernels.h"

namespace kda::bench::gpu::detail {

namespace {

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  return ns;
}

__global__ void blocking_kernel(BlockState* state, uint64_t timeout_ns) {
  const volatile int32_t* release = &state->release;
  const uint64_t start = global_timer_ns();
  while (*release == 0) {
    if (global_timer_ns() - start > timeout_ns) {
      state->timed_out = 1;
      __threadfence_system();
      return;
    }
    __nanosleep(500);  // fewer reads over the bus; release latency is not timed
  }
}

__global__ void clock_stamp_kernel(ClockStamp* stamp, uint32_t seq) {
  uint32_t smid;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  if (smid != 0) return;
  const int64_t cycles = clock64();
  const uint64_t ns = global_timer_ns();
  volatile ClockStamp* out = stamp;
  out->ns = ns;
  out->cycles = cycles;
  __threadfence_system();
  out->seq = seq;
}

}  // namespace

cudaError_t launch_blocking_kernel(BlockState* state_dev, uint64_t timeout_ns,
                                   cudaStream_t stream) {
  blocking_kernel<<<1, 1, 0, stream>>>(state_dev, timeout_ns);
  return cudaGetLastError();
}

cudaError_t launch_clock_stamp_kernel(ClockStamp* stamp_dev, uint32_t seq, int blocks,
                                      cudaStream_t stream) {
  clock_stamp_kernel<<<blocks, 1, 0, stream>>>(stamp_dev, seq);
  return cudaGetLastError();
}

}  // namespace kda::bench::gpu::detail
