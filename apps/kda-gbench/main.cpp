// kda-gbench: the KDA forward paths as Google Benchmark benchmarks (1.7.1 API), one per
// (shape, path) named kda/<shape id>/<path>, timed with CUDA events through UseManualTime. For
// dashboards that already read Google Benchmark output; kda-bench is the measurement of record
// (noise-based stopping, cold/graph/triton modes, throttle detection, short-call batching).
// Every path is verified against the CPU float64 reference (as kda-bench does) before its first
// timed iteration; a path that fails is reported as a benchmark error and the exit code is 1.
//
//   kda-gbench [--shapes FILE] [--only ID,..] [--paths fused,explicit,l2norm,raw] [--variant NAME]
//              [--device N] [--seed N] [--cold] [--no-verify] [--force] [--version]
//              [--benchmark_* flags]
//
// Our options take their value as `--opt=value` or `--opt value`; they are taken out of argv
// before benchmark::Initialize sees it. Listing (--benchmark_list_tests) needs no GPU.
// Exit codes (docs/errors.md): 0 ok; 1 a verification failed or a shape did not fit in device
// memory; 2 bad usage or input (option, shape file, --only id, --benchmark_out path, a shape too
// big for the host's memory); 3 no usable GPU or a CUDA error.

#include <cuda_runtime_api.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "common/cli.h"
#include "common/device_check.h"
#include "common/device_problem.h"
#include "kda/bench/bytes_model.h"
#include "kda/bench/gpu_timing.h"
#include "kda/bench/results.h"
#include "kda/build_info.h"
#include "kda/harness/files.h"
#include "kda/harness/host_memory.h"
#include "kda/harness/inputs.h"
#include "kda/harness/report.h"
#include "kda/harness/shapes.h"
#include "kda/kda.h"

namespace {

using kda::app::kExitDevice;
using kda::app::kExitFailed;
using kda::app::kExitOk;
using kda::app::kExitUsage;
using kda::harness::Path;

struct Flags {
  std::string shapes = "shapes/contract.yaml";
  std::vector<std::string> only;
  std::vector<std::string> paths = {"fused", "explicit", "l2norm"};
  std::string variant;  // empty: the library default
  int device = 0;
  uint64_t seed = kda::harness::kDefaultSeed;
  bool cold = false;
  bool verify = true;
  bool force = false;    // replace an existing --benchmark_out file
  bool version = false;  // print the version and exit
};

// "kda-gbench: <message>" on stderr, control characters escaped (ids and paths in messages come
// from the user).
void say(const std::string& message) {
  std::cerr << "kda-gbench: " << kda::harness::escape_controls(message) << "\n";
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

void usage() {
  std::cout
      << "kda-gbench [--shapes FILE] [--only ID,...] [--paths fused,explicit,l2norm,raw]\n"
         "           [--variant NAME] [--device N] [--seed N] [--cold] [--no-verify]\n"
         "           [--force] [--version] [--benchmark_* flags]\n"
         "  One Google Benchmark per (shape, path), named kda/<shape>/<path>; CUDA-event time\n"
         "  per iteration (UseManualTime). Each path is verified against the CPU float64\n"
         "  reference before it is timed (--no-verify skips that); raw (the forward on raw k,\n"
         "  gate and beta logits) needs a v2 variant and is not run by default.\n"
         "  --cold memsets max(2 x L2, 256 MiB) before every iteration (untimed).\n"
         "  --benchmark_list_tests lists the benchmarks without a GPU.\n"
         "  --benchmark_out=FILE must be a regular file or a new path; --force replaces an\n"
         "  existing one (written once complete, atomically).\n"
         "Exit codes: 0 ok, 1 a verification failed or a shape did not fit, 2 bad usage or\n"
         "input, 3 no usable GPU or a CUDA error.\n"
         "Google Benchmark's own flags follow:\n";
}

// Google Benchmark's reading of a bool flag value (1.7.1 IsTruthyFlagValue).
bool truthy(const std::string& value) {
  if (value.empty()) return true;
  if (value.size() == 1) return std::string("0fFnN").find(value[0]) == std::string::npos;
  std::string lower = value;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower != "false" && lower != "no" && lower != "off";
}

// True when argv asks Google Benchmark only to list the benchmarks.
bool list_only(int argc, char** argv) {
  bool list = false;
  const std::string flag = "--benchmark_list_tests";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == flag) list = true;
    if (a.rfind(flag + "=", 0) == 0) list = truthy(a.substr(flag.size() + 1));
  }
  return list;
}

// Takes our flags out of argv (Google Benchmark gets the rest, in order). Returns false, with a
// message, on a bad or missing value.
bool take_flags(int* argc, char** argv, Flags* f) {
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string a = argv[i];
    std::string opt, v;  // the option being read and its value
    // --name=value, or --name value (the value is the next argument).
    auto value = [&](const char* name, std::string* out_value) {
      const std::string n = name;
      if (a.rfind(n + "=", 0) == 0) {
        *out_value = a.substr(n.size() + 1);
      } else if (a == n) {
        if (i + 1 >= *argc) throw std::invalid_argument(n + " needs a value");
        *out_value = argv[++i];
      } else {
        return false;
      }
      opt = n;
      return true;
    };
    try {
      if (value("--shapes", &v)) {
        f->shapes = v;
      } else if (value("--only", &v)) {
        f->only = split(v);
      } else if (value("--paths", &v)) {
        f->paths.clear();
        for (const auto& p : split(v))
          if (std::find(f->paths.begin(), f->paths.end(), p) == f->paths.end())
            f->paths.push_back(p);
      } else if (value("--variant", &v)) {
        f->variant = v;
      } else if (value("--device", &v)) {
        size_t used = 0;
        f->device = std::stoi(v, &used);
        if (used != v.size()) throw std::invalid_argument("not a number");
      } else if (value("--seed", &v)) {
        const std::optional<uint64_t> seed = kda::app::parse_seed(v);
        if (!seed) throw std::invalid_argument("--seed: " + kda::app::seed_refusal(v));
        f->seed = *seed;
      } else if (a == "--cold") {
        f->cold = true;
      } else if (a == "--no-verify") {
        f->verify = false;
      } else if (a == "--force") {
        f->force = true;
      } else if (a == "--version") {
        f->version = true;
      } else {
        if (a == "--help" || a == "-h") usage();
        argv[out++] = argv[i];
      }
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      say(what.rfind("--", 0) == 0 ? what : opt + ": '" + v + "' is not a number");
      return false;
    } catch (const std::out_of_range&) {
      say(opt + ": '" + v + "' is out of range");
      return false;
    }
  }
  *argc = out;
  argv[out] = nullptr;
  if (f->paths.empty()) {
    say("--paths: no path given (fused, explicit, l2norm, raw)");
    return false;
  }
  for (const auto& p : f->paths) {
    if (!kda::harness::parse_path(p)) {
      say("--paths: unknown path '" + p + "' (fused, explicit, l2norm, raw)");
      return false;
    }
  }
  const kda::app::Variant* variant = nullptr;
  try {
    variant = &kda::app::variant_named(f->variant);
  } catch (const std::invalid_argument& e) {
    say(std::string("--variant: ") + e.what());
    return false;
  }
  if (std::find(f->paths.begin(), f->paths.end(), "raw") != f->paths.end()) {
    if (const auto why = kda::app::unsupported_by_variant(Path::raw, *variant)) {
      say("--paths raw: variant " + std::string(variant->name) +
          " cannot run the raw path (" + *why +
          "); pick a v2 variant with --variant, or drop raw from --paths");
      return false;
    }
  }
  return true;
}

// The GPU state shared by every benchmark: one stream, an event pair, the flush buffer, and the
// problem of the shape being run (one at a time, so device memory holds a single problem), with
// the verdict of every (shape, path) verified so far. Copy deleted: owns CUDA handles.
class Context {
 public:
  Context(const Flags& flags, const kda::app::DeviceInfo& device)
      : flags_(flags),
        device_(device),
        l2_bytes_(device.l2_bytes),
        variant_(&kda::app::variant_named(flags.variant)) {
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

  kda::app::DeviceProblem& problem(const kda::harness::ShapeSpec& shape) {
    if (!problem_ || shape_id_ != shape.id) {
      problem_.reset();
      golden_.reset();
      raw_golden_.reset();
      shape_id_.clear();
      // Refused before the inputs are generated or anything is allocated (docs/errors.md).
      kda::app::require_device_memory(
          shape.id, kda::app::device_footprint(kda::harness::ProblemSize::of(shape)), device_);
      inputs_ = std::make_unique<kda::harness::HostInputs>(
          kda::harness::make_inputs(shape, shape.seed.value_or(flags_.seed)));
      problem_ = std::make_unique<kda::app::DeviceProblem>(*inputs_);
      problem_->set_variant(*variant_);
      shape_id_ = shape.id;
    }
    return *problem_;
  }

  // "" when `path` of `shape` passed verification (computed once per (shape, path)), else the
  // checker's verdict ("failed: ...").
  std::string verification_failure(const kda::harness::ShapeSpec& shape, Path path) {
    const std::string key = shape.id + "/" + kda::harness::to_string(path);
    if (auto it = verdicts_.find(key); it != verdicts_.end()) return it->second;
    kda::app::DeviceProblem& p = problem(shape);
    // The raw path has references of its own (fed the raw inputs), computed when it comes up.
    std::unique_ptr<kda::app::Golden>& golden = path == Path::raw ? raw_golden_ : golden_;
    if (!golden) {
      std::cerr << "kda-gbench: " << shape.id << ": computing the CPU reference"
                << (path == Path::raw ? " of the raw path" : "") << "\n"
                << std::flush;
      golden = std::make_unique<kda::app::Golden>(path == Path::raw
                                                      ? kda::harness::compute_raw_golden(*inputs_)
                                                      : kda::harness::compute_golden(*inputs_));
    }
    const kda::app::PathCheck check = kda::app::check_path(p, path, *golden, stream_, false);
    const std::string verdict = check.verdict();
    std::cerr << "kda-gbench: " << key << ": verification " << verdict << "\n" << std::flush;
    return verdicts_[key] = check.passed() ? "" : verdict;
  }

  void flush() {
    if (!flush_)
      flush_ = std::make_unique<kda::app::DeviceBuffer>(
          static_cast<size_t>(kda::bench::gpu::cold_flush_bytes(l2_bytes_)));
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
  const Flags& flags_;
  kda::app::DeviceInfo device_;
  int64_t l2_bytes_ = 0;
  const kda::app::Variant* variant_;  // checked by the flag parser
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  std::unique_ptr<kda::app::DeviceBuffer> flush_;
  std::string shape_id_;
  std::unique_ptr<kda::harness::HostInputs> inputs_;
  std::unique_ptr<kda::app::DeviceProblem> problem_;
  std::unique_ptr<kda::app::Golden> golden_, raw_golden_;
  std::map<std::string, std::string> verdicts_;
};

// What the benchmarks share: the context (made once a GPU was found) and what went wrong.
struct Runner {
  Flags flags;
  std::unique_ptr<Context> context;
  int failed = 0;       // verification failures and shapes that did not fit
  int cuda_errors = 0;
  int out_of_memory = 0;  // host allocations that failed (exit 2, as the other apps)
};

// --benchmark_out=FILE. Google Benchmark opens FILE itself as soon as it runs, even only to list
// the benchmarks, truncating whatever is there and following it wherever it points. So FILE is
// checked like every other output before anything runs (a regular file or a new path, a link
// written through; an existing file only with --force), Google Benchmark writes FILE.tmp.<pid>
// beside the file, and that is moved into place atomically once complete. A listing writes
// nothing.
class BenchmarkOut {
 public:
  // Points every --benchmark_out= of argv at the temporary file. Throws OutputError.
  BenchmarkOut(int argc, char** argv, bool force) : force_(force) {
    const std::string flag = "--benchmark_out=";
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a.rfind(flag, 0) != 0) continue;
      path_ = a.substr(flag.size());
      const std::string target = kda::harness::check_output_file(path_, force);
      temp_ = fmt::format("{}.tmp.{}", target, ::getpid());
      arg_ = flag + temp_;
      argv[i] = arg_.data();
    }
  }
  BenchmarkOut(const BenchmarkOut&) = delete;  // argv points into arg_
  BenchmarkOut& operator=(const BenchmarkOut&) = delete;

  // Moves the finished output into place (keep) or only removes the temporary file. Returns
  // false, with a message, when the output could not be written.
  bool finish(bool keep) const {
    if (temp_.empty()) return true;
    bool ok = true;
    try {
      if (keep) {
        const std::string content = kda::harness::RegularFile(temp_).read_all(uint64_t{1} << 30);
        kda::harness::write_text_file_atomic(path_, content, force_);
      }
    } catch (const std::exception& e) {  // InputFileError, OutputError
      say("--benchmark_out=" + path_ + ": " + e.what());
      ok = false;
    }
    ::unlink(temp_.c_str());
    return ok;
  }

 private:
  bool force_ = false;
  std::string path_, temp_, arg_;
};

void run_one(Runner* runner, const kda::harness::ShapeSpec& shape, Path path,
             benchmark::State& state, double bytes, double floor_s) {
  try {
    Context& ctx = *runner->context;
    kda::app::DeviceProblem& problem = ctx.problem(shape);
    if (runner->flags.verify) {
      const std::string failure = ctx.verification_failure(shape, path);
      if (!failure.empty()) {
        ++runner->failed;
        state.SkipWithError(("verification " + failure).c_str());
        return;
      }
    }
    ctx.time_once(problem, path);  // warm-up of this run (not timed)
    for (auto _ : state) {
      if (runner->flags.cold) ctx.flush();
      state.SetIterationTime(ctx.time_once(problem, path));
    }
  } catch (const kda::app::DeviceMemoryError& e) {  // that benchmark errors (exit 1), the rest run
    ++runner->failed;
    state.SkipWithError((std::string("skipped: ") + e.what()).c_str());
    return;
  } catch (const std::bad_alloc&) {
    ++runner->out_of_memory;
    const std::string message =
        kda::harness::out_of_host_memory("while running shape '" + shape.id + "'");
    say(message);
    state.SkipWithError(message.c_str());
    return;
  } catch (const kda::Error& e) {
    if (e.code() == kda::ErrorCode::cuda) ++runner->cuda_errors; else ++runner->failed;
    state.SkipWithError(e.what());
    return;
  } catch (const std::exception& e) {
    ++runner->failed;
    state.SkipWithError(e.what());
    return;
  }
  const auto iterations = static_cast<double>(state.iterations());
  // Rates are divided by the manual (CUDA-event) time: bytes_per_second = bytes model / mean.
  state.SetBytesProcessed(static_cast<int64_t>(bytes * iterations));
  // floor_s x iterations / manual time = byte-floor time / mean time (1 = at the floor).
  state.counters["floor_share"] =
      benchmark::Counter(floor_s, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["token_heads"] =
      static_cast<double>(kda::bench::ProblemSize::of(shape).token_heads());
}

}  // namespace

int main(int argc, char** argv) {
  static Runner runner;  // outlives every registered benchmark
  Flags& flags = runner.flags;
  if (!take_flags(&argc, argv, &flags)) return kExitUsage;
  if (flags.version) {
    std::cout << "kda-gbench " << kda::build::git_commit << " (" << kda::build::flags << ")\n";
    return kExitOk;
  }
  const bool list = list_only(argc, argv);  // before Initialize, which removes the flags it reads
  std::optional<BenchmarkOut> out;
  try {
    out.emplace(argc, argv, flags.force);
  } catch (const kda::harness::OutputError& e) {
    say(std::string("--benchmark_out: ") + e.what());
    return kExitUsage;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return kExitUsage;

  std::vector<kda::harness::ShapeSpec> shapes;
  try {
    shapes = kda::harness::load_shape_file(flags.shapes).shapes;
  } catch (const std::exception& e) {
    say(e.what());
    return kExitUsage;
  }
  if (const auto refusal = kda::app::select_only(&shapes, flags.only, flags.shapes,
                                                 [](const auto& s) { return s.id; })) {
    say(*refusal);
    return kExitUsage;
  }

  // Register first (no GPU needed), so --benchmark_list_tests works anywhere.
  int registered = 0;
  std::vector<const kda::harness::ShapeSpec*> to_run;  // shapes with registered benchmarks
  for (const auto& shape : shapes) {
    if (!shape.gpu_supported()) {
      say(fmt::format("{}: not registered: K = {}, V = {}; the GPU kernels support K = V = 128",
                      shape.id, shape.key_dim, shape.value_dim));
      continue;
    }
    to_run.push_back(&shape);
    const auto size = kda::harness::ProblemSize::of(shape);
    for (const auto& name : flags.paths) {
      const Path path = *kda::harness::parse_path(name);  // checked by take_flags
      const double bytes = static_cast<double>(kda::bench::path_bytes(size, path));
      const double floor_s = static_cast<double>(kda::bench::floor_bytes(size, path)) /
                             kda::bench::kDefaultFloorBandwidth;
      benchmark::RegisterBenchmark(
          fmt::format("kda/{}/{}", shape.id, name).c_str(),
          [shape, path, bytes, floor_s](benchmark::State& state) {
            run_one(&runner, shape, path, state, bytes, floor_s);
          })
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
      ++registered;
    }
  }
  if (registered == 0) {
    say(flags.shapes + ": no shape the GPU kernels support");
    return kExitUsage;
  }

  if (list) {
    const size_t matched = benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    out->finish(false);
    return matched > 0 ? kExitOk : kExitUsage;  // Google Benchmark said what did not match
  }

  // Every shape must fit in the host's memory (one at a time): refused before looking for a GPU.
  try {
    for (const kda::harness::ShapeSpec* shape : to_run) {
      const bool raw =
          std::find(flags.paths.begin(), flags.paths.end(), "raw") != flags.paths.end();
      kda::harness::require_host_memory(
          shape->id, kda::harness::host_footprint(kda::harness::ProblemSize::of(*shape),
                                                  flags.verify
                                                      ? kda::harness::HostWork::gpu_check
                                                      : kda::harness::HostWork::inputs_only,
                                                  flags.verify && raw));
    }
  } catch (const kda::harness::HostMemoryError& e) {
    say(e.what());
    return kExitUsage;
  }

  if (const auto why = kda::app::missing_gpu()) {
    std::cerr << "kda-gbench " << *why << "\n";
    return kExitDevice;
  }
  kda::app::DeviceInfo info;
  try {
    info = kda::app::select_device(flags.device);
    runner.context = std::make_unique<Context>(flags, info);
  } catch (const kda::Error& e) {
    say(e.what());
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
  benchmark::AddCustomContext("shapes_file", flags.shapes);
  benchmark::AddCustomContext("variant", kda::app::variant_named(flags.variant).name);
  benchmark::AddCustomContext("timer", "CUDA events around each call, synchronized "
                                       "(UseManualTime; includes the first kernel's launch "
                                       "latency)");
  benchmark::AddCustomContext("l2_flush", flags.cold
                                              ? "max(2 x L2, 256 MiB) memset per iteration"
                                              : "none (warm)");
  benchmark::AddCustomContext("seed", std::to_string(flags.seed));
  benchmark::AddCustomContext("floor_bandwidth_Bps",
                              fmt::format("{}", kda::bench::kDefaultFloorBandwidth));
  benchmark::AddCustomContext(
      "verified", flags.verify ? "yes: each path against the CPU float64 reference before timing "
                                 "(a failure is a benchmark error)"
                               : "no (--no-verify)");

  const size_t matched = benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  runner.context.reset();
  if (!out->finish(matched > 0)) return kExitUsage;
  if (matched == 0) return kExitUsage;  // Google Benchmark said what did not match
  if (runner.cuda_errors > 0) return kExitDevice;
  if (runner.out_of_memory > 0) return kExitUsage;
  return runner.failed > 0 ? kExitFailed : kExitOk;
}
