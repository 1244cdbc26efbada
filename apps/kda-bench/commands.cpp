// The kda-bench commands that need no GPU: compare and --list, plus the input checks every
// command shares.
#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "common/device_memory.h"
#include "kda/bench/bytes_model.h"
#include "kda/bench/compare.h"
#include "kda/bench/format.h"
#include "kda/harness/report.h"
#include "kda/kda.h"
#include "options.h"

namespace kda::bench::app {

int fail(int rc, const std::string& message, const char* tool) {
  std::cerr << tool << ": " << kda::harness::escape_controls(message) << "\n";
  return rc;
}

int load_selected_shapes(const Options& o, std::vector<kda::harness::ShapeSpec>* shapes) {
  try {
    *shapes = kda::harness::load_shape_file(o.shapes_file).shapes;
  } catch (const std::exception& e) {
    return fail(kExitUsage, e.what());
  }
  if (shapes->empty()) return fail(kExitUsage, o.shapes_file + ": no shapes in the file");
  if (const auto refusal = kda::app::select_only(shapes, o.only, o.shapes_file,
                                                 [](const auto& s) { return s.id; })) {
    return fail(kExitUsage, *refusal);
  }
  return kExitOk;
}

int refuse_existing_outputs(const Options& o) {
  try {
    kda::harness::check_output_files({o.md_file, o.csv_file, o.json_file}, o.force);
  } catch (const kda::harness::OutputError& e) {
    return fail(kExitUsage, e.what());
  }
  return kExitOk;
}

int run_compare(const Options& o) {
  if (int rc = refuse_existing_outputs(o); rc != kExitOk) return rc;
  CompareConfig config;
  config.min_threshold = o.same_within;
  config.mode = o.compare_mode;
  config.a_path = o.a_path;
  config.b_path = o.b_path;
  CompareReport report;
  try {
    const TimingTable a = read_timing_table(o.compare_a);
    const TimingTable b = read_timing_table(o.compare_b);
    report = compare_tables(a, b, config);
  } catch (const CompareError& e) {
    return fail(kExitUsage, e.what(), "kda-bench compare");
  }
  const std::string md = compare_markdown(report, o.compare_a, o.compare_b, config);
  std::cout << md << std::flush;
  try {
    if (!o.md_file.empty()) kda::harness::write_text_file_atomic(o.md_file, md, o.force);
    if (!o.csv_file.empty())
      kda::harness::write_text_file_atomic(
          o.csv_file, kda::harness::to_csv(compare_table(report, false)), o.force);
  } catch (const std::exception& e) {
    return fail(kExitUsage, e.what(), "kda-bench compare");
  }
  if (report.entries.empty()) {
    return fail(kExitUsage,
                "no row of " + o.compare_a + " matches a row of " + o.compare_b +
                    " (keys: shape_id, path, stage, mode)",
                "kda-bench compare");
  }
  if (o.fail_on_slower) {
    const std::vector<std::string> failures = regression_gate_failures(report);
    for (const std::string& why : failures) {
      fail(kExitFailed, why, "kda-bench compare: --fail-on-slower");
    }
    if (!failures.empty()) return kExitFailed;
  }
  return kExitOk;
}

int run_list(const Options& o) {
  std::vector<kda::harness::ShapeSpec> shapes;
  if (int rc = load_selected_shapes(o, &shapes); rc != kExitOk) return rc;
  kda::harness::Table t;
  // The raw path's columns come last, so the earlier ones keep their places.
  t.columns = {"shape", "B", "T", "H", "N", "token-heads", "fused (MB)", "explicit (MB)",
               "l2norm (MB)", "floor (us)", "device (MB)", "gpu", "raw (MB)", "raw floor (us)"};
  for (const auto& s : shapes) {
    const ProblemSize size = ProblemSize::of(s);
    auto mb = [&](Path p) {
      return human_number(static_cast<double>(path_bytes(size, p)), Unit::bytes);
    };
    const double floor = static_cast<double>(floor_bytes(size, Path::fused)) / o.floor_bw_Bps;
    const double raw_floor = static_cast<double>(floor_bytes(size, Path::raw)) / o.floor_bw_Bps;
    // What kda-bench allocates on the device for the shape (checked against the free memory
    // before the run); "-" where the kernels cannot run it.
    std::string device = "-";
    try {
      const kda::app::DeviceFootprint need = kda::app::device_footprint(size);
      if (need.workspace > 0) device = human_number(static_cast<double>(need.total()), Unit::bytes);
    } catch (const kda::Error&) {
      // beyond the kernels' grid limits: the gpu column says no
    }
    t.rows.push_back({s.id, std::to_string(size.batch), std::to_string(size.tokens),
                      std::to_string(size.heads), std::to_string(size.num_states),
                      std::to_string(size.token_heads()), mb(Path::fused),
                      mb(Path::explicit_), mb(Path::l2norm),
                      human_number(floor, Unit::seconds), device,
                      s.gpu_supported() ? "yes" : "no (K, V != 128)", mb(Path::raw),
                      human_number(raw_floor, Unit::seconds)});
  }
  std::cout << fmt::format("# {} ({} shapes)\n\n", kda::harness::escape_controls(o.shapes_file),
                           shapes.size())
            << kda::harness::to_markdown(t)
            << fmt::format("\nBytes model: forward 8K + 4V + 4 B per token-head (q, k, v, "
                           "out bf16; gate, beta fp32; 1540 B for K = V = 128) plus states; l2norm "
                           "pass 2 x rows x K x 2 B; explicit = both; raw 6K + 4V + 2 B per "
                           "token-head (raw q, k, gate, v, out bf16; beta logits bf16; 1282 B) "
                           "plus A_log, dt_bias and states. Floor = forward bytes at {} TB/s (raw "
                           "floor: the raw bytes). Device = memory a run allocates for the shape "
                           "(inputs with the raw ones, outputs, workspace), checked against the "
                           "free device memory before the run.\n",
                           human_number(o.floor_bw_Bps, Unit::bytes_per_s));
  return kExitOk;
}

}  // namespace kda::bench::app
