// Tests of the measurement loops (kda_bench_gpu). Host-side cases (label cpu) run everywhere;
// the GPU cases (label gpu, binary test_bench_gpu) skip without a device. The timed work is a
// device memset, so these test the harness, not the kernels.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>

#include "kda/bench/gpu_timing.h"
#include "kda/bench/statistics.h"
#include "kda/kda.h"

namespace g = kda::bench::gpu;

namespace {

bool have_gpu() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  cudaGetLastError();
  return ok;
}

}  // namespace

#ifndef KDA_BENCH_GPU_TESTS  // ------------------------------------------------------- host side

TEST(GpuTimingHost, ModeNames) {
  for (g::Mode m : {g::Mode::warm, g::Mode::cold, g::Mode::graph, g::Mode::triton})
    EXPECT_EQ(g::parse_mode(g::to_string(m)), m);
  EXPECT_FALSE(g::parse_mode("hot").has_value());
  EXPECT_FALSE(g::parse_mode("").has_value());
}

TEST(GpuTimingHost, ColdFlushIsTwiceL2ButAtLeast256MiB) {
  EXPECT_EQ(g::cold_flush_bytes(int64_t{60} << 20), int64_t{256} << 20);   // H200: 60 MiB L2
  EXPECT_EQ(g::cold_flush_bytes(int64_t{200} << 20), int64_t{400} << 20);
  EXPECT_EQ(g::kTritonFlushBytes, int64_t{256} << 20);
}

TEST(GpuTimingHost, BenchWithoutAGpuIsAClearCudaError) {
  if (have_gpu()) GTEST_SKIP() << "a GPU is present";
  try {
    g::Bench bench;
    FAIL() << "constructed without a GPU";
  } catch (const kda::Error& e) {
    EXPECT_EQ(e.code(), kda::ErrorCode::cuda);
    EXPECT_FALSE(std::string(e.what()).empty());
  }
}

#else  // ---------------------------------------------------------------------------- on the GPU

namespace {

class GpuTiming : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no GPU";
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&buffer_, kBytes), cudaSuccess);
    bench_ = std::make_unique<g::Bench>();
  }
  void TearDown() override {
    bench_.reset();
    if (buffer_) cudaFree(buffer_);
  }

  g::Launcher memset_launcher() {
    return [this](cudaStream_t s) {
      if (cudaMemsetAsync(buffer_, 1, kBytes, s) != cudaSuccess)
        throw kda::Error(kda::ErrorCode::cuda, "memset");
    };
  }

  g::MeasureConfig quick(g::Mode mode) {
    g::MeasureConfig c;
    c.mode = mode;
    c.stopping.min_time_s = 0.05;
    c.stopping.timeout_s = 10.0;
    c.warmup_runs = 2;
    return c;
  }

  static constexpr size_t kBytes = size_t{512} << 20;  // ~0.1-0.2 ms on an H200
  void* buffer_ = nullptr;
  std::unique_ptr<g::Bench> bench_;
};

void expect_sane(const g::Measurement& m, double default_clock_hz, bool with_cpu) {
  ASSERT_GE(m.gpu_s.size(), 10u);
  for (double t : m.gpu_s) EXPECT_GT(t, 0.0);
  EXPECT_EQ(m.clock_hz.size(), m.gpu_s.size());
  EXPECT_EQ(m.cpu_s.size(), with_cpu ? m.gpu_s.size() : 0u);
  const auto s = kda::bench::summarize(m.gpu_s);
  EXPECT_GT(s.median, 1e-6);
  EXPECT_LT(s.median, 0.1);
  int known = 0;
  for (double c : m.clock_hz) {
    if (!std::isfinite(c)) continue;
    ++known;
    EXPECT_GT(c, 0.1 * default_clock_hz);
    EXPECT_LT(c, 2.5 * default_clock_hz);
  }
  EXPECT_GT(known, 0) << "no clock stamp from SM 0";
}

}  // namespace

// A launcher that enqueues a memset launches work; one that enqueues nothing (a forward stage the
// call's kernel choice does not run) does not; one that throws counts as launching work (it is
// timed, and throws, as before), and its capture is ended, so the stream is usable again.
TEST_F(GpuTiming, LaunchesWorkCountsTheCapturedNodes) {
  const cudaStream_t s = bench_->stream();
  EXPECT_TRUE(g::launches_work(memset_launcher(), s));
  EXPECT_FALSE(g::launches_work([](cudaStream_t) {}, s));
  EXPECT_TRUE(g::launches_work(
      [](cudaStream_t) { throw kda::Error(kda::ErrorCode::cuda, "launcher"); }, s));
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
  ASSERT_EQ(cudaStreamIsCapturing(s, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  EXPECT_TRUE(g::launches_work(memset_launcher(), s));
}

TEST_F(GpuTiming, WarmConverges) {
  const g::Measurement m = bench_->measure(memset_launcher(), quick(g::Mode::warm));
  EXPECT_TRUE(kda::bench::is_converged(m.stop)) << kda::bench::to_string(m.stop);
  expect_sane(m, bench_->facts().default_sm_clock_hz, true);
  for (double c : m.cpu_s) EXPECT_GT(c, 0.0);
}

TEST_F(GpuTiming, ColdConverges) {
  const g::Measurement m = bench_->measure(memset_launcher(), quick(g::Mode::cold));
  EXPECT_TRUE(kda::bench::is_converged(m.stop)) << kda::bench::to_string(m.stop);
  expect_sane(m, bench_->facts().default_sm_clock_hz, true);
  // The host view includes the blocking kernel, release and synchronization.
  const auto gpu = kda::bench::summarize(m.gpu_s), cpu = kda::bench::summarize(m.cpu_s);
  EXPECT_GT(cpu.median, gpu.median);
}

TEST_F(GpuTiming, GraphReplayConverges) {
  const g::Measurement m = bench_->measure(memset_launcher(), quick(g::Mode::graph));
  EXPECT_TRUE(kda::bench::is_converged(m.stop)) << kda::bench::to_string(m.stop);
  expect_sane(m, bench_->facts().default_sm_clock_hz, true);
}

TEST_F(GpuTiming, ShortCallsAreTimedAsGraphBatches) {
  // A 4 MiB memset takes a few microseconds, about what launching it costs the host: timed one
  // launch per event pair it would measure the host's launch rate. As a graph batch each sample
  // spans >= min_sample_s of back-to-back calls and the noise drops below 1 %.
  const g::Launcher tiny = [this](cudaStream_t s) {
    if (cudaMemsetAsync(buffer_, 2, size_t{4} << 20, s) != cudaSuccess)
      throw kda::Error(kda::ErrorCode::cuda, "memset");
  };
  for (g::Mode mode : {g::Mode::warm, g::Mode::graph}) {
    SCOPED_TRACE(g::to_string(mode));
    g::MeasureConfig c = quick(mode);
    c.stopping.min_time_s = 0.2;
    const g::Measurement m = bench_->measure(tiny, c);
    EXPECT_TRUE(kda::bench::is_converged(m.stop)) << kda::bench::to_string(m.stop);
    EXPECT_EQ(m.sample_method, kda::bench::SampleMethod::graph_batch);
    EXPECT_GE(m.calls_per_sample, 2);
    expect_sane(m, bench_->facts().default_sm_clock_hz, true);
    const auto s = kda::bench::summarize(m.gpu_s);
    EXPECT_LT(s.median, 50e-6);  // per call, not per sample
    // A replay spans the minimum sample time (10 % slack for the refinement's estimate).
    EXPECT_GE(s.median * static_cast<double>(m.calls_per_sample), 0.9 * c.sampling.min_sample_s);
    EXPECT_LE(s.noise, 0.01);
    // min_time counts the GPU time of the batches: ~0.2 s of samples, not 0.2 s of per-call
    // times (which would take calls_per_sample times longer).
    EXPECT_LT(m.wall_s, 5.0);
  }
}

TEST_F(GpuTiming, LongCallsKeepOneCallPerEventPair) {
  for (g::Mode mode : {g::Mode::warm, g::Mode::graph}) {
    SCOPED_TRACE(g::to_string(mode));
    g::MeasureConfig c = quick(mode);
    c.sampling.min_sample_s = 10e-6;  // the 512 MiB memset (~0.1 ms) counts as long
    const g::Measurement m = bench_->measure(memset_launcher(), c);
    EXPECT_TRUE(kda::bench::is_converged(m.stop));
    EXPECT_EQ(m.calls_per_sample, 1);
    EXPECT_EQ(m.sample_method, mode == g::Mode::warm ? kda::bench::SampleMethod::call
                                                     : kda::bench::SampleMethod::graph);
  }
  const g::Measurement cold = bench_->measure(memset_launcher(), quick(g::Mode::cold));
  EXPECT_EQ(cold.calls_per_sample, 1);
  EXPECT_EQ(cold.sample_method, kda::bench::SampleMethod::call);
}

TEST_F(GpuTiming, TritonUsesItsBudgets) {
  const g::Measurement m = bench_->measure(memset_launcher(), quick(g::Mode::triton));
  EXPECT_EQ(m.stop, kda::bench::StopReason::fixed_budget);
  expect_sane(m, bench_->facts().default_sm_clock_hz, false);
  // n_repeat = int(100 ms / estimate), the estimate including the 256 MiB memset: the timed
  // calls alone add up to less than the 100 ms budget.
  double total = 0.0;
  for (double t : m.gpu_s) total += t;
  EXPECT_LT(total, 0.1 * 1.2);  // 20 % slack for call-to-call variation
  EXPECT_GE(m.warmup_runs, 7);
}

TEST_F(GpuTiming, TimeoutIsReportedAsNotConverged) {
  g::MeasureConfig c = quick(g::Mode::cold);
  c.stopping.min_time_s = 1e6;  // unreachable
  c.stopping.timeout_s = 0.3;
  const auto t0 = std::chrono::steady_clock::now();
  const g::Measurement m = bench_->measure(memset_launcher(), c);
  EXPECT_EQ(m.stop, kda::bench::StopReason::timeout);
  EXPECT_FALSE(kda::bench::is_converged(m.stop));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

TEST_F(GpuTiming, AThrowingLauncherLeavesTheStreamUsable) {
  int calls = 0;
  const g::Launcher bad = [&](cudaStream_t) {
    if (++calls == 4) throw std::runtime_error("launcher failed");
  };
  EXPECT_THROW(bench_->measure(bad, quick(g::Mode::cold)), std::runtime_error);
  const g::Measurement m = bench_->measure(memset_launcher(), quick(g::Mode::warm));
  EXPECT_TRUE(kda::bench::is_converged(m.stop));
}

TEST_F(GpuTiming, ASynchronizingLauncherIsCaughtByTheBlockingKernelTimeout) {
  // Waits kBlockTimeoutS (10 s): the launcher's synchronize waits for the blocking kernel.
  const g::Launcher syncing = [](cudaStream_t s) { cudaStreamSynchronize(s); };
  g::MeasureConfig c = quick(g::Mode::cold);
  c.warmup_runs = 0;
  try {
    bench_->measure(syncing, c);
    FAIL() << "no error";
  } catch (const kda::Error& e) {
    EXPECT_NE(std::string(e.what()).find("blocking kernel"), std::string::npos) << e.what();
  }
  const g::Measurement m = bench_->measure(memset_launcher(), quick(g::Mode::warm));
  EXPECT_TRUE(kda::bench::is_converged(m.stop));
}

#endif
