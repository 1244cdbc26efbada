// ProblemSize and Path (problem.h).
#include "kda/harness/problem.h"

#include "kda/harness/inputs.h"
#include "kda/harness/shapes.h"

namespace kda::harness {

const char* to_string(Path path) {
  switch (path) {
    case Path::fused: return "fused";
    case Path::explicit_: return "explicit";
    case Path::l2norm: return "l2norm";
    case Path::raw: return "raw";
  }
  return "?";
}

std::optional<Path> parse_path(std::string_view name) {
  for (Path p : kAllPaths) {
    if (name == to_string(p)) return p;
  }
  return std::nullopt;
}

ProblemSize ProblemSize::of(const ShapeSpec& shape) {
  ProblemSize d;
  d.batch = shape.batch_rows();
  d.tokens = shape.tokens();
  d.heads = shape.heads;
  d.key_dim = shape.key_dim;
  d.value_dim = shape.value_dim;
  d.num_states = shape.num_sequences();
  d.packed = !shape.dense();
  d.initial_state = shape.initial_state;
  d.final_state = shape.final_state;
  d.raw_inputs = true;  // make_inputs always draws them
  return d;
}

ProblemSize ProblemSize::of(const HostInputs& in) {
  ProblemSize d;
  d.batch = in.batch;
  d.tokens = in.tokens;
  d.heads = in.heads;
  d.key_dim = in.key_dim;
  d.value_dim = in.value_dim;
  d.num_states = in.num_states();
  d.packed = !in.cu_seqlens.empty();
  d.initial_state = !in.initial_state.empty();
  d.final_state = in.want_final_state;
  d.raw_inputs = in.has_raw_inputs();
  return d;
}

size_t ProblemSize::input_bytes() const {
  const auto th = static_cast<size_t>(token_heads());
  const auto k = static_cast<size_t>(key_dim), v = static_cast<size_t>(value_dim);
  return th * (k * 2 /*q*/ + k * 2 /*k*/ + v * 2 /*v*/ + k * 4 /*gate*/ + 4 /*beta*/) +
         (packed ? static_cast<size_t>(num_states + 1) * sizeof(int32_t) : 0) +
         (initial_state ? static_cast<size_t>(state_elements()) * sizeof(float) : 0) +
         raw_input_bytes();
}

size_t ProblemSize::raw_input_bytes() const {
  if (!raw_inputs) return 0;
  const auto th = static_cast<size_t>(token_heads());
  const auto h = static_cast<size_t>(heads), k = static_cast<size_t>(key_dim);
  return th * (k * 2 /*raw k*/ + k * 2 /*raw gate*/ + 2 /*beta logits*/) +
         h * 4 /*A_log*/ + h * k * 4 /*dt_bias*/;
}

}  // namespace kda::harness
