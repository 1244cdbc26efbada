#include "kda/bench/format.h"

#include <cmath>

#include <fmt/format.h>

namespace kda::bench {

std::string csv_number(double value) {
  if (std::isnan(value)) return "";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return fmt::format("{}", value);
}

std::string human_number(double value, Unit unit) {
  if (std::isnan(value)) return "";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  switch (unit) {
    case Unit::seconds: return fmt::format("{:.1f}", value * 1e6);
    case Unit::fraction: return fmt::format("{:.2f}", value * 100.0);
    case Unit::bytes: return fmt::format("{:.1f}", value / 1e6);
    case Unit::bytes_per_s: return fmt::format("{:.3f}", value / 1e12);
    case Unit::hertz: return fmt::format("{:.0f}", value / 1e6);
    case Unit::ratio: return fmt::format("{:.3f}", value);
    case Unit::count: return fmt::format("{:.0f}", value);
    case Unit::text: break;
  }
  return csv_number(value);
}

const char* unit_suffix(Unit unit) {
  switch (unit) {
    case Unit::seconds: return " (us)";
    case Unit::fraction: return " (%)";
    case Unit::bytes: return " (MB)";
    case Unit::bytes_per_s: return " (TB/s)";
    case Unit::hertz: return " (MHz)";
    default: return "";
  }
}

std::string percent_text(double fraction) {
  const std::string n = human_number(fraction, Unit::fraction);
  return n.empty() ? "n/a" : n + "%";
}

}  // namespace kda::bench
