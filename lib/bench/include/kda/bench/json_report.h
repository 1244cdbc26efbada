// The JSON report of kda-bench: metadata, every column of every row (typed), raw samples, the
// run summary, warnings and the baseline comparison (pure CPU). Every row's cells are the CSV's
// columns (result_columns()) written by the harness's JSON printer (kda/harness/cells.h).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kda/bench/compare.h"
#include "kda/bench/results.h"

namespace kda::bench {

inline constexpr const char* kJsonSchemaVersion = "1.2.0";  // 1.2: raw_s, raw_over_fused

// `device` and `settings` are passed through as built by the caller. compare may be null.
std::string results_json(const RunContext& ctx, const nlohmann::json& device,
                         const nlohmann::json& settings, const std::vector<RunRow>& rows,
                         const RunSummary& summary, const CompareReport* compare);

}  // namespace kda::bench
