// The sizes of one problem, from a shape file entry or from inputs already in memory: what the
// memory estimates (host and device) and the bytes model are computed from.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kda::harness {

struct ShapeSpec;
struct HostInputs;

struct ProblemDims {
  int64_t batch = 1, tokens = 0, heads = 0, key_dim = 128, value_dim = 128;
  int64_t num_states = 0;  // N: sequences (packed) or batch rows (dense)
  bool packed = false, initial_state = false, final_state = false;

  static ProblemDims of(const ShapeSpec& shape);
  static ProblemDims of(const HostInputs& inputs);
  int64_t token_heads() const { return batch * tokens * heads; }
  int64_t state_elements() const { return num_states * heads * key_dim * value_dim; }
  // The kernel inputs in their dtypes, as HostInputs holds them and the device gets them: bf16
  // q k v, fp32 gate and beta, int32 cu_seqlens, fp32 initial state.
  size_t input_bytes() const;
};

}  // namespace kda::harness
