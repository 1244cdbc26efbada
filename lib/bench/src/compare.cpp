#include "kda/bench/compare.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "kda/bench/format.h"
#include "kda/bench/statistics.h"

namespace kda::bench {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Parses a whole cell as a double; "" gives NaN. Throws on anything else that is not a number.
double parse_number(const std::string& cell, const std::string& source, int row,
                    const std::string& column) {
  if (cell.empty()) return kNaN;
  const char* begin = cell.c_str();
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(begin, &end);
  while (end && *end == ' ') ++end;
  if (end == begin || *end != '\0')
    throw CompareError(fmt::format("{}: data row {}: column '{}': '{}' is not a number", source,
                                   row, column, cell));
  return value;
}

// A median: missing (empty, NaN) or a finite time > 0.
double parse_median(const std::string& cell, const std::string& source, int row,
                    const std::string& column, double scale) {
  const double value = parse_number(cell, source, row, column);
  if (!cell.empty() && !(std::isfinite(value) && value > 0.0)) {
    throw CompareError(fmt::format("{}: data row {}: column '{}': '{}' is not a time (a finite "
                                   "number > 0, or empty for a missing one)",
                                   source, row, column, cell));
  }
  return value * scale;
}

// A noise: missing (empty) or a finite fraction >= 0.
double parse_noise(const std::string& cell, const std::string& source, int row,
                   const std::string& column) {
  const double value = parse_number(cell, source, row, column);
  if (!cell.empty() && !(std::isfinite(value) && value >= 0.0)) {
    throw CompareError(fmt::format("{}: data row {}: column '{}': '{}' is not a noise (a finite "
                                   "fraction >= 0, or empty for a missing one); it sets how large "
                                   "a change counts as SAME",
                                   source, row, column, cell));
  }
  return value;
}

std::string key_text(const TimingRecord& r, bool with_path) {
  std::string key = r.shape_id;
  if (with_path) key += " / " + r.path;
  if (!r.stage.empty()) key += " / " + r.stage;
  if (!r.mode.empty()) key += " (" + r.mode + ")";
  return key;
}

}  // namespace

TimingTable timing_table(const kda::harness::Table& csv, const std::string& source) {
  auto pick = [&](std::initializer_list<const char*> names) {
    for (const char* n : names)
      for (size_t c = 0; c < csv.columns.size(); ++c)
        if (csv.columns[c] == n) return static_cast<int>(c);
    return -1;
  };
  std::string present;
  for (const auto& h : csv.columns) present += (present.empty() ? "" : ", ") + h;

  const int shape = pick({"shape_id"});
  const int path = pick({"path", "impl"});
  const int median_s = pick({"median_s"});
  const int median_ms = median_s >= 0 ? -1 : pick({"median_ms"});
  const int noise = pick({"noise", "stdev_rel"});
  const int stage = pick({"stage"});
  const int mode = pick({"mode"});
  const int verdict = pick({"verdict"});
  auto missing = [&](const char* what) {
    throw CompareError(fmt::format("{}: no '{}' column (the file has: {}); kda-bench compare "
                                   "needs shape_id, path, median_s and optionally noise",
                                   source, what, present));
  };
  if (shape < 0) missing("shape_id");
  if (path < 0) missing("path");
  if (median_s < 0 && median_ms < 0) missing("median_s");

  TimingTable table;
  table.source = source;
  table.has_stage = stage >= 0;
  table.has_mode = mode >= 0;
  table.has_verdict = verdict >= 0;
  for (size_t r = 0; r < csv.rows.size(); ++r) {
    const auto& row = csv.rows[r];
    const int line = static_cast<int>(r) + 1;
    TimingRecord rec;
    rec.row = line;
    rec.shape_id = row[shape];
    rec.path = row[path];
    if (stage >= 0) rec.stage = row[stage];
    if (mode >= 0) rec.mode = row[mode];
    if (verdict >= 0) rec.verdict = row[verdict];
    if (rec.shape_id.empty())
      throw CompareError(fmt::format("{}: data row {}: empty shape_id", source, line));
    rec.median_s = median_s >= 0 ? parse_median(row[median_s], source, line, "median_s", 1.0)
                                 : parse_median(row[median_ms], source, line, "median_ms", 1e-3);
    rec.noise = noise >= 0 ? parse_noise(row[noise], source, line, csv.columns[noise]) : kNaN;
    table.records.push_back(std::move(rec));
  }
  return table;
}

TimingTable read_timing_table(const std::string& path) {
  try {
    return timing_table(kda::harness::read_csv(path), path);
  } catch (const kda::harness::CsvError& e) {
    throw CompareError(e.what());
  }
}

const char* to_string(Change change) {
  switch (change) {
    case Change::same: return "SAME";
    case Change::faster: return "FASTER";
    case Change::slower: return "SLOWER";
    case Change::invalid: return "INVALID";
  }
  return "?";
}

Classification classify(double median_a, double noise_a, double median_b, double noise_b,
                        double min_threshold) {
  Classification c;
  auto usable = [](double m) { return std::isfinite(m) && m > 0.0; };
  // NaN is a missing noise; a negative or infinite one cannot bound anything.
  auto usable_noise = [](double n) { return std::isnan(n) || (std::isfinite(n) && n >= 0.0); };
  auto noise_or_zero = [](double n) { return std::isnan(n) ? 0.0 : n; };
  if (!usable(median_a) || !usable(median_b) || !usable_noise(noise_a) || !usable_noise(noise_b)) {
    c.ratio = kNaN;
    c.threshold = kNaN;
    return c;
  }
  c.ratio = median_b / median_a;
  c.threshold = std::max({noise_or_zero(noise_a), noise_or_zero(noise_b), min_threshold});
  if (std::fabs(c.ratio - 1.0) <= c.threshold) {
    c.change = Change::same;
  } else {
    c.change = c.ratio < 1.0 ? Change::faster : Change::slower;
  }
  return c;
}

CompareReport compare_tables(const TimingTable& a, const TimingTable& b,
                             const CompareConfig& config) {
  const bool use_mode = a.has_mode && b.has_mode;
  const bool use_stage = a.has_stage && b.has_stage;
  const bool use_path = !(config.a_path || config.b_path);

  auto keep = [&](const TimingTable& t, const TimingRecord& r,
                  const std::optional<std::string>& only_path) {
    if (config.mode && t.has_mode && r.mode != *config.mode) return false;
    if (only_path && r.path != *only_path) return false;
    return true;
  };
  auto key_of = [&](const TimingRecord& r) {
    TimingRecord k;
    k.shape_id = r.shape_id;
    if (use_path) k.path = r.path;
    if (use_stage) k.stage = r.stage;
    if (use_mode) k.mode = r.mode;
    return k;
  };
  using Key = std::tuple<std::string, std::string, std::string, std::string>;
  auto tuple_of = [](const TimingRecord& k) { return Key{k.shape_id, k.path, k.stage, k.mode}; };

  auto index = [&](const TimingTable& t, const std::optional<std::string>& only_path) {
    std::map<Key, const TimingRecord*> map;
    for (const auto& r : t.records) {
      if (!keep(t, r, only_path)) continue;
      auto [it, fresh] = map.emplace(tuple_of(key_of(r)), &r);
      if (!fresh)
        throw CompareError(fmt::format(
            "{}: data rows {} and {} both match '{}'; select one mode with --mode (or compare "
            "files that both have mode and stage columns)",
            t.source, it->second->row, r.row, key_text(key_of(r), use_path)));
    }
    return map;
  };
  const auto map_a = index(a, config.a_path);
  const auto map_b = index(b, config.b_path);

  CompareReport report;
  std::vector<double> ratios;
  for (const auto& r : a.records) {
    if (!keep(a, r, config.a_path)) continue;
    const TimingRecord k = key_of(r);
    auto it = map_b.find(tuple_of(k));
    if (it == map_b.end()) {
      report.only_in_a.push_back(key_text(k, use_path));
      continue;
    }
    CompareEntry e;
    e.shape_id = r.shape_id;
    e.path = use_path ? r.path : r.path + " vs " + it->second->path;
    e.stage = r.stage;
    e.mode = use_mode ? r.mode : (b.has_mode ? it->second->mode : r.mode);
    e.median_a = r.median_s;
    e.median_b = it->second->median_s;
    e.noise_a = r.noise;
    e.noise_b = it->second->noise;
    e.verdict_b = it->second->verdict;
    e.result = classify(e.median_a, e.noise_a, e.median_b, e.noise_b, config.min_threshold);
    switch (e.result.change) {
      case Change::same: ++report.same; break;
      case Change::faster: ++report.faster; break;
      case Change::slower: ++report.slower; break;
      case Change::invalid: ++report.invalid; break;
    }
    if (e.result.change != Change::invalid) ratios.push_back(e.result.ratio);
    report.entries.push_back(std::move(e));
  }
  for (const auto& r : b.records) {
    if (!keep(b, r, config.b_path)) continue;
    if (!map_a.count(tuple_of(key_of(r)))) report.only_in_b.push_back(key_text(key_of(r), use_path));
  }
  report.geomean_ratio = geomean(ratios);
  return report;
}

std::vector<std::string> regression_gate_failures(const CompareReport& report) {
  std::vector<std::string> failures;
  auto key = [](const CompareEntry& e) {
    std::string k = e.shape_id + " / " + e.path;
    if (!e.stage.empty()) k += " / " + e.stage;
    if (!e.mode.empty()) k += " (" + e.mode + ")";
    return k;
  };
  for (const CompareEntry& e : report.entries) {
    if (e.result.change == Change::slower) {
      failures.push_back(fmt::format("SLOWER: {} (B/A {:.3f})", key(e), e.result.ratio));
    } else if (e.result.change == Change::invalid) {
      failures.push_back(fmt::format("INVALID: {} (no usable median or noise in A or B)", key(e)));
    }
    if (!e.verdict_b.empty() && e.verdict_b != "passed") {
      failures.push_back(fmt::format("not verified in B: {} (verdict '{}')", key(e), e.verdict_b));
    }
  }
  for (const std::string& k : report.only_in_a) failures.push_back("missing in B: " + k);
  return failures;
}

kda::harness::Table compare_table(const CompareReport& report, bool human) {
  kda::harness::Table t;
  auto num = [&](double v, Unit unit) { return human ? human_number(v, unit) : csv_number(v); };
  auto title = [&](const char* name, const char* csv_name, Unit unit) {
    return human ? std::string(name) + unit_suffix(unit) : std::string(csv_name);
  };
  t.columns = {"shape_id", "path", "stage", "mode",
               title("A median", "median_a_s", Unit::seconds),
               title("A noise", "noise_a", Unit::fraction),
               title("B median", "median_b_s", Unit::seconds),
               title("B noise", "noise_b", Unit::fraction),
               human ? "B/A" : "ratio",
               title("threshold", "threshold", Unit::fraction),
               "change"};
  for (const auto& e : report.entries) {
    t.rows.push_back({e.shape_id, e.path, e.stage, e.mode, num(e.median_a, Unit::seconds),
                      num(e.noise_a, Unit::fraction), num(e.median_b, Unit::seconds),
                      num(e.noise_b, Unit::fraction), num(e.result.ratio, Unit::ratio),
                      num(e.result.threshold, Unit::fraction), to_string(e.result.change)});
  }
  if (human) {
    // Drop stage/mode when no row has one (a peer's CSV has neither).
    for (int c : {3, 2}) {
      bool any = false;
      for (const auto& row : t.rows) any = any || !row[c].empty();
      if (any) continue;
      t.columns.erase(t.columns.begin() + c);
      for (auto& row : t.rows) row.erase(row.begin() + c);
    }
  }
  return t;
}

std::string compare_markdown(const CompareReport& report, const std::string& name_a,
                             const std::string& name_b, const CompareConfig& config) {
  // The names are paths from the command line: no control character reaches the report raw.
  std::string out = fmt::format("# kda-bench compare\n\n- A (baseline): {}\n- B (new): {}\n",
                                kda::harness::escape_controls(name_a),
                                kda::harness::escape_controls(name_b));
  out += fmt::format(
      "- ratio = median_B / median_A (< 1: B is faster); SAME when |ratio - 1| <= "
      "max(noise_A, noise_B, {})\n\n",
      percent_text(config.min_threshold));
  out += kda::harness::to_markdown(compare_table(report, true));
  out += fmt::format(
      "\ngeomean B/A over {} rows: {}; SAME {}, FASTER {}, SLOWER {}, INVALID {}\n",
      report.entries.size() - static_cast<size_t>(report.invalid),
      human_number(report.geomean_ratio, Unit::ratio), report.same, report.faster, report.slower,
      report.invalid);
  for (const auto& k : report.only_in_a) {
    out += "only in A: " + kda::harness::escape_controls(k) + "\n";
  }
  for (const auto& k : report.only_in_b) {
    out += "only in B: " + kda::harness::escape_controls(k) + "\n";
  }
  return out;
}

}  // namespace kda::bench
