// The verdict of a checked result, shared by kda-check's rows and kda-bench's rows: typed, so a
// failure is found by comparing an enum, never by reading the text of a message.
#pragma once

#include <optional>
#include <string_view>

namespace kda::harness {

enum class Verdict { passed, failed, not_verified };

// "passed", "failed", "not verified": the words the reports print (and read back, compare).
const char* to_string(Verdict verdict);
std::optional<Verdict> parse_verdict(std::string_view text);

}  // namespace kda::harness
