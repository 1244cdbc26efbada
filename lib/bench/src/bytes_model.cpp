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

int64_t forward_bytes(const ProblemSize& size) {
  const int64_t state = size.num_states * size.heads * size.key_dim * size.value_dim * kF32;
  return size.token_heads() * forward_bytes_per_token_head(size) +
         (size.initial_state ? state : 0) + (size.final_state ? state : 0);
}

int64_t l2norm_bytes(const ProblemSize& size) {
  return 2 * size.token_heads() * size.key_dim * kBf16;
}

int64_t path_bytes(const ProblemSize& size, Path path) {
  switch (path) {
    case Path::fused: return forward_bytes(size);
    case Path::explicit_: return forward_bytes(size) + l2norm_bytes(size);
    case Path::l2norm: return l2norm_bytes(size);
  }
  return 0;
}

int64_t floor_bytes(const ProblemSize& size, Path path) {
  return path == Path::l2norm ? l2norm_bytes(size) : forward_bytes(size);
}

}  // namespace kda::bench
