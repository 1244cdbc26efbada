// Noise-aware comparison of two timing tables (pure CPU): `kda-bench compare A.csv B.csv` and
// `kda-bench --baseline A.csv`.
//
// Rows are matched on (shape_id, path, stage, mode); a column that one of the two files lacks is
// left out of the key (a peer's CSV need only have shape_id, path, median_s and, ideally, noise).
// For each matched row, with A the baseline and B the new run:
//     ratio     = median_B / median_A                         (< 1: B is faster)
//     threshold = max(noise_A, noise_B, min_threshold)        (noise = relative stdev)
//     SAME    if |ratio − 1| <= threshold
//     FASTER  if ratio < 1 − threshold
//     SLOWER  if ratio > 1 + threshold
//     INVALID if either median is missing, not finite or not > 0, or a noise is negative or not
//             finite (a noise of NaN is a missing one).
// A missing or empty noise counts as 0 (the min_threshold floor still applies). The geomean of
// the ratios is taken over the valid rows. In a CSV, an empty median is a missing one (INVALID);
// a median that is there must be a finite time > 0 and a noise a finite fraction >= 0, or the
// file is refused: a negative, NaN or infinite noise would make any slowdown SAME.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kda/harness/report.h"

namespace kda::bench {

struct TimingRecord {
  std::string shape_id, path, stage, mode;
  std::string verdict;  // the verdict column ("passed", "failed", "not verified"), if any
  double median_s = 0.0;
  double noise = 0.0;
  int row = 0;  // 1-based data row in the source file (the header is row 0)
};

struct TimingTable {
  std::string source;
  bool has_stage = false, has_mode = false, has_verdict = false;
  std::vector<TimingRecord> records;
};

class CompareError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Accepted columns: shape_id; path (or impl); median_s (or median_ms); noise (or stdev_rel, a
// fraction) — optional; stage, mode, verdict — optional. Throws CompareError naming the file,
// the row and the column for a missing column, a value that is not a number, a median that is
// not a finite time > 0 or a noise that is not a finite fraction >= 0 (empty cells are missing
// values).
TimingTable timing_table(const kda::harness::Table& csv, const std::string& source);
// read_csv + timing_table; CompareError for an unreadable file too.
TimingTable read_timing_table(const std::string& path);

enum class Change { same, faster, slower, invalid };
const char* to_string(Change change);  // "SAME", "FASTER", "SLOWER", "INVALID"

struct Classification {
  Change change = Change::invalid;
  double ratio = 0.0;
  double threshold = 0.0;
};
Classification classify(double median_a, double noise_a, double median_b, double noise_b,
                        double min_threshold);

struct CompareConfig {
  double min_threshold = 0.01;
  std::optional<std::string> mode;    // keep only rows of this mode (files with a mode column)
  std::optional<std::string> a_path;  // compare path a_path of A ...
  std::optional<std::string> b_path;  // ... with path b_path of B (paths then leave the key)
};

struct CompareEntry {
  std::string shape_id, path, stage, mode;  // key (as in A)
  double median_a = 0, median_b = 0, noise_a = 0, noise_b = 0;
  std::string verdict_b;  // B's verdict column ("" when B has none)
  Classification result;
};

struct CompareReport {
  std::vector<CompareEntry> entries;                 // in A's row order
  std::vector<std::string> only_in_a, only_in_b;     // keys, readable
  double geomean_ratio = 0.0;                        // NaN when no valid entry
  int64_t same = 0, faster = 0, slower = 0, invalid = 0;
};

// Throws CompareError when a key occurs twice in one file (says which rows) — e.g. a file with
// several modes compared against one without a mode column: pass CompareConfig::mode.
CompareReport compare_tables(const TimingTable& a, const TimingTable& b,
                             const CompareConfig& config);

// What makes `compare --fail-on-slower` fail, one line each: SLOWER rows, INVALID rows, rows of A
// that B lacks, and rows of B whose verdict is not "passed" (when B has a verdict column: a time
// of an output that failed or was not verified proves nothing). Empty when the gate passes.
std::vector<std::string> regression_gate_failures(const CompareReport& report);

// The per-row table (markdown cells or raw CSV values) and the full human report.
kda::harness::Table compare_table(const CompareReport& report, bool human);
std::string compare_markdown(const CompareReport& report, const std::string& name_a,
                             const std::string& name_b, const CompareConfig& config);

}  // namespace kda::bench
