// kda-error-budget: where a kernel's error against the float64 golden comes from. For each shape
// and path it replays the chunked forward with the default kernel's roundings (kda::ref
// replay_forward, docs/precision.md), then with each rounding point alone and with each point
// removed, and prints the output and final-state relative RMS errors of every run. CPU only.
//
//   kda-error-budget --shapes shapes/long-memory.yaml --only lm-dense-h4-t2048
//   kda-error-budget --shapes shapes/smoke.yaml --set state_operand=bf16x2 --set v_new=bf16x2
//
// Exit codes: 0 done; 2 bad usage or input.

#include <cmath>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/cli.h"
#include "kda/build_info.h"
#include "kda/harness/inputs.h"
#include "kda/harness/report.h"
#include "kda/harness/shapes.h"
#include "kda/ref/reference.h"
#include "kda/ref/replay.h"

namespace {

using kda::app::kExitUsage;

double rel_rms(const std::vector<double>& golden, const std::vector<double>& actual) {
  double err = 0.0, ref = 0.0;
  for (size_t i = 0; i < golden.size(); ++i) {
    const double d = actual[i] - golden[i];
    err += d * d;
    ref += golden[i] * golden[i];
  }
  return ref > 0.0 ? std::sqrt(err / ref) : std::sqrt(err);
}

std::string sci(double v) { return fmt::format("{:.3e}", v); }

struct Errors {
  double out = 0.0, state = 0.0;
};

Errors errors_of(const kda::ref::Problem& problem, const kda::ref::Options& options,
                 const kda::ref::RoundingPlan& plan, const kda::ref::Result<double>& golden) {
  const auto got = kda::ref::replay_forward(problem, options, plan);
  Errors e;
  e.out = rel_rms(golden.out, got.out);
  if (options.final_state) e.state = rel_rms(golden.final_state, got.final_state);
  return e;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kda-error-budget: the default kernel's error against the float64 golden, taken "
               "apart by rounding point (CPU replay)"};
  std::vector<std::string> shape_files = {"shapes/long-memory.yaml"};
  std::vector<std::string> only, sets;
  std::string path_name = "both", plan_name = "default", md_file, csv_file;
  uint64_t seed = kda::harness::kDefaultSeed;
  bool force = false, quick = false;
  app.add_option("--shapes", shape_files, "Shape file(s)")->check(CLI::ExistingFile);
  app.add_option("--only", only, "Only these shape ids (comma- or space-separated)")
      ->delimiter(',');
  app.add_option("--seed", seed, "Input seed (a shape's own seed: wins)");
  app.add_option("--path", path_name, "fused, explicit or both")
      ->check(CLI::IsMember({"fused", "explicit", "both"}));
  app.add_option("--plan", plan_name,
                 "The rounding plan to start from: default (the two kernels, v2w), bf16-record "
                 "(v2_mma / v2t_mma: the v1 record's bf16 factors and scan operands) or one-pass "
                 "(the one pass: 16-token sub-chunks, bf16 record tiles and scan operands)")
      ->check(CLI::IsMember({"default", "bf16-record", "one-pass"}));
  app.add_option("--set", sets,
                 "POINT=FORMAT: change one rounding point of the plan (formats: exact, f32, "
                 "tf32, f16, bf16, bf16x2, f16x2; points: see the table)");
  app.add_flag("--quick", quick, "Only the plan's totals, no per-point runs");
  app.add_option("--md", md_file, "Write the markdown report to FILE");
  app.add_option("--csv", csv_file, "Write the table as CSV to FILE");
  app.add_flag("--force", force, "Overwrite existing report files");
  app.set_version_flag("--version", std::string("kda-error-budget ") + kda::build::git_commit);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }

  std::vector<std::pair<std::string, kda::ref::Format>> changes;
  try {
    for (const std::string& s : sets) {
      const auto eq = s.find('=');
      if (eq == std::string::npos) throw std::invalid_argument("--set " + s + ": expected POINT=FORMAT");
      changes.emplace_back(s.substr(0, eq), kda::ref::parse_format(s.substr(eq + 1)));
      kda::ref::RoundingPlan().set(changes.back().first, changes.back().second);  // name check
    }
    for (const std::string* file : {&md_file, &csv_file})
      if (!file->empty()) kda::harness::check_output_file(*file, force);
  } catch (const std::exception& e) {
    std::cerr << "kda-error-budget: " << e.what() << "\n";
    return kExitUsage;
  }

  std::vector<kda::harness::ShapeSpec> shapes;
  try {
    for (const std::string& file : shape_files)
      for (const auto& s : kda::harness::load_shape_file(file).shapes) shapes.push_back(s);
  } catch (const std::exception& e) {
    std::cerr << "kda-error-budget: " << e.what() << "\n";
    return kExitUsage;
  }
  const std::string source = fmt::format("{}", fmt::join(shape_files, ", "));
  if (const auto refusal =
          kda::app::select_only(&shapes, only, source, [](const auto& s) { return s.id; })) {
    std::cerr << "kda-error-budget: " << kda::harness::escape_controls(*refusal) << "\n";
    return kExitUsage;
  }

  kda::harness::Table table;
  table.columns = {"shape", "gate", "path", "run", "change", "out_rel_rms", "state_rel_rms"};
  std::vector<bool> paths;
  if (path_name != "explicit") paths.push_back(true);
  if (path_name != "fused") paths.push_back(false);

  for (const auto& shape : shapes) {
    const kda::harness::HostInputs inputs = kda::harness::make_inputs(shape, shape.seed.value_or(seed));
    const kda::ref::Problem problem = inputs.to_reference();
    kda::ref::Options options;
    options.final_state = true;  // the state's error is half of the story
    const auto golden = kda::ref::recurrent_forward<double>(problem, options);
    for (bool fused : paths) {
      const kda::ref::RoundingPlan base =
          plan_name == "default"       ? kda::ref::RoundingPlan::default_kernel(fused)
          : plan_name == "bf16-record" ? kda::ref::RoundingPlan::bf16_record(fused)
                                       : kda::ref::RoundingPlan::one_pass(fused);
      kda::ref::RoundingPlan plan = base;
      for (const auto& [point, format] : changes) plan.set(point, format);
      const kda::ref::RoundingPlan exact = plan.exact();
      const std::string path = fused ? "fused" : "explicit";
      auto add = [&](const std::string& run, const std::string& change,
                     const kda::ref::RoundingPlan& p) {
        const Errors e = errors_of(problem, options, p, golden);
        table.rows.push_back({shape.id, inputs.gate_recipe, path, run, change, sci(e.out), sci(e.state)});
        std::cerr << fmt::format("{} {} {}: out {} state {}\n", shape.id, path, run, sci(e.out),
                                 sci(e.state));
      };
      add(plan_name, plan.diff(base), plan);
      if (quick) continue;
      for (const auto& point : kda::ref::RoundingPlan::points()) {
        const kda::ref::Format format = plan.*point.member;
        if (format == kda::ref::Format::exact) continue;
        if (fused && std::string(point.name) == "q_hat") continue;  // not on the fused path
        kda::ref::RoundingPlan alone = exact;
        alone.*point.member = format;
        add(std::string("only ") + point.name, fmt::format("{}={}", point.name, to_string(format)), alone);
        kda::ref::RoundingPlan without = plan;
        without.*point.member = kda::ref::Format::exact;
        add(std::string("without ") + point.name, fmt::format("{}=exact", point.name), without);
      }
    }
  }

  std::ostringstream md;
  md << "# kda-error-budget\n\n- commit: " << kda::build::git_commit
     << "\n- plan: " << plan_name << (sets.empty() ? "" : " with --set changes")
     << "\n- golden: recurrent_forward<double>; runs: kda::ref::replay_forward with the plan "
        "(its changes from the named plan), each rounding point alone (`only`: every other "
        "point exact) and the plan without it (`without`)\n\n"
     << kda::harness::to_markdown(table) << "\n";
  std::cout << md.str();
  try {
    if (!md_file.empty()) kda::harness::write_text_file_atomic(md_file, md.str(), force);
    if (!csv_file.empty()) kda::harness::write_text_file_atomic(csv_file, kda::harness::to_csv(table), force);
  } catch (const std::exception& e) {
    std::cerr << "kda-error-budget: " << e.what() << "\n";
    return kExitUsage;
  }
  return 0;
}
