// Settings of one kda-bench invocation, filled from the command line (main.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/cli.h"
#include "kda/bench/gpu_timing.h"
#include "kda/bench/results.h"
#include "kda/harness/inputs.h"
#include "kda/harness/shapes.h"

namespace kda::bench::app {

// Exit codes (documented in --help and README.md): every tool's (common/cli.h; 1 is also compare
// --fail-on-slower, 2 also a bad baseline), and one of kda-bench's own.
using kda::app::kExitDevice;
using kda::app::kExitFailed;
using kda::app::kExitOk;
using kda::app::kExitUsage;
inline constexpr int kExitNotConverged = 4;  // everything verified, a row did not converge

struct Options {
  std::string shapes_file = "shapes/contract.yaml";
  std::vector<std::string> only;
  std::vector<std::string> paths = {"fused", "explicit", "l2norm"};
  std::vector<std::string> modes = {"warm"};
  bool list = false;
  bool stages = false;
  bool verify = true;
  bool blocking_kernel = true;  // off: --no-blocking-kernel, or a CUDA injection tool attached
  bool quiet = false;
  bool force = false;
  int device = 0;
  uint64_t seed = kda::harness::kDefaultSeed;
  std::string variant;  // kernel variant of the forward; empty = the library default

  // measurement
  kda::bench::gpu::MeasureConfig measure;  // mode is set per row
  double cooldown_s = 0.25;                // sleep between configurations
  double floor_bw_Bps = kDefaultFloorBandwidth;

  // outputs
  std::string csv_file, json_file, md_file;
  std::string baseline_file;
  double same_within = 0.01;  // compare: min threshold (fraction)

  // compare sub-command
  std::string compare_a, compare_b;
  std::optional<std::string> compare_mode, a_path, b_path;
  bool fail_on_slower = false;

  std::vector<std::string> argv;
};

// Prints "<tool>: <message>" on stderr with control characters escaped (ids, paths and file
// contents in messages come from the user) and returns rc.
int fail(int rc, const std::string& message, const char* tool = "kda-bench");

// Shared steps (commands.cpp). Each prints its own message and returns an exit code != 0 on
// failure.
int load_selected_shapes(const Options& options, std::vector<kda::harness::ShapeSpec>* shapes);
int refuse_existing_outputs(const Options& options);

int run_compare(const Options& options);
int run_list(const Options& options);
int run_benchmarks(const Options& options);

}  // namespace kda::bench::app
