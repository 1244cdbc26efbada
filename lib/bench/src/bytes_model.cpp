#include "kda/bench/bytes_model.h"

namespace kda::bench {

namespace {
constexpr int64_t kBf16 = 2, kF32 = 4;
}

int64_t forward_bytes_per_token_head(const ProblemSize& size) {
  const int64_t k = size.key_dim, v = size.value_dim;
  return 2 * k * kBf16    // q, k
         + v * kBf16      // v
         + k * kF32       // cumulative gate
         + kF32           // beta
         + v * kBf16;     // out
}

namespace {

int64_t state_bytes(const ProblemSize& size) {
  const int64_t state = size.num_states * size.heads * size.key_dim * size.value_dim * kF32;
  return (size.initial_state ? state : 0) + (size.final_state ? state : 0);
}

}  // namespace

int64_t forward_bytes(const ProblemSize& size) {
  return size.token_heads() * forward_bytes_per_token_head(size) + state_bytes(size);
}

int64_t raw_forward_bytes_per_token_head(const ProblemSize& size) {
  const int64_t k = size.key_dim, v = size.value_dim;
  return 2 * k * kBf16    // raw q, raw k
         + v * kBf16      // v
         + k * kBf16      // raw gate
         + kBf16          // beta logits
         + v * kBf16;     // out
}

int64_t raw_forward_bytes(const ProblemSize& size) {
  const int64_t gate_parameters = size.heads * (1 + size.key_dim) * kF32;  // A_log, dt_bias
  return size.token_heads() * raw_forward_bytes_per_token_head(size) + gate_parameters +
         state_bytes(size);
}

int64_t l2norm_bytes(const ProblemSize& size) {
  return 2 * size.token_heads() * size.key_dim * kBf16;
}

int64_t path_bytes(const ProblemSize& size, Path path) {
  switch (path) {
    case Path::fused: return forward_bytes(size);
    case Path::explicit_: return forward_bytes(size) + l2norm_bytes(size);
    case Path::l2norm: return l2norm_bytes(size);
    case Path::raw: return raw_forward_bytes(size);
  }
  return 0;
}

int64_t floor_bytes(const ProblemSize& size, Path path) {
  switch (path) {
    case Path::fused:
    case Path::explicit_: return forward_bytes(size);
    case Path::l2norm: return l2norm_bytes(size);
    case Path::raw: return raw_forward_bytes(size);
  }
  return 0;
}

}  // namespace kda::bench
