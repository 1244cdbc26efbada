// The JSON report of kda-bench (json_report.h).
#include "kda/bench/json_report.h"

#include "kda/harness/cells.h"

namespace kda::bench {

namespace {

using kda::harness::json_number;

nlohmann::json numbers(const std::vector<double>& values) {
  nlohmann::json out = nlohmann::json::array();
  for (double v : values) out.push_back(json_number(v));
  return out;
}

}  // namespace

std::string results_json(const RunContext& ctx, const nlohmann::json& device,
                         const nlohmann::json& settings, const std::vector<RunRow>& rows,
                         const RunSummary& summary, const CompareReport* compare) {
  nlohmann::json doc;
  doc["tool"] = "kda-bench";
  doc["schema_version"] = kJsonSchemaVersion;
  doc["meta"] = {{"run_id", ctx.run_id},           {"utc_time", ctx.utc_time},
                 {"git_commit", ctx.git_commit},   {"build_flags", ctx.build_flags},
                 {"argv", ctx.argv},               {"seed", ctx.seed},
                 {"variant", ctx.variant},
                 {"shapes_file", ctx.shapes_file}, {"floor_bandwidth_Bps", ctx.floor_bw_Bps},
                 {"stages_not_run", ctx.stages_not_run}};
  doc["settings"] = settings;
  doc["device"] = device;

  nlohmann::json jrows = kda::harness::json_rows(results_cells(ctx, rows));
  for (size_t i = 0; i < rows.size(); ++i) {
    const RunRow& r = rows[i];
    nlohmann::json& row = jrows[i];
    row["samples_gpu_s"] = numbers(r.gpu_s);
    row["samples_cpu_s"] = numbers(r.cpu_s);
    row["samples_sm_clock_hz"] = numbers(r.clock_hz);
    row["rejected_samples"] = r.rejected_samples;
  }
  doc["rows"] = std::move(jrows);

  // The times of a shape's summary and of a geomean, under one set of keys.
  auto times = [](nlohmann::json entry, const auto& t) {
    entry["fused_s"] = json_number(t.fused_s);
    entry["explicit_s"] = json_number(t.explicit_s);
    entry["l2norm_s"] = json_number(t.l2norm_s);
    entry["fused_over_explicit"] = json_number(t.ratio);
    entry["saving_s"] = json_number(t.saving_s);
    entry["saving_share_of_l2norm"] = json_number(t.saving_share);
    entry["raw_s"] = json_number(t.raw_s);
    entry["raw_over_fused"] = json_number(t.raw_ratio);
    return entry;
  };
  nlohmann::json shapes = nlohmann::json::array();
  for (const auto& s : summary.shapes) {
    shapes.push_back(times({{"shape_id", s.shape_id}, {"mode", s.mode}}, s));
  }
  nlohmann::json geomeans = nlohmann::json::array();
  for (const auto& g : summary.geomeans) {
    geomeans.push_back(times({{"mode", g.mode}, {"shapes", g.shapes}}, g));
  }
  doc["summary"] = {{"per_shape", shapes}, {"geomeans", geomeans}};
  doc["warnings"] = run_warnings(rows);

  if (compare) {
    nlohmann::json entries = nlohmann::json::array();
    for (const auto& e : compare->entries) {
      entries.push_back({{"shape_id", e.shape_id},
                         {"path", e.path},
                         {"stage", e.stage},
                         {"mode", e.mode},
                         {"median_a_s", json_number(e.median_a)},
                         {"noise_a", json_number(e.noise_a)},
                         {"median_b_s", json_number(e.median_b)},
                         {"noise_b", json_number(e.noise_b)},
                         {"ratio", json_number(e.result.ratio)},
                         {"threshold", json_number(e.result.threshold)},
                         {"change", to_string(e.result.change)}});
    }
    doc["baseline_compare"] = {{"entries", entries},
                               {"geomean_ratio", json_number(compare->geomean_ratio)},
                               {"same", compare->same},
                               {"faster", compare->faster},
                               {"slower", compare->slower},
                               {"invalid", compare->invalid},
                               {"only_in_baseline", compare->only_in_a},
                               {"only_in_run", compare->only_in_b}};
  }
  return doc.dump(2) + "\n";
}

}  // namespace kda::bench
