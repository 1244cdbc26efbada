// What a problem is to the tools: its sizes, from a shape file entry or from inputs already in
// memory (what the memory estimates, host and device, and the bytes model are computed from), and
// the paths the tools run on it. One type each, shared by inputs, kda-check, kda-bench and the
// device footprint.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kda::harness {

struct ShapeSpec;
struct HostInputs;

// The paths the tools run and time. explicit = the l2norm pass on q, then the forward on q_hat;
// fused = the forward normalizing raw q itself; l2norm = the pass alone; raw = the forward on the
// raw inputs engines pass (issue 16): raw q and raw k normalized in the kernel, the raw gate
// projection with A_log / dt_bias / lower bound (bf16), beta as bf16 logits (HostInputs::raw_*).
// Every path the tools know; each tool picks its own default set.
enum class Path { fused, explicit_, l2norm, raw };
inline constexpr Path kAllPaths[] = {Path::fused, Path::explicit_, Path::l2norm, Path::raw};
const char* to_string(Path path);  // "fused", "explicit", "l2norm", "raw"
std::optional<Path> parse_path(std::string_view name);

struct ProblemSize {
  int64_t batch = 1, tokens = 0, heads = 0, key_dim = 128, value_dim = 128;
  int64_t num_states = 0;  // N: sequences (packed) or batch rows (dense)
  bool packed = false, initial_state = false, final_state = false;
  // The problem carries the raw inputs of Path::raw (HostInputs::has_raw_inputs(): always for
  // generated inputs, not for a dump written before them); they are held and uploaded with the
  // contract inputs.
  bool raw_inputs = false;

  static ProblemSize of(const ShapeSpec& shape);
  static ProblemSize of(const HostInputs& inputs);
  int64_t token_heads() const { return batch * tokens * heads; }
  int64_t state_elements() const { return num_states * heads * key_dim * value_dim; }
  // The kernel inputs in their dtypes, as HostInputs holds them and the device gets them: bf16
  // q k v, fp32 gate and beta, int32 cu_seqlens, fp32 initial state, and with raw_inputs the
  // raw ones (raw_input_bytes).
  size_t input_bytes() const;
  // bf16 raw k and raw gate, bf16 beta logits, fp32 A_log [H] and dt_bias [H, K]; 0 without
  // raw_inputs.
  size_t raw_input_bytes() const;
};

}  // namespace kda::harness
