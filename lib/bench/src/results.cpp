#include "kda/bench/results.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include <fmt/format.h>


namespace kda::bench {

void RunRow::finalize() {
  gpu = summarize(gpu_s);
  cpu = summarize(cpu_s);
  std::vector<double> known;
  for (double c : clock_hz)
    if (std::isfinite(c) && c > 0.0) known.push_back(c);
  sm_clock_mean_hz = known.empty() ? kNaN : mean(known);
}

double achieved_Bps(const RunRow& row) {
  if (row.bytes <= 0 || !(row.gpu.median > 0.0)) return kNaN;
  return static_cast<double>(row.bytes) / row.gpu.median;
}

double floor_s(const RunContext& ctx, const RunRow& row) {
  if (row.floor_bytes <= 0 || !(ctx.floor_bw_Bps > 0.0)) return kNaN;
  return static_cast<double>(row.floor_bytes) / ctx.floor_bw_Bps;
}

double floor_share(const RunContext& ctx, const RunRow& row) {
  const double f = floor_s(ctx, row);
  if (std::isnan(f) || !(row.gpu.median > 0.0)) return kNaN;
  return f / row.gpu.median;
}

double bw_util(const RunContext& ctx, const RunRow& row) {
  const double a = achieved_Bps(row);
  if (std::isnan(a) || !(ctx.peak_mem_bw_Bps > 0.0)) return kNaN;
  return a / ctx.peak_mem_bw_Bps;
}

double clock_scaling(const RunContext& ctx, const RunRow& row) {
  if (!(ctx.default_sm_clock_hz > 0.0)) return kNaN;
  return row.sm_clock_mean_hz / ctx.default_sm_clock_hz;
}

const std::vector<Column>& result_columns() {
  using C = const RunContext&;
  using R = const RunRow&;
  auto i64 = [](auto v) { return Value(static_cast<int64_t>(v)); };
  auto name_of = [](auto e) { return Value(std::string(kda::harness::to_string(e))); };
  static const std::vector<Column> columns = {
      {"run_id", Unit::text, [](C c, R) { return Value(c.run_id); }, ""},
      {"utc_time", Unit::text, [](C c, R) { return Value(c.utc_time); }, ""},
      {"git_commit", Unit::text, [](C c, R) { return Value(c.git_commit); }, ""},
      {"device_name", Unit::text, [](C c, R) { return Value(c.device_name); }, ""},
      {"cc", Unit::text, [](C c, R) { return Value(c.cc); }, ""},
      {"sm_count", Unit::count, [=](C c, R) { return i64(c.sm_count); }, ""},
      {"default_sm_clock_hz", Unit::hertz, [](C c, R) { return Value(c.default_sm_clock_hz); }, ""},
      {"driver_version", Unit::count, [=](C c, R) { return i64(c.driver_version); }, ""},
      {"runtime_version", Unit::count, [=](C c, R) { return i64(c.runtime_version); }, ""},
      {"shape_id", Unit::text, [](C, R r) { return Value(r.shape_id); }, "shape"},
      {"batch", Unit::count, [=](C, R r) { return i64(r.size.batch); }, ""},
      {"tokens", Unit::count, [=](C, R r) { return i64(r.size.tokens); }, ""},
      {"heads", Unit::count, [=](C, R r) { return i64(r.size.heads); }, ""},
      {"num_seqs", Unit::count, [=](C, R r) { return i64(r.size.num_states); }, ""},
      {"token_heads", Unit::count, [=](C, R r) { return i64(r.size.token_heads()); }, ""},
      {"path", Unit::text, [=](C, R r) { return name_of(r.path); }, "path"},
      {"stage", Unit::text, [](C, R r) { return Value(r.stage); }, "stage"},
      {"mode", Unit::text, [](C, R r) { return Value(r.mode); }, "mode"},
      {"verdict", Unit::text, [=](C, R r) { return name_of(r.verdict); }, "verdict"},
      {"verdict_detail", Unit::text, [](C, R r) { return Value(r.verdict_detail); }, ""},
      {"samples", Unit::count, [=](C, R r) { return i64(r.gpu.n); }, "samples"},
      {"warmup_runs", Unit::count, [=](C, R r) { return i64(r.warmup_runs); }, ""},
      {"converged", Unit::count, [=](C, R r) { return i64(r.converged() ? 1 : 0); }, ""},
      {"timed_out", Unit::count, [=](C, R r) { return i64(r.timed_out() ? 1 : 0); }, ""},
      {"stop_reason", Unit::text, [](C, R r) { return Value(std::string(to_string(r.stop))); },
       "stop"},
      {"throttle_discards", Unit::count, [=](C, R r) { return i64(r.throttle_discards); },
       "throttled"},
      {"median_s", Unit::seconds, [](C, R r) { return Value(r.gpu.median); }, "median"},
      {"mean_s", Unit::seconds, [](C, R r) { return Value(r.gpu.mean); }, ""},
      {"min_s", Unit::seconds, [](C, R r) { return Value(r.gpu.min); }, "min"},
      {"max_s", Unit::seconds, [](C, R r) { return Value(r.gpu.max); }, "max"},
      {"p20_s", Unit::seconds, [](C, R r) { return Value(r.gpu.p20); }, "p20"},
      {"p80_s", Unit::seconds, [](C, R r) { return Value(r.gpu.p80); }, "p80"},
      {"q1_s", Unit::seconds, [](C, R r) { return Value(r.gpu.q1); }, ""},
      {"q3_s", Unit::seconds, [](C, R r) { return Value(r.gpu.q3); }, ""},
      {"noise", Unit::fraction, [](C, R r) { return Value(r.gpu.noise); }, "noise"},
      {"iqr_rel", Unit::fraction, [](C, R r) { return Value(r.gpu.iqr_rel); }, ""},
      {"cpu_mean_s", Unit::seconds, [](C, R r) { return Value(r.cpu.mean); }, "host"},
      {"cpu_median_s", Unit::seconds, [](C, R r) { return Value(r.cpu.median); }, ""},
      {"sm_clock_mean_hz", Unit::hertz, [](C, R r) { return Value(r.sm_clock_mean_hz); }, "clock"},
      {"clock_scaling", Unit::ratio, [](C c, R r) { return Value(clock_scaling(c, r)); }, ""},
      {"bytes", Unit::bytes,
       [=](C, R r) { return r.bytes > 0 ? i64(r.bytes) : Value(std::string()); }, "bytes"},
      {"floor_bytes", Unit::bytes,
       [=](C, R r) { return r.floor_bytes > 0 ? i64(r.floor_bytes) : Value(std::string()); }, ""},
      {"floor_s", Unit::seconds, [](C c, R r) { return Value(floor_s(c, r)); }, ""},
      {"achieved_Bps", Unit::bytes_per_s, [](C, R r) { return Value(achieved_Bps(r)); },
       "bandwidth"},
      {"floor_share", Unit::fraction, [](C c, R r) { return Value(floor_share(c, r)); },
       "of floor"},
      {"bw_util", Unit::fraction, [](C c, R r) { return Value(bw_util(c, r)); }, ""},
      {"workspace_bytes", Unit::bytes, [=](C, R r) { return i64(r.workspace_bytes); },
       "workspace"},
      {"seed", Unit::count, [=](C, R r) { return i64(r.seed); }, ""},
      {"wall_s", Unit::seconds, [](C, R r) { return Value(r.wall_s); }, ""},
      {"variant", Unit::text, [](C c, R) { return Value(c.variant); }, ""},
      {"calls_per_sample", Unit::count, [=](C, R r) { return i64(r.calls_per_sample); },
       "calls/sample"},
      {"sample_method", Unit::text, [](C, R r) { return Value(r.sample_method); }, "sampling"},
      {"gate", Unit::text, [](C, R r) { return Value(r.gate); }, "gate"},
  };
  return columns;
}

std::string csv_cell(const Value& value) {
  if (std::holds_alternative<std::monostate>(value)) return "";
  if (const auto* s = std::get_if<std::string>(&value)) return *s;
  if (const auto* i = std::get_if<int64_t>(&value)) return std::to_string(*i);
  return csv_number(std::get<double>(value));
}

std::string human_cell(const Value& value, Unit unit) {
  if (std::holds_alternative<std::monostate>(value)) return "";
  if (const auto* s = std::get_if<std::string>(&value)) return *s;
  if (const auto* i = std::get_if<int64_t>(&value)) {
    if (unit == Unit::count) return std::to_string(*i);
    return human_number(static_cast<double>(*i), unit);
  }
  return human_number(std::get<double>(value), unit);
}

kda::harness::Table results_table(const RunContext& ctx, const std::vector<RunRow>& rows,
                                  bool human) {
  std::vector<const Column*> shown;
  for (const auto& c : result_columns()) {
    if (human && c.md_title.empty()) continue;
    if (human && c.unit == Unit::text) {
      const bool all_empty = std::all_of(rows.begin(), rows.end(), [&](const RunRow& r) {
        return csv_cell(c.get(ctx, r)).empty();
      });
      if (all_empty && !rows.empty()) continue;
    }
    shown.push_back(&c);
  }
  kda::harness::Table table;
  for (const auto* c : shown)
    table.columns.push_back(human ? c->md_title + unit_suffix(c->unit) : c->name);
  for (const auto& r : rows) {
    std::vector<std::string> cells;
    for (const auto* c : shown) {
      const Value v = c->get(ctx, r);
      cells.push_back(human ? human_cell(v, c->unit) : csv_cell(v));
    }
    table.rows.push_back(std::move(cells));
  }
  return table;
}

kda::harness::CellTable results_cells(const RunContext& ctx, const std::vector<RunRow>& rows) {
  kda::harness::CellTable table;
  for (const auto& c : result_columns()) table.columns.push_back(c.name);
  for (const auto& r : rows) {
    std::vector<Value> cells;
    for (const auto& c : result_columns()) cells.push_back(c.get(ctx, r));
    table.rows.push_back(std::move(cells));
  }
  return table;
}

std::string results_csv(const RunContext& ctx, const std::vector<RunRow>& rows) {
  return kda::harness::to_csv(results_table(ctx, rows, false));
}

RunSummary summarize_run(const std::vector<RunRow>& rows) {
  RunSummary summary;
  std::map<std::pair<std::string, std::string>, size_t> at;  // (shape, mode) -> index
  std::vector<std::string> mode_order;
  for (const auto& r : rows) {
    if (!r.stage.empty()) continue;
    auto [it, fresh] = at.emplace(std::make_pair(r.shape_id, r.mode), summary.shapes.size());
    if (fresh) {
      summary.shapes.push_back({r.shape_id, r.mode});
      if (std::find(mode_order.begin(), mode_order.end(), r.mode) == mode_order.end())
        mode_order.push_back(r.mode);
    }
    ShapeComparison& s = summary.shapes[it->second];
    if (r.path == Path::fused) s.fused_s = r.gpu.median;
    if (r.path == Path::explicit_) s.explicit_s = r.gpu.median;
    if (r.path == Path::l2norm) s.l2norm_s = r.gpu.median;
    if (r.path == Path::raw) s.raw_s = r.gpu.median;
  }
  for (auto& s : summary.shapes) {
    s.ratio = s.fused_s / s.explicit_s;
    s.saving_s = s.explicit_s - s.fused_s;
    s.saving_share = s.saving_s / s.l2norm_s;
    s.raw_ratio = s.raw_s / s.fused_s;
  }
  for (const auto& mode : mode_order) {
    ModeGeomeans g;
    g.mode = mode;
    std::vector<double> fused, expl, l2, ratio, raw, raw_ratio;
    for (const auto& s : summary.shapes) {
      if (s.mode != mode) continue;
      if (!std::isnan(s.fused_s)) fused.push_back(s.fused_s);
      if (!std::isnan(s.explicit_s)) expl.push_back(s.explicit_s);
      if (!std::isnan(s.l2norm_s)) l2.push_back(s.l2norm_s);
      if (!std::isnan(s.ratio)) ratio.push_back(s.ratio);
      if (!std::isnan(s.raw_s)) raw.push_back(s.raw_s);
      if (!std::isnan(s.raw_ratio)) raw_ratio.push_back(s.raw_ratio);
    }
    g.shapes = static_cast<int64_t>(ratio.size());
    g.fused_s = geomean(fused);
    g.explicit_s = geomean(expl);
    g.l2norm_s = geomean(l2);
    g.ratio = geomean(ratio);
    g.saving_s = g.explicit_s - g.fused_s;
    g.saving_share = g.saving_s / g.l2norm_s;
    g.raw_shapes = static_cast<int64_t>(raw_ratio.size());
    g.raw_s = geomean(raw);
    g.raw_ratio = geomean(raw_ratio);
    summary.geomeans.push_back(g);
  }
  return summary;
}

std::vector<std::string> run_warnings(const std::vector<RunRow>& rows) {
  std::vector<std::string> out;
  for (const auto& r : rows) {
    std::string name = r.shape_id + " " + kda::harness::to_string(r.path) +
                       (r.stage.empty() ? "" : ":" + r.stage) + " " + r.mode;
    if (r.verdict == kda::harness::Verdict::failed)
      out.push_back(fmt::format("{}: verification failed: {}", name, r.verdict_detail));
    if (!r.converged())
      out.push_back(fmt::format("{}: did not converge ({}) after {} samples, noise {}", name,
                                to_string(r.stop), r.gpu.n, percent_text(r.gpu.noise)));
    if (r.throttle_discards > 0)
      out.push_back(fmt::format("{}: {} samples discarded as throttled (SM clock below the "
                                "threshold)",
                                name, r.throttle_discards));
    if (r.stop != StopReason::noise_target && r.gpu.noise >= kClockNoiseWorthNaming) {
      if (const auto clock = clock_driven_noise(r)) {
        out.push_back(fmt::format(
            "{}: noise {} follows the SM clock (correlation of time with 1/clock {:.2f}; "
            "samples at {:.0f}-{:.0f} MHz): the card changed clock steps during the row (power "
            "or temperature), a spread the kernel does not cause; compare two runs to see that "
            "the median repeats",
            name, percent_text(r.gpu.noise), clock->correlation, clock->min_hz / 1e6,
            clock->max_hz / 1e6));
      }
    }
  }
  return out;
}

std::optional<ClockNoise> clock_driven_noise(const RunRow& row) {
  if (row.clock_hz.size() != row.gpu_s.size()) return std::nullopt;
  std::vector<double> period(row.clock_hz.size());
  ClockNoise c;
  c.min_hz = std::numeric_limits<double>::infinity();
  c.max_hz = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < period.size(); ++i) {
    const double hz = row.clock_hz[i];
    period[i] = hz > 0.0 ? 1.0 / hz : kNaN;  // NaN: clock unknown, the pair is left out
    if (hz > 0.0) {
      c.min_hz = std::min(c.min_hz, hz);
      c.max_hz = std::max(c.max_hz, hz);
    }
  }
  c.correlation = correlation(row.gpu_s, period);
  if (!(c.correlation >= kClockNoiseCorrelation)) return std::nullopt;
  return c;
}

std::string results_markdown(const RunContext& ctx, const std::vector<RunRow>& rows,
                             const RunSummary& summary) {
  std::string out = "# kda-bench\n\n";
  out += fmt::format(
      "- device {}: {} (sm {}, {} SMs, L2 {} MiB, default SM clock {} MHz, peak {} TB/s)\n",
      ctx.device_index, ctx.device_name, ctx.cc, ctx.sm_count, ctx.l2_bytes >> 20,
      human_number(ctx.default_sm_clock_hz, Unit::hertz),
      human_number(ctx.peak_mem_bw_Bps, Unit::bytes_per_s));
  out += fmt::format("- driver {}, runtime {}; commit {}; build {}\n", ctx.driver_version,
                     ctx.runtime_version, ctx.git_commit, ctx.build_flags);
  out += fmt::format("- shapes {}; seed {}; kernel variant {}; byte floor at {} TB/s; {}\n",
                     kda::harness::escape_controls(ctx.shapes_file), ctx.seed,
                     ctx.variant.empty() ? "-" : ctx.variant,
                     human_number(ctx.floor_bw_Bps, Unit::bytes_per_s), ctx.utc_time);
  out += fmt::format(
      "- stopping: min {} samples, min {} s GPU time, max noise {}, timeout {} s; throttle below "
      "{} of the default clock\n\n",
      ctx.stopping.min_samples, ctx.stopping.min_time_s, percent_text(ctx.stopping.max_noise),
      ctx.stopping.timeout_s, percent_text(ctx.throttle.threshold));

  out += "## Results\n\n" + kda::harness::to_markdown(results_table(ctx, rows, true));
  out += "\nGPU time from CUDA events (host: the caller's view, steady clock), per call; noise = "
         "relative stdev of the samples; of floor = byte-floor time / median (100% = at the "
         "floor); sampling: call = one call per event pair, graph = one replay of the call's "
         "CUDA graph, graph_batch = one replay of a graph of calls/sample back-to-back calls "
         "(calls shorter than the minimum sample time; times are per call).\n";

  if (!summary.shapes.empty()) {
    kda::harness::Table t;
    t.columns = {"shape", "mode", "fused (us)", "explicit (us)", "l2norm (us)", "fused/explicit",
                 "saving (us)", "saving / l2norm (%)"};
    auto add = [&](const std::string& name, const std::string& mode, double f, double e, double l,
                   double ratio, double saving, double share) {
      t.rows.push_back({name, mode, human_number(f, Unit::seconds),
                        human_number(e, Unit::seconds), human_number(l, Unit::seconds),
                        human_number(ratio, Unit::ratio), human_number(saving, Unit::seconds),
                        human_number(share, Unit::fraction)});
    };
    for (const auto& s : summary.shapes)
      add(s.shape_id, s.mode, s.fused_s, s.explicit_s, s.l2norm_s, s.ratio, s.saving_s,
          s.saving_share);
    for (const auto& g : summary.geomeans)
      add(fmt::format("geomean ({} shapes)", g.shapes), g.mode, g.fused_s, g.explicit_s,
          g.l2norm_s, g.ratio, g.saving_s, g.saving_share);
    out += "\n## Fused vs explicit\n\n" + kda::harness::to_markdown(t);
    out += "\nMedians; saving = explicit - fused; geomean rows: geomeans over the shapes, the "
           "saving taken at the geomeans.\n";
  }
  const bool has_raw = std::any_of(summary.shapes.begin(), summary.shapes.end(),
                                   [](const ShapeComparison& s) { return !std::isnan(s.raw_s); });
  if (has_raw) {
    kda::harness::Table t;
    t.columns = {"shape", "mode", "raw (us)", "fused (us)", "raw/fused"};
    auto add = [&](const std::string& name, const std::string& mode, double raw, double fused,
                   double ratio) {
      t.rows.push_back({name, mode, human_number(raw, Unit::seconds),
                        human_number(fused, Unit::seconds), human_number(ratio, Unit::ratio)});
    };
    for (const auto& s : summary.shapes) add(s.shape_id, s.mode, s.raw_s, s.fused_s, s.raw_ratio);
    for (const auto& g : summary.geomeans) {
      add(fmt::format("geomean ({} shapes)", g.raw_shapes), g.mode, g.raw_s, g.fused_s,
          g.raw_ratio);
    }
    out += "\n## Raw vs fused\n\n" + kda::harness::to_markdown(t);
    out += "\nMedians; raw = the forward on raw k, gate and beta logits (the norms, the gate "
           "producer and the sigmoid in the kernel), fused = the forward on the contract inputs; "
           "geomean rows: raw/fused is the geomean of the shapes' ratios.\n";
  }
  if (!ctx.stages_not_run.empty()) {
    out += "\n## Stages not run\n\nThese calls' kernel choice runs other stages (the two kernels' "
           "prep and scan, or the one pass): the stage enqueued nothing, so it has no rows.\n\n";
    for (const auto& s : ctx.stages_not_run) out += "- " + s + "\n";
  }
  const auto warnings = run_warnings(rows);
  if (!warnings.empty()) {
    out += "\n## Warnings\n\n";
    for (const auto& w : warnings) out += "- " + w + "\n";
  }
  return out;
}

}  // namespace kda::bench
