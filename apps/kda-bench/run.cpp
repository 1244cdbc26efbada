// The timing run of kda-bench: device, inputs, verification, the measurement of every
// (shape, path[, stage], mode) row, and the reports.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <map>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/device_check.h"
#include "common/device_problem.h"
#include "kda/bench/bytes_model.h"
#include "kda/bench/compare.h"
#include "kda/bench/gpu_timing.h"
#include "kda/bench/json_report.h"
#include "kda/bench/results.h"
#include "kda/build_info.h"
#include "kda/harness/host_memory.h"
#include "kda/harness/inputs.h"
#include "kda/harness/report.h"
#include "kda/kda.h"
#include "options.h"

namespace kda::bench::app {

namespace {

using kda::bench::gpu::Mode;
using kda::harness::Verdict;

struct Checked {
  Verdict verdict = Verdict::not_verified;
  std::string detail;
};

std::string utc_now(const char* format) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buffer[64];
  std::strftime(buffer, sizeof buffer, format, &tm);
  return buffer;
}

RunContext make_context(const Options& o, const kda::app::DeviceInfo& info) {
  RunContext ctx;
  ctx.utc_time = utc_now("%Y-%m-%dT%H:%M:%SZ");
  ctx.git_commit = kda::build::git_commit;
  ctx.build_flags = kda::build::flags;
  ctx.run_id = utc_now("%Y%m%dT%H%M%SZ") + "-" + ctx.git_commit.substr(0, 12);
  ctx.device_index = info.index;
  ctx.device_name = info.name;
  ctx.cc = fmt::format("{}.{}", info.cc_major, info.cc_minor);
  ctx.sm_count = info.sm_count;
  ctx.l2_bytes = info.l2_bytes;
  ctx.global_mem_bytes = info.global_mem_bytes;
  ctx.default_sm_clock_hz = info.default_sm_clock_khz * 1e3;
  ctx.peak_mem_bw_Bps = info.peak_mem_bw_Bps;
  ctx.driver_version = info.driver_version;
  ctx.runtime_version = info.runtime_version;
  ctx.ecc = info.ecc;
  ctx.seed = o.seed;
  ctx.variant = kda::app::variant_named(o.variant).name;
  ctx.floor_bw_Bps = o.floor_bw_Bps;
  ctx.shapes_file = o.shapes_file;
  ctx.argv = o.argv;
  ctx.stopping = o.measure.stopping;
  ctx.throttle = o.measure.throttle;
  ctx.warmup_runs = o.measure.warmup_runs;
  ctx.cooldown_s = o.cooldown_s;
  return ctx;
}

nlohmann::json device_json(const kda::app::DeviceInfo& info) {
  return {{"index", info.index},
          {"name", info.name},
          {"cc", fmt::format("{}.{}", info.cc_major, info.cc_minor)},
          {"sm_count", info.sm_count},
          {"l2_bytes", info.l2_bytes},
          {"global_mem_bytes", info.global_mem_bytes},
          {"default_sm_clock_hz", info.default_sm_clock_khz * 1e3},
          {"mem_clock_hz", info.mem_clock_khz * 1e3},
          {"mem_bus_width_bits", info.mem_bus_width_bits},
          {"peak_mem_bw_Bps", info.peak_mem_bw_Bps},
          {"driver_version", info.driver_version},
          {"runtime_version", info.runtime_version},
          {"ecc", info.ecc}};
}

nlohmann::json settings_json(const Options& o, int64_t flush_bytes) {
  const auto& s = o.measure.stopping;
  const auto& t = o.measure.throttle;
  return {{"paths", o.paths},
          {"modes", o.modes},
          {"only", o.only},
          {"stages", o.stages},
          {"verify", o.verify},
          {"min_samples", s.min_samples},
          {"min_time_s", s.min_time_s},
          {"max_noise", s.max_noise},
          {"timeout_s", s.timeout_s},
          {"warmup_runs", o.measure.warmup_runs},
          {"batch_target_s", o.measure.sampling.batch_target_s},
          {"max_batch", o.measure.sampling.max_batch},
          {"min_sample_s", o.measure.sampling.min_sample_s},
          {"max_calls_per_sample", o.measure.sampling.max_calls},
          {"throttle_threshold", t.threshold},
          {"throttle_recovery_s", t.recovery_delay_s},
          {"cooldown_s", o.cooldown_s},
          {"cold_flush_bytes", flush_bytes},
          {"triton_flush_bytes", kda::bench::gpu::kTritonFlushBytes},
          {"triton_warmup_ms", o.measure.triton_warmup_ms},
          {"triton_rep_ms", o.measure.triton_rep_ms},
          {"floor_bandwidth_Bps", o.floor_bw_Bps},
          {"same_within", o.same_within},
          {"baseline", o.baseline_file}};
}

}  // namespace

int run_benchmarks(const Options& o) {
  std::vector<kda::harness::ShapeSpec> shapes;
  if (int rc = load_selected_shapes(o, &shapes); rc != kExitOk) return rc;
  if (int rc = refuse_existing_outputs(o); rc != kExitOk) return rc;

  std::optional<TimingTable> baseline;
  if (!o.baseline_file.empty()) {
    try {
      baseline = read_timing_table(o.baseline_file);
    } catch (const CompareError& e) {
      return fail(kExitUsage, std::string("--baseline: ") + e.what());
    }
  }
  // Paths and modes in the order given, each once (CLI11 already refused unknown names).
  std::vector<Path> paths;
  for (const auto& name : o.paths) {
    const auto p = kda::harness::parse_path(name);
    if (p && std::find(paths.begin(), paths.end(), *p) == paths.end()) paths.push_back(*p);
  }
  // The raw path is verified against references of its own (main refused a variant without it).
  const bool raw_path = std::find(paths.begin(), paths.end(), Path::raw) != paths.end();

  // Every shape must fit in the host's memory (one at a time): refuse before looking for a GPU,
  // like every other check of the input.
  try {
    for (const auto& shape : shapes) {
      if (!shape.gpu_supported()) continue;  // skipped: nothing is generated
      kda::harness::require_host_memory(
          shape.id, kda::harness::host_footprint(ProblemSize::of(shape),
                                                 o.verify ? kda::harness::HostWork::gpu_check
                                                          : kda::harness::HostWork::inputs_only,
                                                 o.verify && raw_path));
    }
  } catch (const kda::harness::HostMemoryError& e) {
    return fail(kExitUsage, e.what());
  }
  std::vector<Mode> modes;
  for (const auto& name : o.modes) {
    const auto m = kda::bench::gpu::parse_mode(name);
    if (m && std::find(modes.begin(), modes.end(), *m) == modes.end()) modes.push_back(*m);
  }

  if (const auto why = kda::app::missing_gpu()) {
    std::cerr << "kda-bench " << *why << "\n";
    return kExitDevice;
  }
  kda::app::DeviceInfo info;
  try {
    info = kda::app::select_device(o.device);
  } catch (const kda::Error& e) {
    return fail(kExitDevice, e.what());  // no such device, or not an sm_90 one: no usable GPU
  }
  RunContext ctx = make_context(o, info);

  auto progress = [&](const std::string& line) {
    if (!o.quiet) std::cerr << line << "\n" << std::flush;
  };
  auto warn = [&](const std::string& line) { std::cerr << "warning: " << line << "\n" << std::flush; };

  const int stage_count = o.stages ? kda::forward_stage_count() : 0;
  int64_t rows_per_shape = 0;
  for (Path p : paths) rows_per_shape += 1 + (p == Path::l2norm ? 0 : stage_count);
  int64_t total_rows = rows_per_shape * static_cast<int64_t>(modes.size()) *
                       static_cast<int64_t>(shapes.size());

  std::vector<RunRow> rows;
  int verify_failed = 0, shapes_skipped = 0;
  std::string current_shape;  // for an out-of-memory message
  try {
    if (!o.blocking_kernel) {
      warn(std::string("timed work is not queued behind the blocking kernel (") +
           (std::getenv("CUDA_INJECTION64_PATH") != nullptr ? "a CUDA injection tool is attached"
                                                           : "--no-blocking-kernel") +
           "): launch latency may reach the first samples of a batch; fine for profiling, not "
           "for timings to compare");
    }
    kda::bench::gpu::Bench bench(warn, o.blocking_kernel);
    ctx.flush_bytes = bench.flush_bytes();
    const cudaStream_t stream = bench.stream();
    // Every shape must fit in what is left beside the bench's own buffers: refuse before
    // generating or allocating anything (each shape is allocated alone, then freed).
    for (const auto& shape : shapes) {
      if (shape.gpu_supported()) {
        kda::app::require_device_memory(shape.id,
                                        kda::app::device_footprint(ProblemSize::of(shape)), info);
      }
    }
    progress(fmt::format("kda-bench: {} on device {} ({}, {} SMs, default SM clock {:.0f} MHz); "
                         "{} shapes x {} paths x {} modes{}",
                         ctx.git_commit, info.index, info.name, info.sm_count,
                         ctx.default_sm_clock_hz / 1e6, shapes.size(), paths.size(),
                         modes.size(), o.stages ? " (+ stages)" : ""));

    for (size_t si = 0; si < shapes.size(); ++si) {
      const auto& shape = shapes[si];
      current_shape = shape.id;
      if (!shape.gpu_supported()) {
        warn(fmt::format("{}: skipped: K = {}, V = {}; the GPU kernels support K = V = 128",
                         shape.id, shape.key_dim, shape.value_dim));
        ++shapes_skipped;
        continue;
      }
      const uint64_t seed = shape.seed.value_or(o.seed);
      const kda::harness::HostInputs inputs = kda::harness::make_inputs(shape, seed);
      // Checked for every shape before the run; again here in case the free memory shrank.
      kda::app::require_device_memory(shape.id,
                                      kda::app::device_footprint(ProblemSize::of(shape)), info);
      kda::app::DeviceProblem problem(inputs);
      problem.set_variant(kda::app::variant_named(o.variant));

      // Verify every path on this problem before timing it (same buffers, same calls).
      std::map<Path, Checked> verdicts;
      if (o.verify) {
        const auto t0 = std::chrono::steady_clock::now();
        progress(fmt::format("[shape {}/{}] {}: computing the CPU reference and verifying",
                             si + 1, shapes.size(), shape.id));
        const kda::app::Golden golden = kda::harness::compute_golden(inputs);
        std::optional<kda::app::Golden> raw_golden;
        if (raw_path) raw_golden = kda::harness::compute_raw_golden(inputs);
        for (Path p : paths) {
          const kda::app::PathCheck check = kda::app::check_path(
              problem, p, p == Path::raw ? *raw_golden : golden, stream, false);
          Checked v;
          v.verdict = check.passed() ? Verdict::passed : Verdict::failed;
          v.detail = check.verdict();
          if (!check.passed()) {
            ++verify_failed;
            warn(fmt::format("{} {}: verification {}", shape.id, kda::harness::to_string(p),
                             v.detail));
          }
          verdicts[p] = v;
        }
        progress(fmt::format("[shape {}/{}] {}: verified in {:.1f} s", si + 1, shapes.size(),
                             shape.id,
                             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
                                 .count()));
      }

      const ProblemSize size = ProblemSize::of(shape);
      auto measure_row = [&](Path path, int stage, Mode mode,
                             const kda::bench::gpu::Launcher& launch) {
        RunRow row;
        row.shape_id = shape.id;
        row.gate = shape.gate.label();
        row.size = size;
        row.path = path;
        row.stage = stage < 0 ? "" : kda::forward_stage_name(stage);
        row.mode = kda::bench::gpu::to_string(mode);
        row.seed = seed;
        if (auto it = verdicts.find(path); it != verdicts.end()) {
          row.verdict = it->second.verdict;
          row.verdict_detail = it->second.detail;
        }
        kda::bench::gpu::MeasureConfig config = o.measure;
        config.mode = mode;
        const kda::bench::gpu::Measurement m = bench.measure(launch, config);
        row.gpu_s = m.gpu_s;
        row.cpu_s = m.cpu_s;
        row.clock_hz = m.clock_hz;
        row.warmup_runs = m.warmup_runs;
        row.calls_per_sample = m.calls_per_sample;
        row.sample_method = kda::bench::to_string(m.sample_method);
        row.stop = m.stop;
        row.throttle_discards = m.throttle_discards;
        row.rejected_samples = m.rejected_samples;
        row.wall_s = m.wall_s;
        if (stage < 0) {
          row.bytes = path_bytes(size, path);
          row.floor_bytes = floor_bytes(size, path);
        }
        row.workspace_bytes = path == Path::l2norm ? 0 : static_cast<int64_t>(problem.workspace_bytes());
        row.finalize();
        progress(fmt::format(
            "[{}/{}] {} {}{} {}: median {} us (p20 {}, p80 {}), noise {}, {} samples{} in "
            "{:.2f} s{}{}",
            rows.size() + 1, total_rows, row.shape_id, kda::harness::to_string(row.path),
            row.stage.empty() ? "" : ":" + row.stage, row.mode,
            human_number(row.gpu.median, Unit::seconds), human_number(row.gpu.p20, Unit::seconds),
            human_number(row.gpu.p80, Unit::seconds), percent_text(row.gpu.noise), row.gpu.n,
            row.calls_per_sample > 1
                ? fmt::format(" of {} calls ({})", row.calls_per_sample, row.sample_method)
                : "",
            row.wall_s, row.converged() ? "" : fmt::format(" — did not converge ({})", to_string(row.stop)),
            row.throttle_discards ? fmt::format(", {} throttled samples discarded",
                                                row.throttle_discards)
                                  : ""));
        rows.push_back(std::move(row));
        if (o.cooldown_s > 0.0)
          std::this_thread::sleep_for(std::chrono::duration<double>(o.cooldown_s));
      };

      for (Path path : paths) {
        for (Mode mode : modes) {
          measure_row(path, -1, mode, [&](cudaStream_t s) { problem.enqueue(path, s); });
        }
        if (path == Path::l2norm || stage_count == 0) continue;
        // The stages read what the previous stages (and, for explicit, the l2norm pass) left in
        // q_hat and the workspace: run the whole path once so they hold this path's data.
        problem.enqueue(path, stream);
        kda::app::check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
        for (int stage = 0; stage < stage_count; ++stage) {
          const kda::bench::gpu::Launcher call = [&](cudaStream_t s) {
            problem.enqueue_stage(path, stage, s);
          };
          // A stage the call's kernel choice does not run launches nothing: no rows (timing it
          // would time empty graphs for ~1.5 s a mode), a line in the report instead.
          if (!kda::bench::gpu::launches_work(call, stream)) {
            const std::string name = fmt::format("{} {}:{}", shape.id,
                                                 kda::harness::to_string(path),
                                                 kda::forward_stage_name(stage));
            progress(fmt::format("{}: not run by this call's kernels, no rows", name));
            ctx.stages_not_run.push_back(name);
            total_rows -= static_cast<int64_t>(modes.size());
            continue;
          }
          for (Mode mode : modes) measure_row(path, stage, mode, call);
        }
      }
    }
  } catch (const kda::app::DeviceMemoryError& e) {
    return fail(kExitUsage, e.what());
  } catch (const kda::Error& e) {
    return fail(e.code() == kda::ErrorCode::cuda ? kExitDevice : kExitFailed, e.what());
  } catch (const std::bad_alloc&) {
    return fail(kExitUsage, kda::harness::out_of_host_memory(
                                "while running shape '" + current_shape + "'"));
  } catch (const std::exception& e) {
    return fail(kExitFailed, e.what());
  }

  const RunSummary summary = summarize_run(rows);
  std::string md = results_markdown(ctx, rows, summary);

  int rc = kExitOk;
  std::optional<CompareReport> compare;
  if (baseline) {
    CompareConfig cfg;
    cfg.min_threshold = o.same_within;
    try {
      const TimingTable current = timing_table(results_table(ctx, rows, false), "this run");
      compare = compare_tables(*baseline, current, cfg);
      md += "\n" + compare_markdown(*compare, o.baseline_file, "this run", cfg);
    } catch (const CompareError& e) {
      rc = fail(kExitUsage, std::string("--baseline: ") + e.what());
    }
  }
  std::cout << md << std::flush;

  try {
    if (!o.md_file.empty()) kda::harness::write_text_file_atomic(o.md_file, md, o.force);
    if (!o.csv_file.empty())
      kda::harness::write_text_file_atomic(o.csv_file, results_csv(ctx, rows), o.force);
    if (!o.json_file.empty()) {
      const std::string json =
          results_json(ctx, device_json(info), settings_json(o, ctx.flush_bytes), rows, summary,
                       compare ? &*compare : nullptr);
      kda::harness::write_text_file_atomic(o.json_file, json, o.force);
    }
  } catch (const std::exception& e) {
    return fail(kExitUsage, e.what());
  }

  if (rc != kExitOk) return rc;
  if (verify_failed > 0 || shapes_skipped > 0) return kExitFailed;
  const bool all_converged =
      std::all_of(rows.begin(), rows.end(), [](const RunRow& r) { return r.converged(); });
  return all_converged ? kExitOk : kExitNotConverged;
}

}  // namespace kda::bench::app
