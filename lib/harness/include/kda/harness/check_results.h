// The result model of kda-check (pure CPU): one CheckRow per judged tensor, path or API check,
// its columns described once in check_columns(); the markdown table, the CSV and the JSON rows are
// all printed from that list, so a column added there reaches every report (docs/checking.md
// describes each).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kda/harness/budget.h"
#include "kda/harness/cells.h"
#include "kda/harness/device_info.h"
#include "kda/harness/report.h"
#include "kda/harness/verdict.h"

namespace kda::harness {

// The repeat column: what a second run of the same call (or the other path) gave.
enum class Repeat {
  none,                  // "-": not repeated
  bitwise,               // "bitwise": same bits
  differs,               // "differs"
  equals_explicit,       // "= explicit": the fused output equals the explicit one bit for bit
  differs_from_explicit  // "!= explicit"
};
const char* to_string(Repeat repeat);

// One line of the tolerance report.
struct CheckRow {
  std::string shape;
  std::string path;    // fused | explicit | l2norm | ref-chunked-f64 | ref-chunked-f32 | gpu
  std::string tensor;  // out | final_state | q_hat | out vs explicit (c) | soak | ... | -
  std::optional<std::string> gate;     // the inputs' gate recipe (shapes/README.md), or "loaded"
  std::optional<std::string> variant;  // kernel variant of the forward (GPU forward rows)
  std::optional<StateCarry> carry;     // the shape's state-carry figure (output rows)
  int64_t elements = 0;
  std::optional<Judgement> judgement;  // empty for rows that are not a tolerance check
  Repeat repeat = Repeat::none;
  int64_t inactive_nonzero = 0;
  double reference_seconds = 0.0;
  Verdict verdict = Verdict::not_verified;
  std::string reason;  // why: the text after "failed: " (or "passed: ", "not verified: ")

  bool failed() const { return verdict == Verdict::failed; }
  // "passed", "failed: <reason>", "not verified: <reason>", "passed: <what>" (soak rows).
  std::string verdict_text() const;
};

// A row for `judgement` with its verdict: passed, or failed with the judgement's reasons.
CheckRow judgement_row(const std::string& shape, const std::string& path,
                       const std::string& tensor, const Judgement& judgement);

// How a column's cells read as text (markdown and CSV); JSON takes the typed cell.
enum class CellStyle {
  text,        // as is; empty -> "-"
  scientific,  // "1.234e-03", "nan", "inf"
  integer,
  seconds_3,   // "0.123"
};

struct CheckColumn {
  std::string name;  // the CSV header and the JSON key
  CellStyle style;
  std::function<Cell(const CheckRow&)> get;
};

// The columns of the markdown report (full = false) or of the CSV and JSON rows (full = true).
// Stable order: the CSV header is a format others read.
const std::vector<CheckColumn>& check_columns(bool full);

std::string check_cell_text(const Cell& cell, CellStyle style);
CellTable check_cells(const std::vector<CheckRow>& rows, bool full);
Table check_table(const std::vector<CheckRow>& rows, bool full);  // the cells as text

struct CheckCounts {
  int64_t rows = 0, passed = 0, failed = 0, not_verified = 0;
};
CheckCounts count_verdicts(const std::vector<CheckRow>& rows);

// Whole-run facts the reports name.
struct CheckContext {
  std::string backend;  // gpu | fused | explicit | reference
  std::string git_commit, build_flags;
  uint64_t seed = 0;
  double rms_limit = 5e-3;
  std::vector<std::string> variants;  // GPU backends only
  std::optional<DeviceInfo> device;   // GPU backends only
  std::string load_dir;               // empty: generated inputs
  std::vector<std::string> argv;
};

std::string check_markdown(const CheckContext& ctx, const std::vector<CheckRow>& rows,
                           double total_seconds);
std::string check_csv(const std::vector<CheckRow>& rows);
// The JSON report: metadata, every full column of every row (typed), and the counts.
std::string check_json(const CheckContext& ctx, const std::vector<CheckRow>& rows);

}  // namespace kda::harness
