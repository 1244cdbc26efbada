// Typed result cells and their JSON form (cells.h), and the verdict words (verdict.h).
#include "kda/harness/cells.h"

#include <cmath>
#include <stdexcept>

#include "kda/harness/verdict.h"

namespace kda::harness {

const char* to_string(Verdict verdict) {
  switch (verdict) {
    case Verdict::passed: return "passed";
    case Verdict::failed: return "failed";
    case Verdict::not_verified: return "not verified";
  }
  return "?";
}

std::optional<Verdict> parse_verdict(std::string_view text) {
  for (Verdict v : {Verdict::passed, Verdict::failed, Verdict::not_verified}) {
    if (text == to_string(v)) return v;
  }
  return std::nullopt;
}

nlohmann::json json_number(double value) {
  return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json();
}

nlohmann::json json_cell(const Cell& cell) {
  if (const auto* s = std::get_if<std::string>(&cell)) return *s;
  if (const auto* i = std::get_if<int64_t>(&cell)) return *i;
  if (const auto* d = std::get_if<double>(&cell)) return json_number(*d);
  return nullptr;
}

nlohmann::json json_rows(const CellTable& table) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& row : table.rows) {
    if (row.size() != table.columns.size()) {
      throw std::invalid_argument("json_rows: a row has " + std::to_string(row.size()) +
                                  " cells for " + std::to_string(table.columns.size()) +
                                  " columns");
    }
    // ordered_json would keep the column order; nlohmann::json sorts keys, as the reports
    // always have (their readers look keys up by name).
    nlohmann::json object = nlohmann::json::object();
    for (size_t c = 0; c < row.size(); ++c) object[table.columns[c]] = json_cell(row[c]);
    out.push_back(std::move(object));
  }
  return out;
}

}  // namespace kda::harness
