// ProblemDims (problem_dims.h).
#include "kda/harness/problem_dims.h"

#include "kda/harness/inputs.h"
#include "kda/harness/shapes.h"

namespace kda::harness {

ProblemDims ProblemDims::of(const ShapeSpec& shape) {
  ProblemDims d;
  d.batch = shape.batch_rows();
  d.tokens = shape.tokens();
  d.heads = shape.heads;
  d.key_dim = shape.key_dim;
  d.value_dim = shape.value_dim;
  d.num_states = shape.num_sequences();
  d.packed = !shape.dense();
  d.initial_state = shape.initial_state;
  d.final_state = shape.final_state;
  return d;
}

ProblemDims ProblemDims::of(const HostInputs& in) {
  ProblemDims d;
  d.batch = in.batch;
  d.tokens = in.tokens;
  d.heads = in.heads;
  d.key_dim = in.key_dim;
  d.value_dim = in.value_dim;
  d.num_states = in.num_states();
  d.packed = !in.cu_seqlens.empty();
  d.initial_state = !in.initial_state.empty();
  d.final_state = in.want_final_state;
  return d;
}

size_t ProblemDims::input_bytes() const {
  const auto th = static_cast<size_t>(token_heads());
  const auto k = static_cast<size_t>(key_dim), v = static_cast<size_t>(value_dim);
  return th * (k * 2 /*q*/ + k * 2 /*k*/ + v * 2 /*v*/ + k * 4 /*gate*/ + 4 /*beta*/) +
         (packed ? static_cast<size_t>(num_states + 1) * sizeof(int32_t) : 0) +
         (initial_state ? static_cast<size_t>(state_elements()) * sizeof(float) : 0);
}

}  // namespace kda::harness
