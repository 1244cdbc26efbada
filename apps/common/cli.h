// What the apps' command lines share: the exit codes, the --only selection, and value checks for
// seeds, floating-point options and paths (CLI11's own conversions let through what these refuse,
// see each, so every option of that kind uses them). Host code only: unit-tested without a GPU
// (tests/apps/test_cli.cpp).
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

namespace kda::app {

// Exit codes of every tool (docs/errors.md); kda-bench adds 4 (a row did not converge).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;  // a check failed
inline constexpr int kExitUsage = 2;   // bad usage or input
inline constexpr int kExitDevice = 3;  // no usable GPU, or a CUDA error

// --only: keeps the items whose id (id_of(item)) is listed, in their own order; every item when
// `only` is empty. An id that no item has is refused before anything runs: returns "--only <id>:
// no such shape id in <source> (it has: <ids>)" and leaves `items` as they were.
template <class T, class IdOf>
std::optional<std::string> select_only(std::vector<T>* items, const std::vector<std::string>& only,
                                       const std::string& source, IdOf id_of) {
  for (const std::string& id : only) {
    const bool known = std::any_of(items->begin(), items->end(),
                                   [&](const T& item) { return id_of(item) == id; });
    if (known) continue;
    std::vector<std::string> ids;  // each once: two shape files may share one
    for (const T& item : *items) {
      const std::string item_id = id_of(item);
      if (std::find(ids.begin(), ids.end(), item_id) == ids.end()) ids.push_back(item_id);
    }
    std::string list;
    for (const std::string& known_id : ids) list += (list.empty() ? "" : ", ") + known_id;
    return "--only " + id + ": no such shape id in " + source + " (it has: " + list + ")";
  }
  if (!only.empty()) {
    std::erase_if(*items, [&](const T& item) {
      return std::find(only.begin(), only.end(), id_of(item)) == only.end();
    });
  }
  return std::nullopt;
}

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
