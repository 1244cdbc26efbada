// GPU measurement loops of kda-bench: warm, cold, graph and triton modes (method:
// apps/kda-bench/README.md). CUDA runtime API only; no device setting is ever changed.
//
// A Launcher enqueues the timed work on the stream it is given and must never synchronize:
// in warm, cold and graph modes work is queued behind a blocking kernel, and a launcher that
// waits for the device would wait for itself (the blocking kernel then times out after
// kBlockTimeoutS, and measure() throws).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kda/bench/sampling.h"
#include "kda/bench/stopping.h"
#include "kda/bench/throttle.h"

namespace kda::bench::gpu {

enum class Mode { warm, cold, graph, triton };
const char* to_string(Mode mode);
std::optional<Mode> parse_mode(std::string_view name);

using Launcher = std::function<void(cudaStream_t)>;
using Logger = std::function<void(const std::string&)>;

struct MeasureConfig {
  Mode mode = Mode::warm;
  StoppingConfig stopping;
  ThrottleConfig throttle;
  bool detect_throttle = true;
  int64_t warmup_runs = 3;            // untimed runs before the loop (warm, cold, graph)
  // warm/graph: samples per batch, and calls shorter than sampling.min_sample_s timed as one
  // replay of a CUDA graph of N back-to-back calls per sample (sampling.h).
  SamplingConfig sampling;
  double triton_warmup_ms = 25.0;     // do_bench's `warmup` budget
  double triton_rep_ms = 100.0;       // do_bench's `rep` budget
};

struct Measurement {
  std::vector<double> gpu_s;     // accepted samples, seconds (CUDA events)
  std::vector<double> cpu_s;     // host view per sample (steady clock); empty in triton mode
  std::vector<double> clock_hz;  // SM clock per sample (NaN when unknown)
  int64_t warmup_runs = 0;
  int64_t calls_per_sample = 1;  // calls inside one event pair (graph_batch: N; else 1)
  SampleMethod sample_method = SampleMethod::call;  // how a sample was taken (sampling.h)
  int64_t throttle_discards = 0;
  int64_t rejected_samples = 0;
  StopReason stop = StopReason::none;
  double wall_s = 0.0;
};

// Facts of the current device the loops need (queried with cudaDeviceGetAttribute).
struct DeviceFacts {
  int sm_count = 0;
  int64_t l2_bytes = 0;
  double default_sm_clock_hz = 0.0;
};
DeviceFacts query_device_facts();

inline constexpr int64_t kTritonFlushBytes = int64_t{256} << 20;  // do_bench: 256 MB of zeros
inline constexpr double kBlockTimeoutS = 10.0;

// Cold-mode flush size: max(2 x L2, 256 MiB).
int64_t cold_flush_bytes(int64_t l2_bytes);

// Whether one call of `launch` enqueues any GPU work: the call is captured on `stream` into a CUDA
// graph (thread-local capture: nothing runs) and its nodes are counted. A forward stage the call's
// kernel choice does not run (prep and scan beside the one pass, one_pass beside the two kernels)
// enqueues nothing; timing it would only time empty graphs. A call that cannot be captured (it
// throws, or the capture fails) counts as launching work: it is then timed, and fails, as before.
bool launches_work(const Launcher& launch, cudaStream_t stream);

// Owns everything the loops need on the current device: its own non-blocking stream, the L2
// flush buffer, host-mapped blocking flag and clock stamps, and an event pool. Not copyable or
// movable: the kernels hold pointers into its host-mapped storage.
class Bench {
 public:
  // blocking_kernel: queue the timed launches of warm / graph / cold samples behind a kernel that
  // spins until the host has enqueued them (launch latency stays out of the first samples). Off
  // under tools that serialize launches (Nsight Compute, compute-sanitizer): there the host's
  // next launch waits for the spinning kernel, which then gives up after its 10 s timeout.
  explicit Bench(Logger log = {}, bool blocking_kernel = true);
  ~Bench();
  Bench(const Bench&) = delete;
  Bench& operator=(const Bench&) = delete;

  cudaStream_t stream() const { return stream_; }
  const DeviceFacts& facts() const { return facts_; }
  int64_t flush_bytes() const { return flush_bytes_; }

  // Runs the loop of config.mode on stream(). Throws kda::Error(ErrorCode::cuda) on CUDA errors
  // and on a blocking-kernel timeout; the stream is released and synchronized either way.
  Measurement measure(const Launcher& launch, const MeasureConfig& config);

 private:
  struct Impl;
  Impl* impl_ = nullptr;
  cudaStream_t stream_ = nullptr;
  DeviceFacts facts_;
  int64_t flush_bytes_ = 0;
};

}  // namespace kda::bench::gpu
