// The two tiny kernels of the measurement loops (device_kernels.cu), behind a plain host API so
// measure.cpp stays a g++ translation unit.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kda::bench::gpu::detail {

// Host-mapped state of the blocking kernel: the host sets `release`; the kernel sets `timed_out`
// when it gave up waiting.
struct BlockState {
  int32_t release;
  int32_t timed_out;
};

// One reading of SM 0's cycle counter and the global nanosecond timer; `seq` is written last so
// the host can tell a fresh stamp from a stale one.
struct ClockStamp {
  uint64_t ns;
  int64_t cycles;
  uint32_t seq;
  uint32_t pad;
};

// 1 thread spinning until state->release != 0 or timeout_ns passed (then timed_out = 1).
cudaError_t launch_blocking_kernel(BlockState* state_dev, uint64_t timeout_ns,
                                   cudaStream_t stream);
// `blocks` single-thread blocks (one per SM); the block that runs on SM 0 writes *stamp_dev.
cudaError_t launch_clock_stamp_kernel(ClockStamp* stamp_dev, uint32_t seq, int blocks,
                                      cudaStream_t stream);

}  // namespace kda::bench::gpu::detail
