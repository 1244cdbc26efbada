// kda-gbench: the KDA forward paths as Google Benchmark benchmarks (1.7.1 API), one per
// (shape, path), timed with CUDA events through UseManualTime. For dashboards that already read
// Google Benchmark output; kda-bench is the measurement of record (noise-based stopping, cold
// and graph modes, throttle detection, verification). Outputs are not verified here.
//
//   kda-gbench [--shapes=FILE] [--only=ID,..] [--paths=fused,explicit,l2norm] [--device=N]
//              [--seed=N] [--cold] [--benchmark_* flags]
//
// Exit codes: 0 ok, 2 bad usage or input, 3 a CUDA error, 77 no GPU (skipped).

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "common/device_problem.h"
#include "kda/bench/bytes_model.h"
#include "kda/bench/gpu_timing.h"
#include "kda/bench/results.h"
#include "kda/build_info.h"
#include "kda/harness/inputs.h"
#include "kda/harness/shapes.h"
#include "kda/kda.h"

namespace {

using kda::app::Path;

constexpr int kExitUsage = 2;
constexpr int kExitDevice = 3;
constexpr int kExitSkip = 77;

struct Flags {
  std::string shapes = "shapes/contract.yaml";
  std::vector<std::string> only;
  std::vector<std::string> paths = {"fused", "explicit", "l2norm"};
  int device = 0;
  uint64_t seed = kda::harness::kDefaultSeed;
  bool cold = false;
};

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

void usage() {
  std::cout << "kda-gbench [--shapes=FILE] [--only=ID,...] [--paths=fused,explicit,l2norm]\n"
               "           [--device=N] [--seed=N] [--cold] [--benchmark_* flags]\n"
               "  One Google Benchmark per (shape, path), CUDA-event time (UseManualTime).\n"
               "  --cold memsets max(2 x L2, 256 MiB) before every iteration (untimed).\n"
               "Exit codes: 0 ok, 2 bad usage or input, 3 CUDA error, 77 no GPU (skipped).\n"
               "Google Benchmark's own flags follow (--help):\n";
}

// Takes our flags out of argv (Google Benchmark gets the rest). Returns false on a bad value.
bool take_flags(int* argc, char** argv, Flags* f) {
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* name, std::string* v) {
      const std::string prefix = std::string(name) + "=";
      if (a.rfind(prefix, 0) != 0) return false;
      *v = a.substr(prefix.size());
      return true;
    };
    std::string v;
    try {
      if (value("--shapes", &v)) {
        f->shapes = v;
      } else if (value("--only", &v)) {
        f->only = split(v);
      } else if (value("--paths", &v)) {
        f->paths = split(v);
      } else if (value("--device", &v)) {
        f->device = std::stoi(v);
      } else if (value("--seed", &v)) {
        f->seed = std::stoull(v);
      } else if (a == "--cold") {
        f->cold = true;
      } else {
        if (a == "--help" || a == "-h") usage();
        argv[out++] = argv[i];
      }
    } catch (const std::exception&) {
      std::cerr << "kda-gbench: " << a << ": not a number\n";
      return false;
    }
  }
  *argc = out;
  for (const auto& p : f->paths) {
    Path path;
    if (!kda::app::parse_path(p, &path)) {
      std::cerr << "kda-gbench: --paths: unknown path '" << p << "' (fused, explicit, l2norm)\n";
      return false;
    }
  }
  return true;
}

// The GPU state shared by every benchmark: one stream, an event pair, the flush buffer, and the
// problem of the shape being run (one at a time, so device memory holds a single problem).
// Copy deleted: owns CUDA handles.
class Context {
 public:
  Context() {
    kda::app::check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                         "cudaStreamCreate");
    kda::app::check_cuda(cudaEventCreate(&start_), "cudaEventCreate");
    kda::app::check_cuda(cudaEventCreate(&stop_), "cudaEventCreate");
  }
  ~Context() {
    if (stream_) cudaStreamSynchronize(stream_);
    problem_.reset();
    if (start_) cudaEventDestroy(start_);
    if (stop_) cudaEventDestroy(stop_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  kda::app::DeviceProblem& problem(const kda::harness::ShapeSpec& shape, uint64_t seed) {
    if (!problem_ || shape_id_ != shape.id) {
      problem_.reset();
      inputs_ = std::make_unique<kda::harness::HostInputs>(kda::harness::make_inputs(shape, seed));
      problem_ = std::make_unique<kda::app::DeviceProblem>(*inputs_);
      shape_id_ = shape.id;
    }
    return *problem_;
  }

  void flush(int64_t l2_bytes) {
    if (!flush_) flush_ = std::make_unique<kda::app::DeviceBuffer>(
        static_cast<size_t>(kda::bench::gpu::cold_flush_bytes(l2_bytes)));
    kda::app::check_cuda(cudaMemsetAsync(flush_->get(), 0, flush_->bytes(), stream_),
                         "cudaMemsetAsync (L2 flush)");
  }

  // CUDA-event time of one enqueue of `path`, synchronized.
  double time_once(kda::app::DeviceProblem& problem, Path path) {
    kda::app::check_cuda(cudaEventRecord(start_, stream_), "cudaEventRecord");
    problem.enqueue(path, stream_);
    kda::app::check_cuda(cudaEventRecord(stop_, stream_), "cudaEventRecord");
    kda::app::check_cuda(cudaEventSynchronize(stop_), "cudaEventSynchronize");
    float ms = 0.0f;
    kda::app::check_cuda(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return static_cast<double>(ms) * 1e-3;
  }

 private:
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  std::unique_ptr<kda::app::DeviceBuffer> flush_;
  std::string shape_id_;
  std::unique_ptr<kda::harness::HostInputs> inputs_;
  std::unique_ptr<kda::app::DeviceProblem> problem_;
};

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!take_flags(&argc, argv, &flags)) return kExitUsage;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return kExitUsage;

  std::vector<kda::harness::ShapeSpec> shapes;
  try {
    shapes = kda::harness::load_shape_file(flags.shapes).shapes;
  } catch (const std::exception& e) {
    std::cerr << "kda-gbench: " << e.what() << "\n";
    return kExitUsage;
  }
  for (const auto& id : flags.only) {
    if (std::none_of(shapes.begin(), shapes.end(), [&](const auto& s) { return s.id == id; })) {
      std::cerr << "kda-gbench: --only " << id << ": no such shape id in " << flags.shapes << "\n";
      return kExitUsage;
    }
  }

  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    cudaGetLastError();
    std::cerr << "kda-gbench needs an NVIDIA GPU (sm_90); none was found ("
              << (status != cudaSuccess ? cudaGetErrorString(status) : "0 devices")
              << "): skipped\n";
    return kExitSkip;
  }
  kda::app::DeviceInfo info;
  std::unique_ptr<Context> context;
  try {
    info = kda::app::select_device(flags.device);
    context = std::make_unique<Context>();
  } catch (const kda::Error& e) {
    std::cerr << "kda-gbench: " << e.what() << "\n";
    return e.code() == kda::ErrorCode::invalid_argument ? kExitUsage : kExitDevice;
  }

  benchmark::AddCustomContext("device", fmt::format("{}: {}", info.index, info.name));
  benchmark::AddCustomContext("device_cc", fmt::format("{}.{}", info.cc_major, info.cc_minor));
  benchmark::AddCustomContext("device_sm_count", std::to_string(info.sm_count));
  benchmark::AddCustomContext("device_default_sm_clock_mhz",
                              std::to_string(info.default_sm_clock_khz / 1000));
  benchmark::AddCustomContext("device_l2_bytes", std::to_string(info.l2_bytes));
  benchmark::AddCustomContext("device_peak_mem_bw_Bps", fmt::format("{}", info.peak_mem_bw_Bps));
  benchmark::AddCustomContext("cuda_driver_version", std::to_string(info.driver_version));
  benchmark::AddCustomContext("cuda_runtime_version", std::to_string(info.runtime_version));
  benchmark::AddCustomContext("git_commit", kda::build::git_commit);
  benchmark::AddCustomContext("build_flags", kda::build::flags);
  benchmark::AddCustomContext("timer", "CUDA events around each call (UseManualTime)");
  benchmark::AddCustomContext("l2_flush", flags.cold ? "max(2 x L2, 256 MiB) memset per iteration"
                                                     : "none (warm)");
  benchmark::AddCustomContext("seed", std::to_string(flags.seed));
  benchmark::AddCustomContext("verified", "no (kda-bench and kda-check verify)");

  Context* ctx = context.get();
  const int64_t l2_bytes = info.l2_bytes;
  const bool cold = flags.cold;
  for (const auto& shape : shapes) {
    if (!flags.only.empty() &&
        std::find(flags.only.begin(), flags.only.end(), shape.id) == flags.only.end())
      continue;
    if (!shape.gpu_supported()) continue;
    const uint64_t seed = shape.seed.value_or(flags.seed);
    for (const auto& name : flags.paths) {
      Path path;
      kda::app::parse_path(name, &path);
      const auto size = kda::bench::problem_size(shape);
      const auto kind = *kda::bench::parse_path_kind(name);
      const double bytes = static_cast<double>(kda::bench::path_bytes(size, kind));
      const double floor_s =
          static_cast<double>(kda::bench::floor_bytes(size, kind)) / kda::bench::kDefaultFloorBandwidth;
      benchmark::RegisterBenchmark(
          fmt::format("kda/{}/{}", shape.id, name).c_str(),
          [ctx, shape, seed, path, bytes, floor_s, cold, l2_bytes](benchmark::State& state) {
            try {
              kda::app::DeviceProblem& problem = ctx->problem(shape, seed);
              ctx->time_once(problem, path);  // warm-up: module load, first-touch
              for (auto _ : state) {
                if (cold) ctx->flush(l2_bytes);
                state.SetIterationTime(ctx->time_once(problem, path));
              }
            } catch (const std::exception& e) {
              state.SkipWithError(e.what());
              return;
            }
            const auto iterations = static_cast<double>(state.iterations());
            state.SetBytesProcessed(static_cast<int64_t>(bytes * iterations));
            // floor_s x iterations / time = byte-floor time / mean time (1 = at the floor).
            state.counters["floor_share"] =
                benchmark::Counter(floor_s, benchmark::Counter::kIsIterationInvariantRate);
            state.counters["token_heads"] = static_cast<double>(
                kda::bench::problem_size(shape).token_heads());
          })
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  context.reset();
  return 0;
}
