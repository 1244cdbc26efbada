// The measurement loops of kda-bench (method: apps/kda-bench/README.md). g++ translation unit:
// runtime API only; the two kernels live in device_kernels.cu.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <thread>

#include <fmt/format.h>

#include "device_kernels.h"
#include "kda/bench/gpu_timing.h"
#include "kda/kda.h"

namespace kda::bench::gpu {

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// At most this many launches are queued behind the blocking kernel before it is released: a
// deep queue behind a kernel that waits for the host can stall the host's own enqueue calls.
constexpr int64_t kQueuedBehindBlock = 2;

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw kda::Error(kda::ErrorCode::cuda,
                     fmt::format("{}: {} ({})", what, cudaGetErrorString(status),
                                 cudaGetErrorName(status)));
  }
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void sleep_seconds(double s) {
  if (s > 0.0) std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

struct Sample {
  double gpu_s = kNaN, cpu_s = kNaN, clock_hz = kNaN;
};

// Host-mapped memory shared with the two kernels.
struct HostShared {
  detail::BlockState block;
  detail::ClockStamp stamps[2];
};

}  // namespace

const char* to_string(Mode mode) {
  switch (mode) {
    case Mode::warm: return "warm";
    case Mode::cold: return "cold";
    case Mode::graph: return "graph";
    case Mode::triton: return "triton";
  }
  return "?";
}

std::optional<Mode> parse_mode(std::string_view name) {
  for (Mode m : {Mode::warm, Mode::cold, Mode::graph, Mode::triton})
    if (name == to_string(m)) return m;
  return std::nullopt;
}

DeviceFacts query_device_facts() {
  int device = 0, sms = 0, l2 = 0, clock_khz = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
        "cudaDeviceGetAttribute(MultiProcessorCount)");
  check(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device),
        "cudaDeviceGetAttribute(L2CacheSize)");
  check(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device),
        "cudaDeviceGetAttribute(ClockRate)");
  DeviceFacts facts;
  facts.sm_count = sms;
  facts.l2_bytes = l2;
  facts.default_sm_clock_hz = static_cast<double>(clock_khz) * 1e3;
  return facts;
}

int64_t cold_flush_bytes(int64_t l2_bytes) {
  return std::max<int64_t>(2 * l2_bytes, int64_t{256} << 20);
}

bool launches_work(const Launcher& launch, cudaStream_t stream) {
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
        "cudaStreamBeginCapture (launches_work)");
  bool captured = true;
  try {
    launch(stream);
  } catch (...) {
    captured = false;  // the call itself will say why when it is timed
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  size_t nodes = 0;
  if (captured && ended == cudaSuccess && graph != nullptr &&
      cudaGraphGetNodes(graph, nullptr, &nodes) != cudaSuccess) {
    captured = false;
  }
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (!captured || ended != cudaSuccess) {
    (void)cudaGetLastError();  // a capture the call could not take part in leaves no sticky error
    return true;
  }
  return nodes > 0;
}

struct Bench::Impl {
  Logger log;
  bool blocking_kernel = true;        // Bench's constructor argument
  void* flush = nullptr;              // device, Bench::flush_bytes_
  HostShared* host = nullptr;         // host-mapped
  HostShared* host_dev = nullptr;     // its device address
  uint32_t seq = 0;
  std::vector<cudaEvent_t> events;

  ~Impl() {
    for (cudaEvent_t e : events) cudaEventDestroy(e);
    if (host) cudaFreeHost(host);
    if (flush) cudaFree(flush);
  }

  cudaEvent_t event(size_t i) {
    while (events.size() <= i) {
      cudaEvent_t e = nullptr;
      check(cudaEventCreate(&e), "cudaEventCreate");
      events.push_back(e);
    }
    return events[i];
  }

  double elapsed_s(size_t start, size_t stop) {
    float ms = 0.0f;
    check(cudaEventElapsedTime(&ms, events[start], events[stop]), "cudaEventElapsedTime");
    return static_cast<double>(ms) * 1e-3;
  }

  void stamp(int slot, uint32_t seq_value, int blocks, cudaStream_t stream) {
    check(detail::launch_clock_stamp_kernel(&host_dev->stamps[slot], seq_value, blocks, stream),
          "clock stamp kernel launch");
  }

  // SM clock between the two stamps, NaN when either stamp is stale (no block ran on SM 0).
  double read_clock(uint32_t seq0, uint32_t seq1) const {
    const volatile detail::ClockStamp* a = &host->stamps[0];
    const volatile detail::ClockStamp* b = &host->stamps[1];
    if (a->seq != seq0 || b->seq != seq1) return kNaN;
    const double dns = static_cast<double>(b->ns) - static_cast<double>(a->ns);
    const double dcycles = static_cast<double>(b->cycles - a->cycles);
    if (!(dns > 0.0) || !(dcycles > 0.0)) return kNaN;
    return dcycles / dns * 1e9;
  }
};

namespace {

// Blocks `stream` until release() (or destruction). On the error path the destructor releases
// and synchronizes so the stream never stays blocked behind the spinning kernel. Disabled
// (Bench's blocking_kernel off), it launches nothing and release_and_sync only synchronizes.
class BlockGuard {
 public:
  BlockGuard(HostShared* host, HostShared* host_dev, cudaStream_t stream, bool enabled)
      : host_(host), stream_(stream) {
    if (!enabled) {
      released_ = true;
      return;
    }
    volatile detail::BlockState* state = &host_->block;
    state->release = 0;
    state->timed_out = 0;
    std::atomic_thread_fence(std::memory_order_seq_cst);
    check(detail::launch_blocking_kernel(
              &host_dev->block, static_cast<uint64_t>(kBlockTimeoutS * 1e9), stream),
          "blocking kernel launch");
    active_ = true;
  }
  BlockGuard(const BlockGuard&) = delete;  // one release per block
  BlockGuard& operator=(const BlockGuard&) = delete;
  ~BlockGuard() {
    if (!active_) return;
    release();
    if (!synced_) cudaStreamSynchronize(stream_);  // error path: errors already propagate
  }

  void release() {
    if (released_) return;
    std::atomic_thread_fence(std::memory_order_seq_cst);
    volatile detail::BlockState* state = &host_->block;
    state->release = 1;
    std::atomic_thread_fence(std::memory_order_seq_cst);
    released_ = true;
  }

  // Releases, waits for the stream and throws when the kernel gave up waiting.
  void release_and_sync() {
    release();
    const cudaError_t status = cudaStreamSynchronize(stream_);
    synced_ = true;
    check(status, "cudaStreamSynchronize after the timed work");
    const volatile detail::BlockState* state = &host_->block;
    if (state->timed_out != 0) {
      throw kda::Error(kda::ErrorCode::cuda,
                       fmt::format("the blocking kernel waited {} s and gave up: the timed work "
                                   "probably synchronized the device (possible deadlock), or a "
                                   "tool that serializes launches (Nsight Compute, "
                                   "compute-sanitizer) is attached: then run kda-bench with "
                                   "--no-blocking-kernel; results of this measurement are invalid",
                                   kBlockTimeoutS));
    }
  }

 private:
  HostShared* host_;
  cudaStream_t stream_;
  bool active_ = false, released_ = false, synced_ = false;
};

// Owns a captured graph and its executable; copy deleted: owns CUDA graph handles.
struct GraphExec {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  GraphExec() = default;
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  ~GraphExec() { reset(); }
  void reset() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    exec = nullptr;
    graph = nullptr;
  }
};

// Graph batches: how many times the calls per sample are re-derived from a replay of the
// captured graph (each time at most one more capture).
constexpr int kMaxCaptures = 3;

}  // namespace

Bench::Bench(Logger log, bool blocking_kernel) : impl_(new Impl) {
  impl_->log = std::move(log);
  impl_->blocking_kernel = blocking_kernel;
  try {
    facts_ = query_device_facts();
    flush_bytes_ = std::max(cold_flush_bytes(facts_.l2_bytes), kTritonFlushBytes);
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaMalloc(&impl_->flush, static_cast<size_t>(flush_bytes_)),
          "cudaMalloc(L2 flush buffer)");
    check(cudaHostAlloc(reinterpret_cast<void**>(&impl_->host), sizeof(HostShared),
                        cudaHostAllocMapped),
          "cudaHostAlloc(mapped)");
    *impl_->host = HostShared{};
    check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&impl_->host_dev), impl_->host, 0),
          "cudaHostGetDevicePointer");
    // Load both kernels' module now (lazy loading would otherwise land in the first sample).
    {
      BlockGuard block(impl_->host, impl_->host_dev, stream_, impl_->blocking_kernel);
      impl_->stamp(0, ++impl_->seq, std::max(facts_.sm_count, 1), stream_);
      block.release_and_sync();
    }
  } catch (...) {
    delete impl_;
    if (stream_) cudaStreamDestroy(stream_);
    throw;
  }
}

Bench::~Bench() {
  if (stream_) cudaStreamSynchronize(stream_);
  delete impl_;
  if (stream_) cudaStreamDestroy(stream_);
}

Measurement Bench::measure(const Launcher& launch, const MeasureConfig& config) {
  Impl& im = *impl_;
  cudaStream_t stream = stream_;
  const int blocks = std::max(facts_.sm_count, 1);
  auto log = [&](const std::string& line) {
    if (im.log) im.log(line);
  };

  Measurement m;
  StdrelCriterion criterion(config.stopping);
  ThrottleMonitor throttle(config.throttle, facts_.default_sm_clock_hz);

  // Accepts a group of samples sharing one clock reading (one cold sample or one warm batch),
  // or discards the group as throttled and cools down. Samples are per call; each spans `calls`
  // calls of GPU time (the stopping rule's min time counts that).
  auto take = [&](const std::vector<Sample>& group, int64_t calls) {
    if (group.empty()) return;
    if (config.detect_throttle) {
      const ThrottleDecision d = throttle.judge(group.front().clock_hz);
      if (d.discard) {
        m.throttle_discards += static_cast<int64_t>(group.size());
        log(fmt::format("throttled: SM clock {:.0f} MHz < {:.0f}% of the default {:.0f} MHz; "
                        "{} sample(s) discarded, cooling down {:.0f} ms",
                        group.front().clock_hz / 1e6, config.throttle.threshold * 100.0,
                        facts_.default_sm_clock_hz / 1e6, group.size(), d.sleep_s * 1e3));
        sleep_seconds(d.sleep_s);
        return;
      }
    }
    for (const Sample& s : group) {
      criterion.add_sample(s.gpu_s, calls);
      if (!std::isfinite(s.gpu_s) || s.gpu_s < 0.0) continue;
      m.gpu_s.push_back(s.gpu_s);
      m.cpu_s.push_back(s.cpu_s);
      m.clock_hz.push_back(s.clock_hz);
    }
  };

  // One event pair around one launch, synchronized: the warm-up runs and estimates.
  auto timed_once = [&](const Launcher& fn) {
    check(cudaEventRecord(im.event(0), stream), "cudaEventRecord");
    fn(stream);
    check(cudaEventRecord(im.event(1), stream), "cudaEventRecord");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (warm-up)");
    return im.elapsed_s(0, 1);
  };

  // warm / graph: `n` samples back to back, each one call of `fn` (an eager call, a replay of
  // the call's graph, or a replay of a graph batch spanning `calls` calls) between its own event
  // pair, queued behind the blocking kernel so the first start event does not run before the
  // host has caught up. Samples are returned per call (sample / calls).
  auto warm_batch = [&](const Launcher& fn, int64_t n, int64_t calls) {
    im.event(static_cast<size_t>(2 * n - 1));
    const uint32_t s0 = ++im.seq, s1 = ++im.seq;
    const auto t0 = Clock::now();
    BlockGuard block(im.host, im.host_dev, stream, im.blocking_kernel);
    im.stamp(0, s0, blocks, stream);
    for (int64_t i = 0; i < n; ++i) {
      check(cudaEventRecord(im.events[2 * i], stream), "cudaEventRecord");
      fn(stream);
      check(cudaEventRecord(im.events[2 * i + 1], stream), "cudaEventRecord");
      if (i + 1 == kQueuedBehindBlock) block.release();
    }
    im.stamp(1, s1, blocks, stream);
    block.release_and_sync();
    const double cpu = per_call_time(seconds_since(t0) / static_cast<double>(n), calls);
    const double clock = im.read_clock(s0, s1);
    std::vector<Sample> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      out[i] = {per_call_time(im.elapsed_s(2 * i, 2 * i + 1), calls), cpu, clock};
    return out;
  };

  // `calls` back-to-back calls of `fn` captured in one CUDA graph (replacing what `g` held),
  // instantiated and uploaded. A launcher that throws ends the capture first.
  auto capture = [&](const Launcher& fn, int64_t calls, GraphExec& g) {
    g.reset();
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
          "cudaStreamBeginCapture");
    try {
      for (int64_t c = 0; c < calls; ++c) fn(stream);
    } catch (...) {
      cudaGraph_t partial = nullptr;
      cudaStreamEndCapture(stream, &partial);
      if (partial) cudaGraphDestroy(partial);
      throw;
    }
    check(cudaStreamEndCapture(stream, &g.graph), "cudaStreamEndCapture");
    check(cudaGraphInstantiate(&g.exec, g.graph, 0), "cudaGraphInstantiate");
    check(cudaGraphUpload(g.exec, stream), "cudaGraphUpload");
  };

  // GPU time of one call of `fn` while the GPU is busy with the previous one: fn, start event,
  // fn, stop event (the second call is queued before the first ends, so no launch latency).
  auto timed_back_to_back = [&](const Launcher& fn) {
    fn(stream);
    check(cudaEventRecord(im.event(0), stream), "cudaEventRecord");
    fn(stream);
    check(cudaEventRecord(im.event(1), stream), "cudaEventRecord");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (graph batch estimate)");
    return im.elapsed_s(0, 1);
  };

  // warm / graph: warm-up, the sample plan (sampling.h), then batches of samples until the
  // stopping rule says stop. `fn` is one call in this mode (an eager call, or a replay of the
  // call's graph); `call` is the eager call, captured N times in a graph batch when it is short.
  auto warm_loop = [&](const Launcher& fn, const Launcher& call, SampleMethod single) {
    const SamplingConfig& plan = config.sampling;
    double estimate = 0.0;
    const int64_t runs = std::max<int64_t>(1, config.warmup_runs);
    for (int64_t i = 0; i < runs; ++i) estimate = timed_once(fn);
    m.warmup_runs = runs;
    GraphExec batch;
    const Launcher replay_batch = [&batch](cudaStream_t s) {
      check(cudaGraphLaunch(batch.exec, s), "cudaGraphLaunch (graph batch)");
    };
    Launcher sample = fn;
    int64_t calls = 1;
    double sample_s = estimate;
    m.sample_method = single;
    if (is_short_call(estimate, plan)) {
      // The estimate includes the launch latency: capture, time a replay, and grow N until a
      // replay spans min_sample_s (or max_calls).
      calls = calls_per_sample(estimate, plan);
      for (int captures = 1;; ++captures) {
        capture(call, calls, batch);
        sample_s = timed_back_to_back(replay_batch);
        m.warmup_runs += 2 * calls;
        const int64_t wanted = refine_calls_per_sample(calls, sample_s, plan);
        if (wanted == calls || captures >= kMaxCaptures) break;
        calls = wanted;
      }
      sample = replay_batch;
      m.sample_method = SampleMethod::graph_batch;
    }
    m.calls_per_sample = calls;
    const int64_t n = samples_per_batch(sample_s, plan);
    const auto start = Clock::now();
    while (m.stop == StopReason::none) {
      take(warm_batch(sample, n, calls), calls);
      m.stop = criterion.check(seconds_since(start));
    }
    m.wall_s = seconds_since(start);
  };

  switch (config.mode) {
    case Mode::warm: {
      warm_loop(launch, launch, SampleMethod::call);
      break;
    }
    case Mode::graph: {
      GraphExec g;
      // One eager run first, so any one-time setup of the launcher (module load, attributes)
      // happens outside the capture; the capture mode then refuses synchronizing calls.
      launch(stream);
      check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (before capture)");
      capture(launch, 1, g);
      const Launcher replay = [&g](cudaStream_t s) {
        check(cudaGraphLaunch(g.exec, s), "cudaGraphLaunch");
      };
      warm_loop(replay, launch, SampleMethod::graph);
      break;
    }
    case Mode::cold: {
      // Warm-up without the blocking kernel (its module is already loaded by the constructor).
      for (int64_t i = 0; i < config.warmup_runs; ++i) {
        launch(stream);
        check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (warm-up)");
      }
      m.warmup_runs = config.warmup_runs;
      im.event(1);
      const auto start = Clock::now();
      while (m.stop == StopReason::none) {
        // Flush L2 (untimed, finished before the sample starts).
        check(cudaMemsetAsync(im.flush, 0, static_cast<size_t>(flush_bytes_), stream),
              "cudaMemsetAsync (L2 flush)");
        check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (L2 flush)");
        const uint32_t s0 = ++im.seq, s1 = ++im.seq;
        const auto t0 = Clock::now();
        {
          BlockGuard block(im.host, im.host_dev, stream, im.blocking_kernel);
          im.stamp(0, s0, blocks, stream);
          check(cudaEventRecord(im.events[0], stream), "cudaEventRecord");
          launch(stream);
          check(cudaEventRecord(im.events[1], stream), "cudaEventRecord");
          im.stamp(1, s1, blocks, stream);
          block.release_and_sync();
        }
        const Sample s{im.elapsed_s(0, 1), seconds_since(t0), im.read_clock(s0, s1)};
        take({s}, 1);
        m.stop = criterion.check(seconds_since(start));
      }
      m.wall_s = seconds_since(start);
      break;
    }
    case Mode::triton: {
      // triton.testing.do_bench(fn, warmup=25, rep=100) step by step.
      const auto flush = [&] {
        check(cudaMemsetAsync(im.flush, 0, static_cast<size_t>(kTritonFlushBytes), stream),
              "cudaMemsetAsync (256 MB flush)");
      };
      const auto start = Clock::now();
      launch(stream);  // 1. one call, synchronized
      check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      // 2./3. estimate: one event pair around 5 x (flush + fn), the flush included.
      check(cudaEventRecord(im.event(0), stream), "cudaEventRecord");
      for (int i = 0; i < 5; ++i) {
        flush();
        launch(stream);
      }
      check(cudaEventRecord(im.event(1), stream), "cudaEventRecord");
      check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      const double estimate_ms = im.elapsed_s(0, 1) * 1e3 / 5.0;
      // 4. budgets in ms -> counts.
      const auto count = [&](double budget_ms) {
        return std::max<int64_t>(
            1, estimate_ms > 0.0 ? static_cast<int64_t>(budget_ms / estimate_ms) : 1);
      };
      const int64_t n_warmup = count(config.triton_warmup_ms);
      const int64_t n_repeat = count(config.triton_rep_ms);
      // 5. warm-up without flush.
      for (int64_t i = 0; i < n_warmup; ++i) launch(stream);
      m.warmup_runs = 6 + n_warmup;
      // 6. flush, start event, fn, end event; no synchronization inside the loop.
      im.event(static_cast<size_t>(2 * n_repeat - 1));
      const uint32_t s0 = ++im.seq, s1 = ++im.seq;
      im.stamp(0, s0, blocks, stream);
      for (int64_t i = 0; i < n_repeat; ++i) {
        flush();
        check(cudaEventRecord(im.events[2 * i], stream), "cudaEventRecord");
        launch(stream);
        check(cudaEventRecord(im.events[2 * i + 1], stream), "cudaEventRecord");
      }
      im.stamp(1, s1, blocks, stream);
      check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      const double clock = im.read_clock(s0, s1);
      for (int64_t i = 0; i < n_repeat; ++i) {
        const double t = im.elapsed_s(2 * i, 2 * i + 1);
        criterion.add_sample(t);
        if (!std::isfinite(t) || t < 0.0) continue;
        m.gpu_s.push_back(t);
        m.clock_hz.push_back(clock);
      }
      m.stop = StopReason::fixed_budget;
      m.wall_s = seconds_since(start);
      break;
    }
  }
  m.rejected_samples = criterion.rejected_samples();
  return m;
}

}  // namespace kda::bench::gpu
