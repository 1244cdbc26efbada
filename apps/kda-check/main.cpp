// kda-check: runs the fused and explicit KDA forward paths (or the CPU references alone) on the
// shapes of a shape file and judges every output against the CPU float64 reference with the
// data-derived budget of kda-forward.md §9.4. Prints a markdown tolerance report with a verdict
// per row, writes CSV/JSON, exits non-zero on any failure.
//
// Exit codes: 0 every checked row passed; 1 a row failed; 2 bad usage or input (options, shape
// file, --load files, output path, a shape too big for the device's free memory); 3 no usable GPU
// (none, unknown --device, not sm_90) or a CUDA error. Messages: docs/errors.md.

#include <cuda_runtime_api.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/cli.h"
#include "common/device_problem.h"
#include "common/json.h"
#include "common/verify.h"
#include "kda/build_info.h"
#include "kda/harness/budget.h"
#include "kda/harness/dump.h"
#include "kda/harness/host_memory.h"
#include "kda/harness/inputs.h"
#include "kda/harness/progress.h"
#include "kda/harness/report.h"
#include "kda/harness/shapes.h"
#include "kda/kda.h"
#include "kda/ref/reference.h"

// The --dump writer lives in lib/harness with the --load reader (one format, dump.h); the call
// sites keep the names they had in apps/kda-check.
namespace kda::app {
using kda::harness::dump_inputs;
using kda::harness::dump_tensor;
}  // namespace kda::app

namespace {

using kda::app::Path;
using kda::harness::Judgement;

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitDevice = 3;

// A problem to check: from a shape file (generated inputs) or a --load directory.
struct Job {
  std::string id;
  uint64_t seed = 0;
  std::optional<kda::harness::ShapeSpec> shape;
  std::optional<kda::harness::HostInputs> loaded;
};

// One line of the tolerance report.
struct Row {
  std::string shape, path, tensor;
  std::string gate = "-";   // the inputs' gate recipe (shapes/README.md), or "loaded"
  std::optional<kda::harness::StateCarry> carry;  // the shape's state-carry figure (output rows)
  std::string variant = "-";  // kernel variant of the forward (GPU rows)
  int64_t elements = 0;
  std::optional<Judgement> judgement;  // empty for rows that are not a tolerance check
  std::string repeat = "-";            // bitwise | differs | -
  int64_t inactive_nonzero = 0;
  double reference_seconds = 0.0;
  std::string verdict;
  bool failed() const { return verdict.rfind("failed", 0) == 0; }
};

std::string sci(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.3e}", v);
}

Row judgement_row(const std::string& shape, const std::string& path, const std::string& tensor,
                  const Judgement& j, const std::string& verdict) {
  Row row;
  row.shape = shape;
  row.path = path;
  row.tensor = tensor;
  row.elements = j.elements;
  row.judgement = j;
  row.verdict = verdict;
  return row;
}

// --- reference backend -----------------------------------------------------------------------
// The chunked float64 reference must agree with the float64 recurrence to 1e-12 relative; the
// float32 chunked reference is judged with the budget, its `low` being the float32 recurrence.
void check_reference(const Job& job, const kda::harness::HostInputs& inputs,
                     const kda::harness::BudgetRule& rule, std::vector<Row>* rows,
                     const std::string& dump_dir) {
  const auto start = std::chrono::steady_clock::now();
  const kda::ref::Problem problem = inputs.to_reference();
  kda::ref::Options options;
  options.final_state = inputs.want_final_state;
  const auto golden = kda::ref::recurrent_forward<double>(problem, options);
  const auto chunked = kda::ref::chunked_forward<double>(problem, options);
  const auto low = kda::ref::recurrent_forward<float>(problem, options);
  const auto chunked_f32 = kda::ref::chunked_forward<float>(problem, options);
  kda::ref::Options local_options = options;
  local_options.final_state = false;
  local_options.reset_state_at_chunk_starts = true;
  const auto local = kda::ref::recurrent_forward<double>(problem, local_options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  auto to_d = [](const auto& v) { return std::vector<double>(v.begin(), v.end()); };
  const kda::harness::StateCarry carry =
      kda::harness::judge_state_carry(golden.out, to_d(low.out), local.out, rule);
  auto add_f64 = [&](const std::string& tensor, const std::vector<double>& ref,
                     const std::vector<double>& got) {
    // Strict agreement: max |chunked - recurrent| <= 1e-12 * max |recurrent|.
    Judgement j = kda::harness::judge(ref, ref, got, {0.0, 1.0, 1.0});
    const double rel = j.max_golden > 0 ? j.max_abs_err / j.max_golden : j.max_abs_err;
    Row row = judgement_row(job.id, "ref-chunked-f64", tensor, j,
                            rel <= 1e-12 ? "passed"
                                         : "failed: relative difference " + sci(rel) + " > 1e-12");
    row.judgement->budget = 1e-12 * j.max_golden;
    row.reference_seconds = seconds;
    row.gate = inputs.gate_recipe;
    if (tensor == "out") row.carry = carry;
    rows->push_back(row);
  };
  auto add_f32 = [&](const std::string& tensor, const std::vector<double>& ref,
                     const std::vector<float>& low_values, const std::vector<float>& got) {
    const Judgement j = kda::harness::judge(ref, to_d(low_values), to_d(got), rule);
    Row row = judgement_row(job.id, "ref-chunked-f32", tensor, j, j.verdict());
    row.reference_seconds = seconds;
    row.gate = inputs.gate_recipe;
    if (tensor == "out") row.carry = carry;
    rows->push_back(row);
  };
  add_f64("out", golden.out, chunked.out);
  add_f32("out", golden.out, low.out, chunked_f32.out);
  if (inputs.want_final_state) {
    add_f64("final_state", golden.final_state, chunked.final_state);
    add_f32("final_state", golden.final_state, low.final_state, chunked_f32.final_state);
  }
  if (!dump_dir.empty()) {
    const std::vector<int64_t> out_shape = {inputs.batch, inputs.tokens, inputs.heads,
                                            inputs.value_dim};
    const std::vector<int64_t> ht_shape = {inputs.num_states(), inputs.heads, inputs.key_dim,
                                           inputs.value_dim};
    kda::app::dump_tensor(dump_dir, job.id, "out_reference", golden.out, out_shape);
    kda::app::dump_tensor(dump_dir, job.id, "out_reference_chunked_f32", chunked_f32.out,
                          out_shape);
    if (inputs.want_final_state) {
      kda::app::dump_tensor(dump_dir, job.id, "ht_reference", golden.final_state, ht_shape);
    }
  }
}

// --- GPU backends ----------------------------------------------------------------------------
void check_gpu(const Job& job, const kda::harness::HostInputs& inputs,
               const std::vector<Path>& paths, const std::vector<kda::ForwardVariant>& variants,
               const kda::app::DeviceInfo& info, cudaStream_t stream,
               const kda::harness::BudgetRule& rule, std::vector<Row>* rows,
               const std::string& dump_dir, double soak_seconds) {
  if (inputs.key_dim != kda::kHeadDim || inputs.value_dim != kda::kHeadDim) {
    Row row;
    row.shape = job.id;
    row.path = "gpu";
    row.tensor = "-";
    row.verdict = fmt::format("not verified: K = {}, V = {}; the GPU kernels support K = V = 128",
                              inputs.key_dim, inputs.value_dim);
    rows->push_back(row);
    return;
  }
  // Checked for every job before the run starts; again here in case the free memory shrank.
  kda::app::require_device_memory(job.id, kda::app::device_footprint(inputs), info);

  const kda::app::Golden golden = kda::app::compute_golden(inputs, rule, /*state_carry=*/true);
  kda::app::DeviceProblem problem(inputs);
  const std::vector<int64_t> out_shape = {inputs.batch, inputs.tokens, inputs.heads,
                                          inputs.value_dim};
  const std::vector<int64_t> ht_shape = {inputs.num_states(), inputs.heads, inputs.key_dim,
                                         inputs.value_dim};

  for (size_t vi = 0; vi < variants.size(); ++vi) {
    const kda::ForwardVariant variant = variants[vi];
    const std::string vname = kda::to_string(variant);
    // Suffix dumps with the variant only when several are checked.
    const std::string suffix = variants.size() > 1 ? "_" + vname : "";
    problem.set_variant(variant);
    std::map<Path, kda::app::PathCheck> checks;
    for (Path path : paths) {
      // The l2norm pass does not depend on the forward's variant: check it once.
      if (path == Path::l2norm && vi > 0) continue;
      kda::app::PathCheck check = kda::app::check_path(problem, path, golden, stream, true, rule);
      const std::string name = kda::app::path_name(path);
      const std::string tensor = path == Path::l2norm ? "q_hat" : "out";
      Row row = judgement_row(job.id, name, tensor, check.out_judgement, check.verdict());
      row.gate = inputs.gate_recipe;
      if (path != Path::l2norm) {
        row.variant = vname;
        row.carry = golden.carry;
      }
      row.repeat = check.repeat_bitwise ? "bitwise" : "differs";
      row.inactive_nonzero = check.inactive_nonzero;
      row.reference_seconds = golden.seconds;
      rows->push_back(row);
      if (check.final_state_checked) {
        Row ht = judgement_row(job.id, name, "final_state", check.final_state_judgement,
                               check.final_state_judgement.passed()
                                   ? std::string("passed")
                                   : "failed: " + check.final_state_judgement.verdict());
        ht.repeat = row.repeat;
        ht.variant = vname;
        ht.gate = inputs.gate_recipe;
        rows->push_back(ht);
      }
      if (!dump_dir.empty()) {
        if (path == Path::l2norm) {
          kda::app::dump_tensor(dump_dir, job.id, "q_hat_l2norm", check.out,
                                {inputs.batch, inputs.tokens, inputs.heads, inputs.key_dim});
        } else {
          kda::app::dump_tensor(dump_dir, job.id, "out_" + name + suffix, check.out, out_shape);
          if (check.final_state_checked) {
            kda::app::dump_tensor(dump_dir, job.id, "ht_" + name + suffix, check.final_state,
                                  ht_shape);
          }
        }
      }
      if (soak_seconds > 0.0) {
        const kda::app::SoakResult soak =
            kda::app::soak_path(problem, path, check, stream, soak_seconds);
        Row srow;
        srow.shape = job.id;
        srow.path = name;
        srow.tensor = "soak";
        if (path != Path::l2norm) srow.variant = vname;
        srow.repeat = soak.differing == 0 ? "bitwise" : "differs";
        srow.verdict = soak.verdict();
        rows->push_back(srow);
      }
      checks.emplace(path, std::move(check));
    }

    // Review point (c): the fused path may not be worse than the explicit path by more than the
    // budget, with the explicit output playing the role of `low`.
    if (checks.count(Path::fused) && checks.count(Path::explicit_)) {
      const auto& fused = checks.at(Path::fused);
      const auto& expl = checks.at(Path::explicit_);
      const Judgement j = kda::harness::judge_against_explicit(
          golden.out, kda::app::widen(expl.out), kda::app::widen(fused.out), rule);
      // Only the budget part of the rule applies here (§9.4 (c)); the RMS gate is on the row above.
      const bool ok = j.non_finite == 0 && j.within_budget;
      Row row = judgement_row(job.id, "fused", "out vs explicit (c)", j,
                              ok ? "passed"
                                 : "failed: max |fused - golden| " + sci(j.max_abs_err) +
                                       " > 2 (max |explicit - golden| + 2^-7 max |golden|) = " +
                                       sci(j.budget));
      const bool identical =
          fused.out.size() == expl.out.size() &&
          std::memcmp(fused.out.data(), expl.out.data(), fused.out.size() * sizeof(float)) == 0;
      row.repeat = identical ? "= explicit" : "!= explicit";
      row.variant = vname;
      row.gate = inputs.gate_recipe;
      rows->push_back(row);
    }
  }
  if (!dump_dir.empty()) {
    kda::app::dump_tensor(dump_dir, job.id, "out_reference", golden.out, out_shape);
    kda::app::dump_tensor(dump_dir, job.id, "out_reference_f32", golden.out_low, out_shape);
    if (inputs.want_final_state) {
      kda::app::dump_tensor(dump_dir, job.id, "ht_reference", golden.final_state, ht_shape);
    }
  }
}

// The fused path must refuse non-bf16 q (review point (a)). Checked once per run on real params.
Row check_fused_refuses_f32(const kda::harness::HostInputs& inputs) {
  Row row;
  row.shape = "(api)";
  row.path = "fused";
  row.tensor = "q dtype f32 refused";
  kda::app::DeviceProblem problem(inputs);
  kda::ForwardParams params = problem.forward_params(Path::fused);
  params.q_dtype = kda::DType::f32;
  try {
    kda::chunk_forward(params, nullptr);
    kda::app::check_cuda(cudaDeviceSynchronize(), "fused forward with f32 q");
    row.verdict = "failed: chunk_forward accepted f32 q with fuse_q_l2norm";
  } catch (const kda::Error& e) {
    row.verdict = e.code() == kda::ErrorCode::invalid_argument
                      ? std::string("passed")
                      : std::string("failed: wrong error kind: ") + e.what();
    row.repeat = "-";
  }
  return row;
}

kda::harness::Table make_table(const std::vector<Row>& rows, bool full) {
  kda::harness::Table table;
  // The carry: "3.21e-01 (weak)" on screen; a number and a carry_weak column in the CSV.
  table.columns = {"shape", "gate", "path", "variant", "tensor", "max_abs_err", "budget",
                   "rel_rms", "carry", "repeat", "verdict"};
  if (full) {
    table.columns.insert(table.columns.end() - 1,
                         {"carry_weak", "elements", "ref_err", "max_golden", "worst_index",
                          "non_finite", "inactive_nonzero", "reference_s"});
  }
  for (const Row& r : rows) {
    std::vector<std::string> cells = {r.shape, r.gate, r.path, r.variant, r.tensor};
    if (r.judgement) {
      cells.insert(cells.end(), {sci(r.judgement->max_abs_err), sci(r.judgement->budget),
                                 sci(r.judgement->rel_rms)});
    } else {
      cells.insert(cells.end(), {"-", "-", "-"});
    }
    cells.push_back(!r.carry ? "-" : full ? sci(r.carry->rel_rms) : r.carry->text());
    cells.push_back(r.repeat);
    if (full) {
      const bool j = r.judgement.has_value();
      cells.insert(cells.end(),
                   {!r.carry ? "-" : r.carry->weak ? "yes" : "no",
                    std::to_string(r.elements), j ? sci(r.judgement->ref_err) : "-",
                    j ? sci(r.judgement->max_golden) : "-",
                    j ? std::to_string(r.judgement->worst_index) : "-",
                    j ? std::to_string(r.judgement->non_finite) : "-",
                    std::to_string(r.inactive_nonzero), fmt::format("{:.3f}", r.reference_seconds)});
    }
    cells.push_back(r.verdict);
    table.rows.push_back(std::move(cells));
  }
  return table;
}

// The rows of make_table(rows, true) for the JSON report: numbers as JSON numbers at full
// precision (null where the table shows "-" or a value that is not finite, as kda-bench's JSON
// does), text as strings. Same keys as the table's columns: a column added there goes here too
// (kda_check_json_types compares these keys with the CSV header).
nlohmann::json json_rows(const std::vector<Row>& rows) {
  using kda::app::json_number;
  auto text = [](const std::string& cell) {
    return cell == "-" ? nlohmann::json() : nlohmann::json(cell);
  };
  nlohmann::json out = nlohmann::json::array();
  for (const Row& r : rows) {
    const std::optional<Judgement>& j = r.judgement;
    out.push_back({{"shape", r.shape},
                   {"gate", text(r.gate)},
                   {"path", r.path},
                   {"variant", text(r.variant)},
                   {"tensor", r.tensor},
                   {"max_abs_err", j ? json_number(j->max_abs_err) : nullptr},
                   {"budget", j ? json_number(j->budget) : nullptr},
                   {"rel_rms", j ? json_number(j->rel_rms) : nullptr},
                   {"carry", r.carry ? json_number(r.carry->rel_rms) : nullptr},
                   {"repeat", text(r.repeat)},
                   {"carry_weak", r.carry ? nlohmann::json(r.carry->weak ? "yes" : "no") : nullptr},
                   {"elements", r.elements},
                   {"ref_err", j ? json_number(j->ref_err) : nullptr},
                   {"max_golden", j ? json_number(j->max_golden) : nullptr},
                   {"worst_index", j ? nlohmann::json(j->worst_index) : nullptr},
                   {"non_finite", j ? nlohmann::json(j->non_finite) : nullptr},
                   {"inactive_nonzero", r.inactive_nonzero},
                   {"reference_s", json_number(r.reference_seconds)},
                   {"verdict", r.verdict}});
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "kda-check: judge the KDA forward (fused and explicit q-normalization paths) against the "
      "CPU float64 reference with data-derived error budgets"};
  std::vector<std::string> shape_files;
  std::vector<std::string> only;
  std::string backend = "gpu";
  uint64_t seed = kda::harness::kDefaultSeed;
  std::string md_file, csv_file, json_file, dump_dir, load_dir;
  int device = 0;
  bool force = false;
  std::vector<std::string> variant_names = {kda::to_string(kda::kDefaultForwardVariant)};
  app.add_option("--shapes", shape_files, "Shape file(s) (default: shapes/contract.yaml)")
      ->check(CLI::ExistingFile);
  app.add_option("--only", only, "Check only these shape ids");
  app.add_option("--backend", backend,
                 "gpu (fused, explicit and the l2norm pass), fused, explicit, or reference "
                 "(CPU only: chunked references vs the float64 recurrence)")
      ->check(CLI::IsMember({"gpu", "fused", "explicit", "reference"}));
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
                 "Kernel variant(s) of the forward to check against the same references "
                 "(docs/design.md)")
      ->check(CLI::IsMember(kda::app::variant_names()));
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
  if (!only.empty()) {
    std::set<std::string> known;
    for (const Job& j : jobs) known.insert(j.id);
    for (const std::string& id : only) {
      if (!known.count(id)) {
        return usage_error("--only " + id + ": no such shape id (try --shapes FILE)");
      }
    }
    std::erase_if(jobs, [&](const Job& j) {
      return std::find(only.begin(), only.end(), j.id) == only.end();
    });
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
  // Every problem must fit in the host's memory (one at a time; loaded inputs are in memory
  // already): refuse before generating anything.
  try {
    for (const Job& job : jobs) {
      const kda::harness::ProblemDims dims = job.loaded
                                                 ? kda::harness::ProblemDims::of(*job.loaded)
                                                 : kda::harness::ProblemDims::of(*job.shape);
      // The GPU backends compute no reference for dims the kernels do not take.
      const bool kernels_run = dims.key_dim == kda::kHeadDim && dims.value_dim == kda::kHeadDim;
      kda::harness::HostFootprint need = kda::harness::host_footprint(
          dims, !gpu          ? kda::harness::HostWork::reference
                : kernels_run ? kda::harness::HostWork::gpu_check
                              : kda::harness::HostWork::inputs_only);
      need.inputs_loaded = job.loaded.has_value();
      kda::harness::require_host_memory(job.id, need);
    }
  } catch (const kda::harness::HostMemoryError& e) {
    return usage_error(e.what());
  }
  std::vector<kda::ForwardVariant> variants;
  for (const std::string& name : variant_names) {
    kda::ForwardVariant v = kda::kDefaultForwardVariant;
    kda::app::parse_variant(name, &v);
    variants.push_back(v);
  }
  std::vector<Path> paths;
  if (backend == "gpu") paths = {Path::fused, Path::explicit_, Path::l2norm};
  if (backend == "fused") paths = {Path::fused};
  if (backend == "explicit") paths = {Path::explicit_, Path::l2norm};

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
        const kda::app::DeviceFootprint need = job.loaded
                                                   ? kda::app::device_footprint(*job.loaded)
                                                   : kda::app::device_footprint(*job.shape);
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
    works.push_back(gpu && !verified ? 0.0 : loads.back().work);  // no reference runs for it
  }
  kda::harness::ReferenceEta eta(gpu ? kda::harness::kGoldenSecondsPerWork
                                     : kda::harness::kReferenceSecondsPerWork);

  std::vector<Row> rows;
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
      if (!dump_dir.empty()) kda::app::dump_inputs(dump_dir, job.id, job.seed, inputs);
      const size_t before = rows.size();
      if (gpu) {
        if (i == 0 && inputs.key_dim == kda::kHeadDim && inputs.value_dim == kda::kHeadDim) {
          rows.push_back(check_fused_refuses_f32(inputs));
        }
        check_gpu(job, inputs, paths, variants, info, stream, rule, &rows, dump_dir, soak_seconds);
      } else {
        check_reference(job, inputs, rule, &rows, dump_dir);
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

  int failed = 0, not_verified = 0;
  for (const Row& r : rows) {
    failed += r.failed() ? 1 : 0;
    not_verified += r.verdict.rfind("not verified", 0) == 0 ? 1 : 0;
  }

  std::ostringstream md;
  md << "# kda-check report\n\n";
  md << "- backend: " << backend << "\n- commit: " << kda::build::git_commit
     << "\n- build: " << kda::build::flags << "\n- seed: " << seed << "\n";
  if (gpu) {
    md << "- kernel variants: " << fmt::format("{}", fmt::join(variant_names, ", ")) << "\n";
    md << fmt::format("- device: {} (sm_{}{}, {} SMs), driver {}, runtime {}\n", info.name,
                      info.cc_major, info.cc_minor, info.sm_count, info.driver_version,
                      info.runtime_version);
  }
  md << "- inputs: "
     << (load_dir.empty() ? "generated (kda-forward.md §9.3)"
                          : "--load " + kda::harness::escape_controls(load_dir))
     << "\n";
  md << "- rule: pass iff all finite, max|actual-golden| <= 2 (max|low-golden| + 2^-7 "
        "max|golden|) and RMS(actual-golden)/RMS(golden) < "
     << fmt::format("{:g}", rule.rms_limit) << "; golden = CPU fp64 reference\n";
  md << "- carry: RMS(golden - golden with the state reset at every chunk start) / RMS(golden): "
        "how much the state carried between chunks moves the output; (weak): the reset output "
        "itself would pass, so the row does not test the recurrence\n\n";
  md << kda::harness::to_markdown(make_table(rows, false)) << "\n";
  md << fmt::format("{} rows: {} passed, {} failed, {} not verified ({:.1f} s)\n", rows.size(),
                    rows.size() - failed - not_verified, failed, not_verified, total_seconds);
  std::cout << md.str() << std::flush;

  try {
    if (!md_file.empty()) kda::harness::write_text_file_atomic(md_file, md.str(), force);
    if (!csv_file.empty()) {
      kda::harness::write_text_file_atomic(csv_file, kda::harness::to_csv(make_table(rows, true)),
                                           force);
    }
    if (!json_file.empty()) {
      nlohmann::json doc;
      doc["tool"] = "kda-check";
      doc["git_commit"] = kda::build::git_commit;
      doc["build_flags"] = kda::build::flags;
      doc["backend"] = backend;
      doc["seed"] = seed;
      doc["rms_limit"] = rule.rms_limit;
      if (gpu) doc["variants"] = variant_names;
      std::vector<std::string> args(argv, argv + argc);
      doc["argv"] = args;
      if (gpu) {
        doc["device"] = {{"name", info.name},
                         {"cc", fmt::format("{}.{}", info.cc_major, info.cc_minor)},
                         {"sm_count", info.sm_count},
                         {"driver_version", info.driver_version},
                         {"runtime_version", info.runtime_version}};
      }
      doc["rows"] = json_rows(rows);
      doc["summary"] = {{"rows", rows.size()}, {"failed", failed}, {"not_verified", not_verified}};
      kda::harness::write_text_file_atomic(json_file, doc.dump(2) + "\n", force);
    }
  } catch (const std::exception& e) {
    return usage_error(e.what());
  }
  if (stream) cudaStreamDestroy(stream);
  return failed ? kExitFailed : 0;
}
