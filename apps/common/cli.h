// Command-line value checks the apps share: seeds, floating-point options, paths. CLI11's own
// conversions let through what these refuse (see each), so every option of that kind uses them.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

namespace kda::app {

// A seed: decimal digits only, at most 2^64 - 1. strtoull (CLI11's conversion, and a habit of
// hand-written parsers) reads "-1" as 2^64 - 1, clamps what is larger, and takes "010" as octal.
inline std::optional<uint64_t> parse_seed(std::string_view text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  uint64_t value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

// The refusal for a value parse_seed does not take.
inline std::string seed_refusal(std::string_view text) {
  return "'" + std::string(text) +
         "' is not a seed (an unsigned 64-bit decimal integer, 0 to 18446744073709551615)";
}

// --seed, through Option::transform (Option::check may not rewrite the value): parse_seed's
// rule, and the value handed on without leading zeros, so CLI11's own conversion (strtoull with
// base 0) cannot read "010" as octal.
inline CLI::Validator seed_transform() {
  return CLI::Validator(
      [](std::string& text) {
        const std::optional<uint64_t> seed = parse_seed(text);
        if (!seed) return seed_refusal(text);
        text = std::to_string(*seed);
        return std::string();
      },
      "UINT64");
}

// A floating-point option: NaN and infinities are refused, then `inner` applies. CLI11 converts
// "nan" and "inf", and CLI::Range / CLI::PositiveNumber let NaN through (every comparison with
// it is false).
inline CLI::Validator finite(CLI::Validator inner) {
  const std::string description = inner.get_description();
  return CLI::Validator(
      [inner](std::string& text) {
        double value = 0.0;
        if (CLI::detail::lexical_cast(text, value) && !std::isfinite(value)) {
          return "Value " + text + " is not a finite number";
        }
        return inner(text);
      },
      description);
}

// A path option: an empty value ("--md ''") would read as the option not given.
inline CLI::Validator non_empty_path() {
  return CLI::Validator(
      [](std::string& text) {
        return text.empty() ? std::string("an empty path (give a file or directory name)")
                            : std::string();
      },
      "PATH");
}

}  // namespace kda::app
