// kda-check: runs the fused, explicit and raw KDA forward paths (or the CPU references alone) on
// the shapes of a shape file and judges every output against the CPU float64 reference with the
// data-derived budget of kda-forward.md §9.4 (the raw path against the reference fed the raw
// inputs). Prints a markdown tolerance report with a verdict per row, writes CSV/JSON, exits
// non-zero on any failure.
//
// Exit codes: 0 every checked row passed; 1 a row failed; 2 bad usage or input (options, shape
// file, --load files, output path, a shape too big for the device's free memory); 3 no usable GPU
// (none, unknown --device, not sm_90) or a CUDA error. Messages: docs/errors.md.

#include <cuda_runtime_api.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/cli.h"
#include "common/device_check.h"
#include "common/device_problem.h"
#include "kda/build_info.h"
#include "kda/harness/budget.h"
#include "kda/harness/check_results.h"
#include "kda/harness/dump.h"
#include "kda/harness/host_memory.h"
#include "kda/harness/inputs.h"
#include "kda/harness/progress.h"
#include "kda/harness/report.h"
#include "kda/harness/shapes.h"
#include "kda/harness/verify.h"
#include "kda/kda.h"

namespace {

using kda::app::kExitDevice;
using kda::app::kExitFailed;
using kda::app::kExitUsage;
using kda::harness::CheckRow;
using kda::harness::Path;
using kda::harness::Verdict;

// A problem to check: from a shape file (generated inputs) or a --load directory.
struct Job {
  std::string id;
  uint64_t seed = 0;
  std::optional<kda::harness::ShapeSpec> shape;
  std::optional<kda::harness::HostInputs> loaded;
  kda::harness::ProblemSize size() const {
    return loaded ? kda::harness::ProblemSize::of(*loaded) : kda::harness::ProblemSize::of(*shape);
  }
};

// --- GPU backends ----------------------------------------------------------------------------

// Whether a path on the contract inputs (fused, explicit, l2norm) is checked: then the contract
// references are computed.
bool contract_paths_run(const std::vector<Path>& paths) {
  return std::any_of(paths.begin(), paths.end(), [](Path p) { return p != Path::raw; });
}

// Whether the raw path runs on these inputs with some variant: it needs raw inputs (a dump
// written before them has none) and a variant that takes them. Then its references are computed.
bool raw_path_runs(const std::vector<Path>& paths, bool has_raw_inputs,
                   const std::vector<const kda::app::Variant*>& variants) {
  if (std::find(paths.begin(), paths.end(), Path::raw) == paths.end() || !has_raw_inputs) {
    return false;
  }
  return std::any_of(variants.begin(), variants.end(), [](const kda::app::Variant* v) {
    return !kda::app::unsupported_by_variant(Path::raw, *v).has_value();
  });
}

// Runs each path of each variant on the device; the judging and the rows are the harness's
// (kda/harness/verify.h).
void check_gpu(const Job& job, const kda::harness::HostInputs& inputs,
               const std::vector<Path>& paths,
               const std::vector<const kda::app::Variant*>& variants,
               const kda::app::DeviceInfo& info, cudaStream_t stream,
               const kda::harness::BudgetRule& rule, std::vector<CheckRow>* rows,
               const std::string& dump_dir, double soak_seconds) {
  if (inputs.key_dim != kda::kHeadDim || inputs.value_dim != kda::kHeadDim) {
    rows->push_back(kda::harness::unsupported_dims_row(job.id, inputs));
    return;
  }
  // Checked for every job before the run starts; again here in case the free memory shrank.
  kda::app::require_device_memory(
      job.id, kda::app::device_footprint(kda::harness::ProblemSize::of(inputs)), info);

  // Each set of CPU references is computed only for the paths that use it (they are the slow
  // part of a check): the contract ones for fused, explicit and l2norm; the raw path is judged
  // against references fed the raw inputs, made only when some variant runs it.
  std::optional<kda::app::Golden> golden;
  if (contract_paths_run(paths)) {
    golden = kda::harness::compute_golden(inputs, rule, /*state_carry=*/true);
  }
  std::optional<kda::app::Golden> raw_golden;
  if (raw_path_runs(paths, inputs.has_raw_inputs(), variants)) {
    raw_golden = kda::harness::compute_raw_golden(inputs, rule, /*state_carry=*/true);
  }
  kda::app::DeviceProblem problem(inputs);
  const std::vector<int64_t> out_shape = {inputs.batch, inputs.tokens, inputs.heads,
                                          inputs.value_dim};
  const std::vector<int64_t> ht_shape = {inputs.num_states(), inputs.heads, inputs.key_dim,
                                         inputs.value_dim};

  for (size_t vi = 0; vi < variants.size(); ++vi) {
    const kda::app::Variant& variant = *variants[vi];
    const std::string vname = variant.name;
    // Suffix dumps with the variant only when several are checked.
    const std::string suffix = variants.size() > 1 ? "_" + vname : "";
    problem.set_variant(variant);
    std::map<Path, kda::app::PathCheck> checks;
    for (Path path : paths) {
      // The l2norm pass does not depend on the forward's variant: check it once.
      if (path == Path::l2norm && vi > 0) continue;
      if (path == Path::raw) {
        // Not run is neither passed nor failed: a "not verified" row that says why.
        if (!inputs.has_raw_inputs()) {
          if (vi == 0) {
            rows->push_back(kda::harness::path_not_run_row(job.id, inputs, path, "",
                                                           kda::harness::kNoRawInputs));
          }
          continue;
        }
        if (const auto why = kda::app::unsupported_by_variant(path, variant)) {
          rows->push_back(kda::harness::path_not_run_row(job.id, inputs, path, vname,
                                                         "unsupported by " + vname + ": " + *why));
          continue;
        }
      }
      const kda::app::Golden& reference = path == Path::raw ? *raw_golden : *golden;
      kda::app::PathCheck check =
          kda::app::check_path(problem, path, reference, stream, true, rule);
      const std::string name = kda::harness::to_string(path);
      for (CheckRow& row : kda::harness::path_rows(job.id, inputs, vname, reference, check)) {
        rows->push_back(std::move(row));
      }
      if (!dump_dir.empty()) {
        if (path == Path::l2norm) {
          kda::harness::dump_tensor(dump_dir, job.id, "q_hat_l2norm", check.out,
                                    {inputs.batch, inputs.tokens, inputs.heads, inputs.key_dim});
        } else {
          kda::harness::dump_tensor(dump_dir, job.id, "out_" + name + suffix, check.out,
                                    out_shape);
          if (check.final_state_checked) {
            kda::harness::dump_tensor(dump_dir, job.id, "ht_" + name + suffix, check.final_state,
                                      ht_shape);
          }
        }
      }
      if (soak_seconds > 0.0) {
        const kda::app::SoakResult soak =
            kda::app::soak_path(problem, path, check, stream, soak_seconds);
        rows->push_back(kda::harness::soak_row(job.id, path, vname, soak));
      }
      checks.emplace(path, std::move(check));
    }
    if (checks.count(Path::fused) && checks.count(Path::explicit_)) {
      rows->push_back(kda::harness::fused_vs_explicit_row(
          job.id, inputs, vname, *golden, checks.at(Path::fused), checks.at(Path::explicit_),
          rule));
    }
  }
  if (!dump_dir.empty()) {
    if (golden) {
      kda::harness::dump_tensor(dump_dir, job.id, "out_reference", golden->out, out_shape);
      kda::harness::dump_tensor(dump_dir, job.id, "out_reference_f32", golden->out_low,
                                out_shape);
      if (inputs.want_final_state) {
        kda::harness::dump_tensor(dump_dir, job.id, "ht_reference", golden->final_state,
                                  ht_shape);
      }
    }
    if (raw_golden) {
      kda::harness::dump_tensor(dump_dir, job.id, "out_reference_raw", raw_golden->out,
                                out_shape);
      kda::harness::dump_tensor(dump_dir, job.id, "out_reference_raw_f32", raw_golden->out_low,
                                out_shape);
      if (inputs.want_final_state) {
        kda::harness::dump_tensor(dump_dir, job.id, "ht_reference_raw", raw_golden->final_state,
                                  ht_shape);
      }
    }
  }
}

// A call the library must refuse with ErrorCode::invalid_argument (checked on real params, once
// per run): `accepted` says what went wrong when it ran instead.
CheckRow expect_invalid_argument(const std::string& path, const std::string& tensor,
                                 const kda::ForwardParams& params, const std::string& accepted) {
  CheckRow row;
  row.shape = "(api)";
  row.path = path;
  row.tensor = tensor;
  try {
    kda::chunk_forward(params, nullptr);
    kda::app::check_cuda(cudaDeviceSynchronize(), ("the " + path + " forward: " + tensor).c_str());
    row.verdict = Verdict::failed;
    row.reason = accepted;
  } catch (const kda::Error& e) {
    const bool right_kind = e.code() == kda::ErrorCode::invalid_argument;
    row.verdict = right_kind ? Verdict::passed : Verdict::failed;
    row.reason = right_kind ? "" : std::string("wrong error kind: ") + e.what();
  }
  return row;
}

// The refusals of the contract, checked once per run: the fused path refuses non-bf16 q (review
// point (a)); with the raw path, a lower bound outside [-5.915, 0] (and NaN) is refused, as the
// bounded-gate contract needs (kda-forward.md §3.1).
std::vector<CheckRow> api_rows(const kda::harness::HostInputs& inputs, bool raw) {
  kda::app::DeviceProblem problem(inputs);
  std::vector<CheckRow> rows;
  kda::ForwardParams f32_q = problem.forward_params(Path::fused);
  f32_q.q_dtype = kda::DType::f32;
  rows.push_back(expect_invalid_argument("fused", "q dtype f32 refused", f32_q,
                                         "chunk_forward accepted f32 q with fuse_q_l2norm"));
  if (raw) {
    for (const float bound : {-6.0f, 0.5f, std::numeric_limits<float>::quiet_NaN()}) {
      kda::ForwardParams params = problem.forward_params(Path::raw);
      params.lower_bound = bound;
      rows.push_back(expect_invalid_argument(
          "raw", fmt::format("lower_bound {} refused", bound), params,
          fmt::format("chunk_forward accepted the raw gate's lower_bound {}", bound)));
    }
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "kda-check: judge the KDA forward (fused and explicit q-normalization paths, and the raw "
      "inputs engines pass) against the CPU float64 reference with data-derived error budgets"};
  std::vector<std::string> shape_files;
  std::vector<std::string> only;
  std::string backend = "gpu";
  uint64_t seed = kda::harness::kDefaultSeed;
  std::string md_file, csv_file, json_file, dump_dir, load_dir;
  int device = 0;
  bool force = false;
  std::vector<std::string> variant_names = {kda::lab::shipping_variant().name};
  app.add_option("--shapes", shape_files, "Shape file(s) (default: shapes/contract.yaml)")
      ->check(CLI::ExistingFile);
  app.add_option("--only", only, "Check only these shape ids (comma- or space-separated)")
      ->delimiter(',');
  app.add_option("--backend", backend,
                 "gpu (fused, explicit, the l2norm pass and raw), fused, explicit, raw (the "
                 "forward on raw k, gate and beta logits, as engines call it), or reference (CPU "
                 "only: chunked references vs the float64 recurrence)")
      ->check(CLI::IsMember({"gpu", "fused", "explicit", "raw", "reference"}));
  app.add_option("--seed", seed, "Input seed (a shape's own seed: wins)")
      ->transform(kda::app::seed_transform());
  app.add_option("--md", md_file, "Write the markdown report to FILE")
      ->check(kda::app::non_empty_path());
  app.add_option("--csv", csv_file, "Write the report as CSV to FILE")
      ->check(kda::app::non_empty_path());
  app.add_option("--json", json_file, "Write the report and metadata as JSON to FILE")
      ->check(kda::app::non_empty_path());
  app.add_option("--dump", dump_dir,
                 "Write inputs and outputs as .npy under DIR/<id>/ (DIR empty or new, unless "
                 "--force)")
      ->check(kda::app::non_empty_path());
  app.add_option("--load", load_dir, "Run on .npy inputs from DIR (written by --dump)")
      ->check(kda::app::non_empty_path());
  app.add_option("--device", device, "CUDA device index")->check(CLI::Range(0, 1 << 16));
  app.add_option("--variant", variant_names,
                 "Kernel variant(s) of the forward to check against the same references: the "
                 "lab's ladder (lab/README.md) or the library's, v2w_mma (the default)")
      ->check(CLI::IsMember(kda::lab::variant_names()));
  app.add_flag("--force", force,
               "Overwrite existing report files; --dump into a non-empty DIR (each problem "
               "directory written is emptied of the files a dump writes first)");
  kda::harness::BudgetRule rule;
  app.add_option("--rms-limit", rule.rms_limit,
                 "Relative RMS error gate of every judged row (default 5e-3, kda-forward.md "
                 "§9.4); a tighter gate such as 4e-3 makes the margin a check")
      ->check(kda::app::finite(CLI::Range(1e-12, 1.0)));
  double soak_seconds = 0.0;
  app.add_option("--soak", soak_seconds,
                 "After each GPU path's check, re-run it for SECONDS of wall time on NaN-poisoned "
                 "outputs and require every run to be bitwise equal to the checked one (a "
                 "'soak' row per shape and path)")
      ->check(kda::app::finite(CLI::Range(0.0, 86400.0)));
  app.set_version_flag("--version", std::string("kda-check ") + kda::build::git_commit + " (" +
                                        kda::build::flags + ")");
  app.footer(
      "Exit codes: 0 all passed, 1 a check failed, 2 bad usage or input, 3 no usable GPU or a "
      "CUDA error.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }
  // Options that contradict each other, or that the chosen backend would silently ignore.
  // Every message goes through escape_controls: ids, paths and file contents in it come from
  // the user.
  auto usage_error = [](const std::string& message) {
    std::cerr << "kda-check: " << kda::harness::escape_controls(message) << "\n";
    return kExitUsage;
  };
  if (!load_dir.empty() && !shape_files.empty()) {
    return usage_error("--load and --shapes are exclusive: --load runs on the dumped inputs");
  }
  if (!load_dir.empty() && app.count("--seed") > 0) {
    return usage_error("--seed has no effect with --load: the inputs come from " + load_dir);
  }
  if (backend == "reference") {
    for (const char* gpu_only : {"--variant", "--device", "--soak"}) {
      if (app.count(gpu_only) > 0) {
        return usage_error(std::string(gpu_only) +
                           " applies to the GPU backends; --backend reference runs no kernel");
      }
    }
  }
  if (!load_dir.empty() && !dump_dir.empty()) {
    // --dump writes DIR/<id>/q.npy ...; --load reads DIR/<id>/q.npy (or DIR/q.npy): the same
    // directory, or the parent of a single problem's directory, would replace the inputs being
    // checked.
    auto absolute = [](const std::string& dir) {
      std::error_code ec;
      std::filesystem::path path = std::filesystem::weakly_canonical(dir, ec);
      if (ec) path = std::filesystem::absolute(dir).lexically_normal();
      return path.has_filename() ? path : path.parent_path();  // "dir/" -> "dir"
    };
    const std::filesystem::path load_path = absolute(load_dir), dump_path = absolute(dump_dir);
    if (dump_path == load_path || dump_path == load_path.parent_path()) {
      return usage_error("--dump " + dump_dir + " would write into the --load directory " +
                         load_dir + " (replacing the inputs being checked); dump elsewhere");
    }
  }
  if (shape_files.empty() && load_dir.empty()) shape_files.push_back("shapes/contract.yaml");

  // Refuse unwritable or existing report files, and a dump directory holding other files,
  // before doing any work.
  try {
    kda::harness::check_output_files({md_file, csv_file, json_file}, force);
    if (!dump_dir.empty()) kda::harness::check_dump_dir(dump_dir, force);
  } catch (const std::runtime_error& e) {  // OutputError, DumpError
    return usage_error(e.what());
  }

  std::vector<Job> jobs;
  try {
    if (!load_dir.empty()) {
      for (auto& loaded : kda::harness::load_problems(load_dir)) {
        Job job;
        job.id = loaded.id;
        job.seed = loaded.seed;
        job.loaded = std::move(loaded.inputs);
        jobs.push_back(std::move(job));
      }
    } else {
      for (const std::string& file : shape_files) {
        const auto parsed = kda::harness::load_shape_file(file);
        for (const auto& shape : parsed.shapes) {
          Job job;
          job.id = shape.id;
          job.seed = shape.seed.value_or(seed);
          job.shape = shape;
          jobs.push_back(std::move(job));
        }
      }
    }
  } catch (const std::bad_alloc&) {
    return usage_error(kda::harness::out_of_host_memory("while reading --load " + load_dir));
  } catch (const std::exception& e) {
    return usage_error(e.what());
  }
  {
    const std::string source =
        load_dir.empty() ? fmt::format("{}", fmt::join(shape_files, ", ")) : "--load " + load_dir;
    if (const auto refusal =
            kda::app::select_only(&jobs, only, source, [](const Job& j) { return j.id; })) {
      return usage_error(*refusal);
    }
  }
  if (!dump_dir.empty()) {
    // Each problem is dumped to DIR/<id>/: a second shape of the same id would replace it.
    std::set<std::string> ids;
    for (const Job& j : jobs) {
      if (!ids.insert(j.id).second) {
        return usage_error("--dump: two shapes have the id '" + j.id +
                           "' (one per shape file given); they would share DIR/" + j.id +
                           "/: pick one with --only, or dump each file apart");
      }
    }
  }

  const bool gpu = backend != "reference";
  std::vector<const kda::app::Variant*> variants;
  for (const std::string& name : variant_names) {
    variants.push_back(&kda::app::variant_named(name));  // a member: checked by the option
  }
  std::vector<Path> paths;
  if (backend == "gpu") paths = {Path::fused, Path::explicit_, Path::l2norm, Path::raw};
  if (backend == "fused") paths = {Path::fused};
  if (backend == "explicit") paths = {Path::explicit_, Path::l2norm};
  if (backend == "raw") paths = {Path::raw};
  // Every problem must fit in the host's memory (one at a time; loaded inputs are in memory
  // already): refuse before generating anything.
  try {
    for (const Job& job : jobs) {
      const kda::harness::ProblemSize dims = job.size();
      // The GPU backends compute no reference for dims the kernels do not take.
      const bool kernels_run = dims.key_dim == kda::kHeadDim && dims.value_dim == kda::kHeadDim;
      kda::harness::HostFootprint need = kda::harness::host_footprint(
          dims,
          !gpu          ? kda::harness::HostWork::reference
          : kernels_run ? kda::harness::HostWork::gpu_check
                        : kda::harness::HostWork::inputs_only,
          gpu && kernels_run && raw_path_runs(paths, dims.raw_inputs, variants));
      need.inputs_loaded = job.loaded.has_value();
      kda::harness::require_host_memory(job.id, need);
    }
  } catch (const kda::harness::HostMemoryError& e) {
    return usage_error(e.what());
  }

  kda::app::DeviceInfo info;
  cudaStream_t stream = nullptr;
  if (gpu) {
    try {
      info = kda::app::select_device(device);
      kda::app::check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                           "cudaStreamCreate");
    } catch (const kda::Error& e) {
      std::cerr << "kda-check: backend '" << backend << "': " << e.what()
                << "\n(use --backend reference to check the CPU references without a GPU)\n";
      return kExitDevice;
    }
    // Every problem must fit in the device's free memory: refuse before allocating anything.
    try {
      for (const Job& job : jobs) {
        const kda::app::DeviceFootprint need = kda::app::device_footprint(job.size());
        if (need.workspace == 0) continue;  // K or V != 128: not run on the GPU
        kda::app::require_device_memory(job.id, need, info);
      }
    } catch (const kda::app::DeviceMemoryError& e) {
      return usage_error(e.what());
    } catch (const kda::Error& e) {
      std::cerr << "kda-check: " << e.what() << "\n";
      return e.code() == kda::ErrorCode::cuda ? kExitDevice : kExitUsage;
    }
  }

  // Progress on long runs: a start line (and the run's ETA) before each shape whose CPU
  // references are expected to take more than a few seconds (kda/harness/progress.h).
  std::vector<kda::harness::ReferenceLoad> loads;
  std::vector<double> works;
  for (const Job& job : jobs) {
    loads.push_back(job.loaded ? kda::harness::reference_load(*job.loaded, omp_get_max_threads())
                               : kda::harness::reference_load(*job.shape, omp_get_max_threads()));
    const bool verified = job.loaded ? (job.loaded->key_dim == kda::kHeadDim &&
                                        job.loaded->value_dim == kda::kHeadDim)
                                     : job.shape->gpu_supported();
    // Each set of references (contract, raw) costs about the same.
    const double sets = !gpu ? 1.0
                             : (contract_paths_run(paths) ? 1.0 : 0.0) +
                                   (raw_path_runs(paths, job.size().raw_inputs, variants) ? 1.0
                                                                                          : 0.0);
    works.push_back(gpu && !verified ? 0.0 : loads.back().work * sets);
  }
  kda::harness::ReferenceEta eta(gpu ? kda::harness::kGoldenSecondsPerWork
                                     : kda::harness::kReferenceSecondsPerWork);

  std::vector<CheckRow> rows;
  const auto run_start = std::chrono::steady_clock::now();
  std::string current;  // the job being checked, for an out-of-memory message
  try {
    for (size_t i = 0; i < jobs.size(); ++i) {
      const Job& job = jobs[i];
      current = job.id;
      if (const auto line = kda::harness::reference_start_line(
              i, jobs.size(), job.id, loads[i].token_heads, eta.estimate(works[i]),
              eta.remaining(works, i))) {
        std::cerr << *line << "\n";
      }
      const auto t0 = std::chrono::steady_clock::now();
      const kda::harness::HostInputs inputs =
          job.loaded ? *job.loaded : kda::harness::make_inputs(*job.shape, job.seed);
      if (!dump_dir.empty()) kda::harness::dump_inputs(dump_dir, job.id, job.seed, inputs);
      const size_t before = rows.size();
      if (gpu) {
        if (i == 0 && inputs.key_dim == kda::kHeadDim && inputs.value_dim == kda::kHeadDim) {
          const bool raw = std::find(paths.begin(), paths.end(), Path::raw) != paths.end() &&
                           inputs.has_raw_inputs();
          for (CheckRow& row : api_rows(inputs, raw)) rows.push_back(std::move(row));
        }
        check_gpu(job, inputs, paths, variants, info, stream, rule, &rows, dump_dir, soak_seconds);
      } else {
        for (CheckRow& row : kda::harness::check_references(job.id, inputs, rule, dump_dir)) {
          rows.push_back(std::move(row));
        }
      }
      int failed = 0;
      for (size_t r = before; r < rows.size(); ++r) failed += rows[r].failed() ? 1 : 0;
      const double job_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      eta.record(works[i], job_seconds);
      std::cerr << fmt::format("[{}/{}] {}: {} rows, {} failed ({:.1f} s)\n", i + 1,
                               jobs.size(), job.id, rows.size() - before, failed, job_seconds);
    }
  } catch (const kda::Error& e) {
    std::cerr << "kda-check: " << e.what() << "\n";
    return e.code() == kda::ErrorCode::cuda ? kExitDevice : kExitFailed;
  } catch (const std::bad_alloc&) {
    return usage_error(
        kda::harness::out_of_host_memory("while checking shape '" + current + "'"));
  } catch (const std::exception& e) {
    return usage_error(e.what());
  }
  const double total_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();

  kda::harness::CheckContext ctx;
  ctx.backend = backend;
  ctx.git_commit = kda::build::git_commit;
  ctx.build_flags = kda::build::flags;
  ctx.seed = seed;
  ctx.rms_limit = rule.rms_limit;
  if (gpu) {
    ctx.variants = variant_names;
    ctx.device = info;
  }
  ctx.load_dir = load_dir;
  ctx.argv.assign(argv, argv + argc);
  const std::string md = kda::harness::check_markdown(ctx, rows, total_seconds);
  std::cout << md << std::flush;

  try {
    if (!md_file.empty()) kda::harness::write_text_file_atomic(md_file, md, force);
    if (!csv_file.empty()) {
      kda::harness::write_text_file_atomic(csv_file, kda::harness::check_csv(rows), force);
    }
    if (!json_file.empty()) {
      kda::harness::write_text_file_atomic(json_file, kda::harness::check_json(ctx, rows), force);
    }
  } catch (const std::exception& e) {
    return usage_error(e.what());
  }
  if (stream) cudaStreamDestroy(stream);
  return kda::harness::count_verdicts(rows).failed > 0 ? kExitFailed : kda::app::kExitOk;
}
