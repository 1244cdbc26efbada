#include "device_memory.h"

#include <algorithm>

#include <fmt/format.h>

#include "device_problem.h"
#include "kda/kda.h"

namespace kda::app {

namespace {

// The sizes DeviceProblem allocates from; the workspace comes from the library itself.
struct Dims {
  int64_t batch = 0, tokens = 0, heads = 0, key_dim = 0, value_dim = 0;
  int64_t num_states = 0;
  bool packed = false, initial_state = false, final_state = false;
};

size_t workspace_all_variants(const Dims& d) {
  if (d.key_dim != kda::kHeadDim || d.value_dim != kda::kHeadDim) return 0;
  size_t bytes = 0;
  for (kda::ForwardVariant v : kAllVariants) {
    kda::ForwardParams p;
    p.batch = d.batch;
    p.tokens = d.tokens;
    p.heads = static_cast<int>(d.heads);
    p.num_seqs = d.packed ? static_cast<int>(d.num_states) : 0;
    p.variant = v;
    bytes = std::max(bytes, kda::forward_workspace_bytes(p));
  }
  return bytes;
}

DeviceFootprint footprint(const Dims& d) {
  const auto th = static_cast<size_t>(d.batch) * static_cast<size_t>(d.tokens) *
                  static_cast<size_t>(d.heads);
  const auto k = static_cast<size_t>(d.key_dim), v = static_cast<size_t>(d.value_dim);
  const size_t state = static_cast<size_t>(d.num_states) * static_cast<size_t>(d.heads) * k * v *
                       sizeof(float);
  DeviceFootprint f;
  f.inputs = th * (k * 2 /*q*/ + k * 2 /*k*/ + v * 2 /*v*/ + k * 4 /*gate*/ + 4 /*beta*/) +
             (d.packed ? static_cast<size_t>(d.num_states + 1) * sizeof(int32_t) : 0) +
             (d.initial_state ? state : 0);
  f.outputs = th * (v * 2 /*out*/ + k * 2 /*q_hat*/) + (d.final_state ? state : 0);
  f.workspace = workspace_all_variants(d);
  return f;
}

std::string gib(size_t bytes) {
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
}

}  // namespace

DeviceFootprint device_footprint(const kda::harness::ShapeSpec& shape) {
  Dims d;
  d.batch = shape.batch_rows();
  d.tokens = shape.tokens();
  d.heads = shape.heads;
  d.key_dim = shape.key_dim;
  d.value_dim = shape.value_dim;
  d.num_states = shape.num_sequences();
  d.packed = !shape.dense();
  d.initial_state = shape.initial_state;
  d.final_state = shape.final_state;
  return footprint(d);
}

DeviceFootprint device_footprint(const kda::harness::HostInputs& in) {
  Dims d;
  d.batch = in.batch;
  d.tokens = in.tokens;
  d.heads = in.heads;
  d.key_dim = in.key_dim;
  d.value_dim = in.value_dim;
  d.num_states = in.num_states();
  d.packed = !in.cu_seqlens.empty();
  d.initial_state = !in.initial_state.empty();
  d.final_state = in.want_final_state;
  return footprint(d);
}

std::string device_memory_shortfall(const std::string& shape_id, const DeviceFootprint& need,
                                    size_t free_bytes, int device, const std::string& device_name) {
  if (need.total() <= free_bytes) return "";
  return fmt::format(
      "shape '{}' needs {} of device memory ({} bytes: inputs {}, outputs {}, workspace {}), {} "
      "free on device {} ({}); use a smaller shape (--only) or free the device",
      shape_id, gib(need.total()), need.total(), need.inputs, need.outputs, need.workspace,
      gib(free_bytes), device, device_name);
}

}  // namespace kda::app
