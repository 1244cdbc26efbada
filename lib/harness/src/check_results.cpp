// kda-check's result model and its printers (check_results.h).
#include "kda/harness/check_results.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kda::harness {

const char* to_string(Repeat repeat) {
  switch (repeat) {
    case Repeat::none: return "-";
    case Repeat::bitwise: return "bitwise";
    case Repeat::differs: return "differs";
    case Repeat::equals_explicit: return "= explicit";
    case Repeat::differs_from_explicit: return "!= explicit";
  }
  return "?";
}

std::string CheckRow::verdict_text() const {
  const std::string word = to_string(verdict);
  return reason.empty() ? word : word + ": " + reason;
}

CheckRow judgement_row(const std::string& shape, const std::string& path,
                       const std::string& tensor, const Judgement& judgement) {
  CheckRow row;
  row.shape = shape;
  row.path = path;
  row.tensor = tensor;
  row.elements = judgement.elements;
  row.judgement = judgement;
  row.verdict = judgement.passed() ? Verdict::passed : Verdict::failed;
  row.reason = judgement.reasons();
  return row;
}

namespace {

Cell text(const std::optional<std::string>& s) { return s ? Cell(*s) : Cell(); }

// A field of the judgement, or empty for rows that are not a tolerance check.
template <class Get>
std::function<Cell(const CheckRow&)> judged(Get get) {
  return [get](const CheckRow& r) { return r.judgement ? Cell(get(*r.judgement)) : Cell(); };
}

std::vector<CheckColumn> columns(bool full) {
  using S = CellStyle;
  using R = const CheckRow&;
  std::vector<CheckColumn> c = {
      {"shape", S::text, [](R r) { return Cell(r.shape); }},
      {"gate", S::text, [](R r) { return text(r.gate); }},
      {"path", S::text, [](R r) { return Cell(r.path); }},
      {"variant", S::text, [](R r) { return text(r.variant); }},
      {"tensor", S::text, [](R r) { return Cell(r.tensor); }},
      {"max_abs_err", S::scientific, judged([](const Judgement& j) { return j.max_abs_err; })},
      {"budget", S::scientific, judged([](const Judgement& j) { return j.budget; })},
      {"rel_rms", S::scientific, judged([](const Judgement& j) { return j.rel_rms; })},
  };
  if (full) {
    // A number here; its weakness in the carry_weak column.
    c.push_back({"carry", S::scientific,
                 [](R r) { return r.carry ? Cell(r.carry->rel_rms) : Cell(); }});
  } else {
    // "3.21e-01 (weak)" on screen.
    c.push_back({"carry", S::text, [](R r) { return r.carry ? Cell(r.carry->text()) : Cell(); }});
  }
  c.push_back({"repeat", S::text, [](R r) {
                 return r.repeat == Repeat::none ? Cell() : Cell(std::string(to_string(r.repeat)));
               }});
  if (full) {
    const std::vector<CheckColumn> more = {
        {"carry_weak", S::text,
         [](R r) { return r.carry ? Cell(std::string(r.carry->weak ? "yes" : "no")) : Cell(); }},
        {"elements", S::integer, [](R r) { return Cell(r.elements); }},
        {"ref_err", S::scientific, judged([](const Judgement& j) { return j.ref_err; })},
        {"max_golden", S::scientific, judged([](const Judgement& j) { return j.max_golden; })},
        {"worst_index", S::integer, judged([](const Judgement& j) { return j.worst_index; })},
        {"non_finite", S::integer, judged([](const Judgement& j) { return j.non_finite; })},
        {"inactive_nonzero", S::integer, [](R r) { return Cell(r.inactive_nonzero); }},
        {"reference_s", S::seconds_3, [](R r) { return Cell(r.reference_seconds); }},
    };
    c.insert(c.end(), more.begin(), more.end());
  }
  c.push_back({"verdict", S::text, [](R r) { return Cell(r.verdict_text()); }});
  return c;
}

}  // namespace

const std::vector<CheckColumn>& check_columns(bool full) {
  static const std::vector<CheckColumn> summary = columns(false), all = columns(true);
  return full ? all : summary;
}

std::string check_cell_text(const Cell& cell, CellStyle style) {
  if (std::holds_alternative<std::monostate>(cell)) return "-";
  if (const auto* s = std::get_if<std::string>(&cell)) return *s;
  if (const auto* i = std::get_if<int64_t>(&cell)) return std::to_string(*i);
  const double v = std::get<double>(cell);
  if (style == CellStyle::seconds_3) return fmt::format("{:.3f}", v);
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.3e}", v);
}

CellTable check_cells(const std::vector<CheckRow>& rows, bool full) {
  CellTable table;
  const auto& cols = check_columns(full);
  for (const auto& c : cols) table.columns.push_back(c.name);
  for (const CheckRow& r : rows) {
    std::vector<Cell> cells;
    for (const auto& c : cols) cells.push_back(c.get(r));
    table.rows.push_back(std::move(cells));
  }
  return table;
}

Table check_table(const std::vector<CheckRow>& rows, bool full) {
  const auto& cols = check_columns(full);
  const CellTable cells = check_cells(rows, full);
  Table table;
  table.columns = cells.columns;
  for (const auto& row : cells.rows) {
    std::vector<std::string> text_row;
    for (size_t c = 0; c < row.size(); ++c) text_row.push_back(check_cell_text(row[c], cols[c].style));
    table.rows.push_back(std::move(text_row));
  }
  return table;
}

CheckCounts count_verdicts(const std::vector<CheckRow>& rows) {
  CheckCounts n;
  for (const CheckRow& r : rows) {
    ++n.rows;
    n.passed += r.verdict == Verdict::passed ? 1 : 0;
    n.failed += r.verdict == Verdict::failed ? 1 : 0;
    n.not_verified += r.verdict == Verdict::not_verified ? 1 : 0;
  }
  return n;
}

std::string check_markdown(const CheckContext& ctx, const std::vector<CheckRow>& rows,
                           double total_seconds) {
  const bool gpu = ctx.device.has_value();
  std::ostringstream md;
  md << "# kda-check report\n\n";
  md << "- backend: " << ctx.backend << "\n- commit: " << ctx.git_commit
     << "\n- build: " << ctx.build_flags << "\n- seed: " << ctx.seed << "\n";
  if (gpu) {
    const DeviceInfo& info = *ctx.device;
    md << "- kernel variants: " << fmt::format("{}", fmt::join(ctx.variants, ", ")) << "\n";
    md << fmt::format("- device: {} (sm_{}{}, {} SMs), driver {}, runtime {}\n", info.name,
                      info.cc_major, info.cc_minor, info.sm_count, info.driver_version,
                      info.runtime_version);
  }
  md << "- inputs: "
     << (ctx.load_dir.empty() ? "generated (kda-forward.md §9.3)"
                              : "--load " + escape_controls(ctx.load_dir))
     << "\n";
  md << "- rule: pass iff all finite, max|actual-golden| <= 2 (max|low-golden| + 2^-7 "
        "max|golden|) and RMS(actual-golden)/RMS(golden) < "
     << fmt::format("{:g}", ctx.rms_limit) << "; golden = CPU fp64 reference";
  const bool raw = std::any_of(rows.begin(), rows.end(), [](const CheckRow& r) {
    return r.path == "raw" && r.shape != "(api)";
  });
  if (raw) {
    md << "; the raw path's golden is that reference fed the raw inputs (k = l2norm(k_raw), "
          "beta = sigmoid(beta_logits))";
  }
  md << "\n";
  md << "- carry: RMS(golden - golden with the state reset at every chunk start) / RMS(golden): "
        "how much the state carried between chunks moves the output; (weak): the reset output "
        "itself would pass, so the row does not test the recurrence\n\n";
  md << to_markdown(check_table(rows, false)) << "\n";
  const CheckCounts n = count_verdicts(rows);
  md << fmt::format("{} rows: {} passed, {} failed, {} not verified ({:.1f} s)\n", n.rows,
                    n.passed, n.failed, n.not_verified, total_seconds);
  return md.str();
}

std::string check_csv(const std::vector<CheckRow>& rows) {
  return to_csv(check_table(rows, true));
}

std::string check_json(const CheckContext& ctx, const std::vector<CheckRow>& rows) {
  nlohmann::json doc;
  doc["tool"] = "kda-check";
  doc["git_commit"] = ctx.git_commit;
  doc["build_flags"] = ctx.build_flags;
  doc["backend"] = ctx.backend;
  doc["seed"] = ctx.seed;
  doc["rms_limit"] = ctx.rms_limit;
  if (ctx.device) doc["variants"] = ctx.variants;
  doc["argv"] = ctx.argv;
  if (ctx.device) {
    const DeviceInfo& info = *ctx.device;
    doc["device"] = {{"name", info.name},
                     {"cc", fmt::format("{}.{}", info.cc_major, info.cc_minor)},
                     {"sm_count", info.sm_count},
                     {"driver_version", info.driver_version},
                     {"runtime_version", info.runtime_version}};
  }
  doc["rows"] = json_rows(check_cells(rows, true));
  const CheckCounts n = count_verdicts(rows);
  doc["summary"] = {{"rows", n.rows}, {"failed", n.failed}, {"not_verified", n.not_verified}};
  return doc.dump(2) + "\n";
}

}  // namespace kda::harness
