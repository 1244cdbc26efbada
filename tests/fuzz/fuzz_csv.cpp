// libFuzzer target: the CSV reader (kda::harness::parse_csv) on arbitrary bytes. A refusal must be
// a CsvError; an accepted table must be rectangular and survive a round trip through the writer
// (to_csv) unchanged, but for the one documented normalization: a line break inside a quoted
// field reads as "\n" whether the file wrote "\r\n" or "\n".
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "kda/harness/report.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

// What reading a written cell gives back: every "\r\n" becomes "\n".
std::string crlf_to_lf(const std::string& cell) {
  std::string out;
  for (size_t i = 0; i < cell.size(); ++i) {
    if (cell[i] == '\r' && i + 1 < cell.size() && cell[i + 1] == '\n') continue;
    out += cell[i];
  }
  return out;
}

std::vector<std::string> crlf_to_lf(const std::vector<std::string>& cells) {
  std::vector<std::string> out;
  for (const std::string& cell : cells) out.push_back(crlf_to_lf(cell));
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  kda::harness::Table table;
  try {
    table = kda::harness::parse_csv(text, "fuzz.csv");
  } catch (const kda::harness::CsvError&) {
    return 0;  // a refusal with a message
  }
  check(!table.columns.empty());
  for (const auto& row : table.rows) check(row.size() == table.columns.size());
  const kda::harness::Table again =
      kda::harness::parse_csv(kda::harness::to_csv(table), "again.csv");
  check(again.columns == crlf_to_lf(table.columns));
  check(again.rows.size() == table.rows.size());
  for (size_t r = 0; r < table.rows.size(); ++r) check(again.rows[r] == crlf_to_lf(table.rows[r]));
  (void)kda::harness::to_markdown(table);
  return 0;
}
