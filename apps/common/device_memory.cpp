#include "device_memory.h"

#include <algorithm>

#include <fmt/format.h>

#include "device_problem.h"
#include "kda/harness/report.h"
#include "kda/kda.h"

namespace kda::app {

namespace {

// The workspace comes from the variants themselves, sized for every one DeviceProblem may run.
size_t workspace_all_variants(const kda::harness::ProblemSize& d) {
  if (d.key_dim != kda::kHeadDim || d.value_dim != kda::kHeadDim) return 0;
  size_t bytes = 0;
  for (const Variant& v : kda::lab::variants()) {
    kda::ForwardParams p;
    p.batch = d.batch;
    p.tokens = d.tokens;
    p.heads = static_cast<int>(d.heads);
    p.num_seqs = d.packed ? static_cast<int>(d.num_states) : 0;
    bytes = std::max(bytes, v.workspace_bytes(p));
  }
  return bytes;
}

}  // namespace

DeviceFootprint device_footprint(const kda::harness::ProblemSize& d) {
  const auto th = static_cast<size_t>(d.batch) * static_cast<size_t>(d.tokens) *
                  static_cast<size_t>(d.heads);
  const auto k = static_cast<size_t>(d.key_dim), v = static_cast<size_t>(d.value_dim);
  const size_t state = static_cast<size_t>(d.num_states) * static_cast<size_t>(d.heads) * k * v *
                       sizeof(float);
  DeviceFootprint f;
  f.inputs = d.input_bytes();
  f.outputs = th * (v * 2 /*out*/ + k * 2 /*q_hat*/) + (d.final_state ? state : 0);
  f.workspace = workspace_all_variants(d);
  return f;
}

std::string device_memory_shortfall(const std::string& shape_id, const DeviceFootprint& need,
                                    size_t free_bytes, int device, const std::string& device_name) {
  if (need.total() <= free_bytes) return "";
  return fmt::format(
      "shape '{}' needs {} of device memory ({} bytes: inputs {}, outputs {}, workspace {}), {} "
      "free on device {} ({}); use a smaller shape (--only) or free the device",
      shape_id, kda::harness::format_gib(need.total()), need.total(), need.inputs, need.outputs,
      need.workspace, kda::harness::format_gib(free_bytes), device, device_name);
}

}  // namespace kda::app
