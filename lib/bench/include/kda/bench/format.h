// Number formatting shared by the kda-bench printers (pure CPU). Tables are built as
// kda::harness::Table and printed by its to_markdown / to_csv.
#pragma once

#include <string>

namespace kda::bench {

// What a number is; decides its CSV name suffix (by convention) and its human form.
enum class Unit { text, count, seconds, bytes, bytes_per_s, fraction, hertz, ratio };

// Shortest text that reads back as the same double; "" for NaN (an empty CSV cell), "inf"/"-inf".
std::string csv_number(double value);

// Human form for markdown cells, without the unit ("" for NaN), and the unit for the header:
//   seconds -> microseconds, 1 decimal       " (us)"
//   fraction -> percent, 2 decimals          " (%)"
//   bytes -> megabytes (1e6), 1 decimal      " (MB)"
//   bytes_per_s -> TB/s (1e12), 3 decimals   " (TB/s)"
//   hertz -> MHz, 0 decimals                 " (MHz)"
//   ratio -> 3 decimals; count -> integer    ""
std::string human_number(double value, Unit unit);
const char* unit_suffix(Unit unit);

// "0.31%", "inf%": percent with the sign, for prose lines.
std::string percent_text(double fraction);

}  // namespace kda::bench
