// The JSON report of kda-bench: metadata, every column of every row (typed), raw samples, the
// run summary, warnings and the baseline comparison.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kda/bench/compare.h"
#include "kda/bench/results.h"

namespace kda::bench::app {

inline constexpr const char* kJsonSchemaVersion = "1.1.0";

// `device` and `settings` are passed through as built by the caller. compare may be null.
std::string results_json(const RunContext& ctx, const nlohmann::json& device,
                         const nlohmann::json& settings, const std::vector<RunRow>& rows,
                         const RunSummary& summary, const CompareReport* compare);

}  // namespace kda::bench::app
