// The one result model of kda-bench (pure CPU): every number a report shows is a column of a
// RunRow, described once in result_columns(); the CSV, markdown and JSON printers are generic
// over that list, so adding a metric touches one place.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "kda/bench/bytes_model.h"
#include "kda/bench/format.h"
#include "kda/bench/statistics.h"
#include "kda/bench/stopping.h"
#include "kda/bench/throttle.h"
#include "kda/harness/cells.h"
#include "kda/harness/report.h"
#include "kda/harness/verdict.h"

namespace kda::bench {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Copy rate the byte floor is measured against: device-to-device copy of 1 GiB on the H200,
// 4.25 TB/s (performance.md "Floors"). Overridable with --floor-bandwidth.
inline constexpr double kDefaultFloorBandwidth = 4.25e12;

// Whole-run facts, repeated in the first columns of every CSV row so a row stands alone.
struct RunContext {
  std::string run_id, utc_time;
  std::string git_commit, build_flags;
  std::string device_name, cc;
  int device_index = 0, sm_count = 0;
  int64_t l2_bytes = 0, global_mem_bytes = 0;
  double default_sm_clock_hz = kNaN, peak_mem_bw_Bps = kNaN;
  int driver_version = 0, runtime_version = 0;
  bool ecc = false;
  uint64_t seed = 0;  // the run's --seed
  std::string variant;  // kernel variant of the forward (kda/lab/variants.h name)
  double floor_bw_Bps = kDefaultFloorBandwidth;
  std::string shapes_file;
  std::vector<std::string> argv;
  StoppingConfig stopping;
  ThrottleConfig throttle;
  int64_t warmup_runs = 0;
  double cooldown_s = 0.0;
  int64_t flush_bytes = 0;
  // --stages: "shape path:stage" of each stage the call's kernel choice did not run (it enqueued
  // nothing, gpu::launches_work), which therefore has no rows.
  std::vector<std::string> stages_not_run;
};

// One (shape, path, stage, mode) measurement.
struct RunRow {
  std::string shape_id;
  ProblemSize size;
  Path path = Path::fused;
  std::string stage;  // empty for the whole path; else the forward stage's name
  std::string mode;   // warm | cold | graph | triton
  kda::harness::Verdict verdict = kda::harness::Verdict::not_verified;
  std::string verdict_detail;  // the checker's full verdict text
  uint64_t seed = 0;                     // seed of the inputs (a shape's own seed wins)
  std::string gate;                      // the inputs' gate recipe (shapes/README.md `gate:`)

  int64_t warmup_runs = 0;
  int64_t calls_per_sample = 1;  // calls inside one event pair (graph_batch: N, else 1)
  std::string sample_method = "call";  // call | graph | graph_batch (sampling.h)
  StopReason stop = StopReason::none;
  int64_t throttle_discards = 0;
  int64_t rejected_samples = 0;  // non-finite times the stopping rule refused
  double wall_s = 0.0;           // wall time of the measurement loop

  std::vector<double> gpu_s, cpu_s, clock_hz;  // accepted samples (clock NaN when unknown)
  Summary gpu, cpu;                            // set by finalize()
  double sm_clock_mean_hz = kNaN;              // set by finalize()

  int64_t bytes = 0;        // bytes model of the path; 0 = no model (stages)
  int64_t floor_bytes = 0;  // byte floor of the operation; 0 = none
  int64_t workspace_bytes = 0;

  void finalize();  // summaries from the samples
  bool converged() const { return is_converged(stop); }
  bool timed_out() const { return stop == StopReason::timeout; }
};

// Derived metrics (NaN where undefined).
double achieved_Bps(const RunRow& row);                          // bytes / median
double floor_s(const RunContext& ctx, const RunRow& row);        // floor_bytes / floor bandwidth
double floor_share(const RunContext& ctx, const RunRow& row);    // floor_s / median (1 = floor)
double bw_util(const RunContext& ctx, const RunRow& row);        // achieved / theoretical peak
double clock_scaling(const RunContext& ctx, const RunRow& row);  // mean clock / default clock

// A typed cell (kda/harness/cells.h); the columns here never leave one empty: a missing number
// is NaN, a missing text "".
using Value = kda::harness::Cell;

struct Column {
  std::string name;      // CSV / JSON name: snake_case, SI unit suffix (_s, _Bps, _hz)
  Unit unit;
  std::function<Value(const RunContext&, const RunRow&)> get;
  std::string md_title;  // empty: not in the markdown table (the unit is appended)
};

// Stable order; new columns are appended at the end, never inserted.
const std::vector<Column>& result_columns();

std::string csv_cell(const Value& value);               // raw SI number / text ("" for NaN)
std::string human_cell(const Value& value, Unit unit);   // markdown cell (format.h units)

// Every column with raw values (the CSV), or the markdown columns with human values; in the
// human table, text columns that are empty on every row are left out.
kda::harness::Table results_table(const RunContext& ctx, const std::vector<RunRow>& rows,
                                  bool human);
std::string results_csv(const RunContext& ctx, const std::vector<RunRow>& rows);
// Every column, typed (the JSON rows: kda/harness/cells.h json_rows).
kda::harness::CellTable results_cells(const RunContext& ctx, const std::vector<RunRow>& rows);

// Fused vs explicit per (shape, mode), from whole-path rows; and the raw path against the fused
// one (the same forward, with the gate producer, k's norm and the sigmoid moved into it).
struct ShapeComparison {
  std::string shape_id, mode;
  double fused_s = kNaN, explicit_s = kNaN, l2norm_s = kNaN;  // medians
  double ratio = kNaN;         // fused / explicit
  double saving_s = kNaN;      // explicit - fused
  double saving_share = kNaN;  // saving / l2norm
  double raw_s = kNaN;         // median of the raw path
  double raw_ratio = kNaN;     // raw / fused
};
struct ModeGeomeans {
  std::string mode;
  int64_t shapes = 0;  // shapes with both fused and explicit
  double fused_s = kNaN, explicit_s = kNaN, l2norm_s = kNaN, ratio = kNaN;
  double saving_s = kNaN, saving_share = kNaN;  // at the geomeans: explicit - fused, / l2norm
  int64_t raw_shapes = 0;  // shapes with both raw and fused
  double raw_s = kNaN, raw_ratio = kNaN;  // geomeans of the raw medians and of raw / fused
};
struct RunSummary {
  std::vector<ShapeComparison> shapes;
  std::vector<ModeGeomeans> geomeans;
};
RunSummary summarize_run(const std::vector<RunRow>& rows);

// The human report: context, results table, fused vs explicit table, the raw vs fused table (when
// the run has raw rows), warnings.
std::string results_markdown(const RunContext& ctx, const std::vector<RunRow>& rows,
                             const RunSummary& summary);
// Lines worth a warning: failed verdicts, non-converged rows, throttling, and rows that stopped
// above the noise target with a noise of at least kClockNoiseWorthNaming that follows the SM
// clock (clock_driven_noise).
std::vector<std::string> run_warnings(const std::vector<RunRow>& rows);

// A row whose sample times rise as its per-sample SM clock falls: the card stepped its clock
// during the row (power or temperature), so the spread is the card's, not the kernel's. Set when
// the Pearson correlation of the times with 1 / clock (samples whose clock is known) is at least
// kClockNoiseCorrelation.
inline constexpr double kClockNoiseCorrelation = 0.7;
inline constexpr double kClockNoiseWorthNaming = 0.01;  // 1 %: issue 4's bar for a row
struct ClockNoise {
  double correlation = 0;       // of time with 1 / clock
  double min_hz = 0, max_hz = 0;  // the row's clock range
};
std::optional<ClockNoise> clock_driven_noise(const RunRow& row);

}  // namespace kda::bench
