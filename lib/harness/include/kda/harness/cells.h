// Typed result cells and the one JSON printer of the tools' reports. A report is a list of
// columns, each a name and one typed cell per row; CSV and markdown format the cells as text (each
// tool its own number style), JSON writes them as JSON values here, so the keys of a JSON row are
// the CSV header and a number is never parsed back from formatted text.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace kda::harness {

// Empty (std::monostate): the column does not apply to the row ("-" in kda-check's tables, null
// in JSON).
using Cell = std::variant<std::monostate, std::string, int64_t, double>;

// Typed rows under named columns; every row has exactly columns.size() cells.
struct CellTable {
  std::vector<std::string> columns;
  std::vector<std::vector<Cell>> rows;
};

// A number at full precision; NaN and infinities are not JSON numbers: they become null.
nlohmann::json json_number(double value);
// text -> string, integer -> integer, real -> json_number, empty -> null.
nlohmann::json json_cell(const Cell& cell);
// One JSON object per row, keyed by the column names (nlohmann::json keeps keys sorted). Throws
// std::invalid_argument on a ragged row.
nlohmann::json json_rows(const CellTable& table);

}  // namespace kda::harness
