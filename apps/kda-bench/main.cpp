// kda-bench: times the fused and explicit q-normalization paths of the KDA forward (and the
// l2norm pass alone, and the forward on raw inputs) on the shapes of a shape file, with
// nvbench's method (own stream, warm-up, CUDA events, blocking kernel, L2 flush, noise-based
// stopping, throttle detection) or Triton's do_bench method; verifies every timed output first. `kda-bench compare A.csv B.csv` compares
// two result files noise-aware. Method and columns: apps/kda-bench/README.md.

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/cli.h"
#include "common/device_problem.h"

#include "kda/build_info.h"
#include "options.h"

namespace {

using kda::bench::app::kExitUsage;
using kda::bench::app::Options;

constexpr const char* kFooter = R"(Modes (--mode, comma list; every mode is a row of its own):
  warm    back-to-back launches, one CUDA-event pair each, no L2 flush (default; the peers'
          "warm CUDA events" numbers). A call shorter than --min-sample-us (200 us) is
          timed as one replay of a CUDA graph of N back-to-back calls per event pair, so the
          host's launch rate cannot set its time (CSV: sample_method, calls_per_sample)
  cold    L2 flushed before every sample (max(2 x L2, 256 MiB) memset, synced, untimed); the
          work queued behind a blocking kernel so launch latency stays out of the events
  graph   as warm, the path captured once in a CUDA graph and replayed (short calls: as warm)
  triton  triton.testing.do_bench: 256 MiB memset before each sample, 25 ms warm-up and
          100 ms repetition budgets, per-iteration events; median/p20/p80

Exit codes: 0 every row verified (or --no-verify) and converged; 1 a verification failed
(compare: --fail-on-slower and a row was SLOWER); 2 bad usage or input (option, conflicting
options, shape file, baseline, output path, a shape too big for the device's free memory); 3 no
usable GPU (none, unknown --device) or a CUDA error; 4 all verified but a row did not converge
(timeout). `compare` and --list need no GPU. Messages: docs/errors.md.
Method and CSV columns: apps/kda-bench/README.md.)";

}  // namespace

int main(int argc, char** argv) {
  Options o;
  o.argv.assign(argv, argv + argc);
  CLI::App app{
      "kda-bench: time the KDA forward (fused vs explicit q l2norm, the l2norm pass, and the "
      "forward on raw inputs) on the H200 with an nvbench-grade method; every timed output is "
      "verified first"};
  app.footer(kFooter);
  app.set_version_flag("--version", std::string("kda-bench ") + kda::build::git_commit + " (" +
                                        kda::build::flags + ")");

  // selection
  app.add_option("--shapes", o.shapes_file, "Shape file")
      ->check(kda::app::non_empty_path())
      ->capture_default_str();
  app.add_option("--only", o.only, "Run only these shape ids (comma- or space-separated)")
      ->delimiter(',');
  app.add_option("--paths", o.paths,
                 "Paths to time, comma list: fused, explicit, l2norm, raw (the forward on raw k, "
                 "gate and beta logits; a v2 variant)")
      ->delimiter(',')
      ->check(CLI::IsMember({"fused", "explicit", "l2norm", "raw"}))
      ->capture_default_str();
  app.add_option("--mode", o.modes, "Timing modes, comma list (see below)")
      ->delimiter(',')
      ->check(CLI::IsMember({"warm", "cold", "graph", "triton"}))
      ->capture_default_str();
  app.add_flag("--list", o.list, "List the shapes with their bytes model and exit (no GPU)");
  app.add_flag("--stages", o.stages,
               "Also time each kernel stage of the forward separately (fused, explicit, raw)");
  bool no_verify = false;
  app.add_flag("--no-verify", no_verify,
               "Skip verification before timing (rows then say 'not verified')");
  bool no_blocking_kernel = false;
  app.add_flag("--no-blocking-kernel", no_blocking_kernel,
               "Do not queue timed work behind the blocking kernel (for tools that serialize "
               "launches, e.g. Nsight Compute, compute-sanitizer; on by itself when one is "
               "attached through CUDA_INJECTION64_PATH); launch latency may then reach the "
               "first samples of a batch");
  app.add_option("--device", o.device, "CUDA device index")
      ->check(CLI::Range(0, 1 << 16))
      ->capture_default_str();
  app.add_option("--seed", o.seed, "Input seed (a shape's own seed: wins)")
      ->transform(kda::app::seed_transform())
      ->capture_default_str();
  app.add_option("--variant", o.variant,
                 "Kernel variant of the forward: the lab's ladder (lab/README.md) or the "
                 "library's, v2w_mma (the default)")
      ->check(CLI::IsMember(kda::lab::variant_names()));

  // stopping and method
  auto& stop = o.measure.stopping;
  double max_noise_pct = stop.max_noise * 100.0;
  double throttle_pct = o.measure.throttle.threshold * 100.0;
  app.add_option("--min-samples", stop.min_samples, "Minimum samples per row")
      ->check(CLI::Range(int64_t{1}, int64_t{1000000}))
      ->capture_default_str();
  app.add_option("--min-time", stop.min_time_s, "Minimum GPU time the samples of a row span (s)")
      ->check(kda::app::finite(CLI::Range(0.0, 3600.0)))
      ->capture_default_str();
  app.add_option("--max-noise", max_noise_pct,
                 "Stop when the relative stdev is below this (%), or once it has stabilised")
      ->check(kda::app::finite(CLI::Range(0.0, 100.0)))
      ->capture_default_str();
  app.add_option("--timeout", stop.timeout_s,
                 "Wall-time limit per row (s); a row that hits it is flagged 'did not converge'")
      ->check(kda::app::finite(CLI::Range(0.001, 86400.0)))
      ->capture_default_str();
  double min_sample_us = o.measure.sampling.min_sample_s * 1e6;
  app.add_option("--min-sample-us", min_sample_us,
                 "warm/graph: a call shorter than this (microseconds) is timed as one replay of a CUDA graph "
                 "of N back-to-back calls per sample, N = ceil(this / call time); 0 = never")
      ->check(kda::app::finite(CLI::Range(0.0, 1e6)))
      ->capture_default_str();
  app.add_option("--warmup", o.measure.warmup_runs, "Untimed runs before each row")
      ->check(CLI::Range(int64_t{0}, int64_t{100000}))
      ->capture_default_str();
  app.add_option("--throttle-threshold", throttle_pct,
                 "Discard samples whose SM clock is below this % of the default clock")
      ->check(kda::app::finite(CLI::Range(0.0, 100.0)))
      ->capture_default_str();
  app.add_option("--throttle-recovery", o.measure.throttle.recovery_delay_s,
                 "Cool-down after a throttled sample (s)")
      ->check(kda::app::finite(CLI::Range(0.0, 10.0)))
      ->capture_default_str();
  app.add_option("--cooldown", o.cooldown_s, "Sleep between rows (s)")
      ->check(kda::app::finite(CLI::Range(0.0, 60.0)))
      ->capture_default_str();
  app.add_option("--floor-bandwidth", o.floor_bw_Bps,
                 "Copy bandwidth the byte floor is taken at (B/s; H200 measured 4.25e12)")
      ->check(kda::app::finite(CLI::PositiveNumber))
      ->capture_default_str();

  // outputs
  app.add_option("--csv", o.csv_file, "Write the rows as CSV to FILE")
      ->check(kda::app::non_empty_path());
  app.add_option("--json", o.json_file, "Write rows, raw samples and metadata as JSON to FILE")
      ->check(kda::app::non_empty_path());
  app.add_option("--md", o.md_file, "Write the markdown report to FILE (it always goes to stdout)")
      ->check(kda::app::non_empty_path());
  app.add_flag("--force", o.force, "Overwrite existing output files");
  app.add_option("--baseline", o.baseline_file,
                 "Compare this run with an earlier kda-bench CSV (as `compare BASELINE this`)")
      ->check(kda::app::non_empty_path());
  double same_pct = o.same_within * 100.0;
  app.add_option("--same-within", same_pct,
                 "Compare: smallest relative change reported as FASTER/SLOWER (%)")
      ->check(kda::app::finite(CLI::Range(0.0, 100.0)))
      ->capture_default_str();
  app.add_flag("-q,--quiet", o.quiet, "No progress lines on stderr");

  CLI::App* cmp = app.add_subcommand(
      "compare",
      "Compare two kda-bench CSVs (or a peer's with shape_id, path/impl, median_s/median_ms and "
      "optionally noise): ratio B/A per row, geomean, SAME/FASTER/SLOWER. SAME when |B/A - 1| <= "
      "max(noise_A, noise_B, --same-within).");
  cmp->add_option("A", o.compare_a, "Baseline CSV")->required()->check(kda::app::non_empty_path());
  cmp->add_option("B", o.compare_b, "New CSV")->required()->check(kda::app::non_empty_path());
  cmp->add_option("--same-within", same_pct, "Smallest change reported (%)")
      ->check(kda::app::finite(CLI::Range(0.0, 100.0)))
      ->capture_default_str();
  cmp->add_option("--mode", o.compare_mode, "Compare only rows of this mode");
  cmp->add_option("--a-path", o.a_path, "Take this path of A ...");
  cmp->add_option("--b-path", o.b_path, "... and compare it with this path of B");
  cmp->add_option("--csv", o.csv_file, "Write the comparison as CSV to FILE")
      ->check(kda::app::non_empty_path());
  cmp->add_option("--md", o.md_file, "Write the markdown comparison to FILE")
      ->check(kda::app::non_empty_path());
  cmp->add_flag("--force", o.force, "Overwrite existing output files");
  cmp->add_flag("--fail-on-slower", o.fail_on_slower,
                "Exit 1 when a row is SLOWER or INVALID, a row of B is not verified, or B lacks a "
                "row of A");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  // Options that contradict each other or would be silently ignored: refuse them (exit 2).
  auto usage_error = [](const std::string& message) {
    return kda::bench::app::fail(kExitUsage, message);
  };
  // Options of the timing run (before any sub-command).
  const char* const run_options[] = {
      "--shapes", "--only", "--paths", "--mode", "--stages", "--no-verify",
      "--no-blocking-kernel", "--device", "--seed",
      "--variant", "--min-samples", "--min-time", "--max-noise", "--timeout", "--warmup",
      "--throttle-threshold", "--throttle-recovery", "--cooldown", "--floor-bandwidth", "--csv",
      "--json", "--md", "--force", "--baseline", "--same-within", "--list"};
  if (cmp->parsed()) {
    for (const char* name : run_options) {
      if (app.count(name) > 0) {
        return usage_error(std::string(name) +
                           " is an option of the timing run; `compare` takes its own options "
                           "after the sub-command (kda-bench compare --help)");
      }
    }
    if ((cmp->count("--a-path") > 0) != (cmp->count("--b-path") > 0)) {
      return usage_error("compare: --a-path and --b-path go together (which path of A against "
                         "which path of B)");
    }
  } else if (o.list) {
    for (const char* name : run_options) {
      const std::string option(name);
      if (option == "--list" || option == "--shapes" || option == "--only" ||
          option == "--floor-bandwidth" || app.count(name) == 0) {
        continue;
      }
      return usage_error("--list prints the shapes and exits; " + option +
                         " has no effect with it");
    }
  } else {
    if (app.count("--same-within") > 0 && o.baseline_file.empty()) {
      return usage_error("--same-within sets the threshold of the --baseline comparison; give "
                         "--baseline too (or use `compare`)");
    }
    const bool forward_path = std::any_of(o.paths.begin(), o.paths.end(),
                                          [](const std::string& p) { return p != "l2norm"; });
    if (o.stages && !forward_path) {
      return usage_error("--stages times the forward's kernels; --paths l2norm has none (add "
                         "fused, explicit or raw)");
    }
    // A variant that does not take the raw inputs: refused before any work, not a failed row.
    if (std::find(o.paths.begin(), o.paths.end(), "raw") != o.paths.end()) {
      const kda::app::Variant& variant = kda::app::variant_named(o.variant);
      if (const auto why = kda::app::unsupported_by_variant(kda::harness::Path::raw, variant)) {
        return usage_error("--paths raw: variant " + std::string(variant.name) +
                           " cannot run the raw path (" + *why +
                           "); pick a v2 variant with --variant, or drop raw from --paths");
      }
    }
  }
  o.verify = !no_verify;
  // Nsight Compute and Nsight Systems attach through CUDA_INJECTION64_PATH; under a tool that
  // serializes launches the blocking kernel would stall until its timeout (run.cpp says so).
  const char* injection = std::getenv("CUDA_INJECTION64_PATH");
  o.blocking_kernel = !no_blocking_kernel && !(injection != nullptr && injection[0] != '\0');
  stop.max_noise = max_noise_pct / 100.0;
  o.measure.sampling.min_sample_s = min_sample_us * 1e-6;
  o.measure.throttle.threshold = throttle_pct / 100.0;
  o.same_within = same_pct / 100.0;

  if (cmp->parsed()) return kda::bench::app::run_compare(o);
  if (o.list) return kda::bench::app::run_list(o);
  return kda::bench::app::run_benchmarks(o);
}
