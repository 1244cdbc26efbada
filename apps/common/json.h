// JSON conventions of the apps' reports.
#pragma once

#include <cmath>

#include <nlohmann/json.hpp>

namespace kda::app {

// A number at full precision; NaN and infinities are not JSON numbers: they become null.
inline nlohmann::json json_number(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
}

}  // namespace kda::app
