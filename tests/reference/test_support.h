// Test-only helpers for kda::ref: a seeded problem generator that honours the bounded-gate
// contract, an independent scalar recurrence that records every delta and state, and metrics.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kda/ref/reference.h"

namespace kda::ref::testing {

inline constexpr double kLog2e = 1.4426950408889634;

// What to generate. Packed when `lengths` is non-empty (then batch = 1 and tokens defaults to
// the sum of lengths unless `tokens` is larger, which leaves an inactive suffix).
struct ProblemSpec {
  int64_t batch = 1;
  int64_t tokens = 0;
  int64_t heads = 1;
  int64_t key_dim = 8;
  int64_t value_dim = 8;
  std::vector<int32_t> lengths;
  bool initial_state = true;
  int chunk_size = 64;  // the gate is made chunk-local for this size
  uint64_t seed = 1;
};

inline std::vector<int32_t> offsets_from_lengths(const std::vector<int32_t>& lengths) {
  std::vector<int32_t> cu{0};
  for (int32_t length : lengths) cu.push_back(cu.back() + length);
  return cu;
}

// The [begin, end) token ranges of the problem's sequences: dense batch rows, or the packed
// offsets.
inline std::vector<std::pair<int64_t, int64_t>> sequence_token_spans(const Problem& p) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  if (p.cu_seqlens.empty()) {
    for (int64_t b = 0; b < p.batch; ++b) spans.emplace_back(b * p.tokens, (b + 1) * p.tokens);
  } else {
    for (std::size_t s = 0; s + 1 < p.cu_seqlens.size(); ++s)
      spans.emplace_back(p.cu_seqlens[s], p.cu_seqlens[s + 1]);
  }
  return spans;
}

// q = randn (raw), k = unit randn, v = randn, beta = sigmoid(randn), per-token log2 decay
// gamma = -5 sigmoid(randn) log2(e) in [-7.22, 0] (inside the [-8.53, 0] contract), turned into
// the chunk-local cumulative gate; initial state = randn. Rows at or after cu[N] are poisoned
// with NaN: the reference must never read them.
inline Problem make_problem(const ProblemSpec& spec) {
  Problem p;
  p.heads = spec.heads;
  p.key_dim = spec.key_dim;
  p.value_dim = spec.value_dim;
  if (spec.lengths.empty()) {
    p.batch = spec.batch;
    p.tokens = spec.tokens;
  } else {
    p.batch = 1;
    p.cu_seqlens = offsets_from_lengths(spec.lengths);
    p.tokens = std::max<int64_t>(spec.tokens, p.cu_seqlens.back());
  }
  const int64_t K = p.key_dim, V = p.value_dim, H = p.heads;
  const int64_t rows = p.batch * p.tokens * H;
  std::mt19937_64 rng(spec.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto sigmoid = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };

  p.q.resize(rows * K);
  p.k.resize(rows * K);
  p.v.resize(rows * V);
  p.gate.resize(rows * K);
  p.beta.resize(rows);
  for (auto& x : p.q) x = static_cast<float>(normal(rng));
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> row(K);
    double ssq = 0;
    for (auto& x : row) {
      x = normal(rng);
      ssq += x * x;
    }
    for (int64_t d = 0; d < K; ++d) p.k[r * K + d] = static_cast<float>(row[d] / std::sqrt(ssq));
  }
  for (auto& x : p.v) x = static_cast<float>(normal(rng));
  for (auto& x : p.beta) x = static_cast<float>(sigmoid(normal(rng)));

  // Chunk-local cumulative gate, restarting at every sequence start and every chunk_size tokens.
  std::vector<std::pair<int64_t, int64_t>> spans;  // [first row token, end) per batch row offset
  if (p.cu_seqlens.empty()) {
    for (int64_t b = 0; b < p.batch; ++b) spans.emplace_back(b * p.tokens, (b + 1) * p.tokens);
  } else {
    for (std::size_t s = 0; s + 1 < p.cu_seqlens.size(); ++s)
      spans.emplace_back(p.cu_seqlens[s], p.cu_seqlens[s + 1]);
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::fill(p.gate.begin(), p.gate.end(), nan);
  for (int64_t h = 0; h < H; ++h) {
    for (auto [begin, end] : spans) {
      std::vector<double> running(K, 0.0);
      for (int64_t t = begin; t < end; ++t) {
        if ((t - begin) % spec.chunk_size == 0) std::fill(running.begin(), running.end(), 0.0);
        for (int64_t d = 0; d < K; ++d) {
          running[d] += -5.0 * sigmoid(normal(rng)) * kLog2e;
          p.gate[(t * H + h) * K + d] = static_cast<float>(running[d]);
        }
      }
    }
  }
  if (!p.cu_seqlens.empty()) {  // poison the inactive suffix
    const int64_t first_unused_row = static_cast<int64_t>(p.cu_seqlens.back()) * H;
    for (int64_t r = first_unused_row; r < rows; ++r) {
      std::fill_n(p.q.begin() + r * K, K, nan);
      std::fill_n(p.k.begin() + r * K, K, nan);
      std::fill_n(p.v.begin() + r * V, V, nan);
      p.beta[r] = nan;
    }
  }
  if (spec.initial_state) {
    p.initial_state.resize(p.num_states() * H * K * V);
    for (auto& x : p.initial_state) x = static_cast<float>(normal(rng));
  }
  return p;
}

// A deliberately plain scalar implementation of §2.1 in double (independent of the library's
// Eigen code), keeping delta_t and the state after every token for the trace tests.
struct NaiveRun {
  std::vector<double> out;          // [B, T, H, V]
  std::vector<double> final_state;  // [N, H, K, V]
  std::vector<double> delta;        // [B, T, H, V]
  std::vector<double> state_after;  // [B, T, H, K, V]: state after each token
};

inline NaiveRun naive_recurrence(const Problem& p, int chunk_size, double scale = 0.0) {
  const int64_t K = p.key_dim, V = p.value_dim, H = p.heads, T = p.tokens;
  if (scale == 0.0) scale = 1.0 / std::sqrt(static_cast<double>(K));
  NaiveRun run;
  run.out.assign(p.batch * T * H * V, 0.0);
  run.delta.assign(p.batch * T * H * V, 0.0);
  run.state_after.assign(p.batch * T * H * K * V, 0.0);
  run.final_state.assign(p.num_states() * H * K * V, 0.0);
  std::vector<std::pair<int64_t, int64_t>> spans;  // global token rows [begin, end)
  if (p.cu_seqlens.empty()) {
    for (int64_t b = 0; b < p.batch; ++b) spans.emplace_back(b * T, (b + 1) * T);
  } else {
    for (std::size_t s = 0; s + 1 < p.cu_seqlens.size(); ++s)
      spans.emplace_back(p.cu_seqlens[s], p.cu_seqlens[s + 1]);
  }
  for (std::size_t s = 0; s < spans.size(); ++s) {
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> S(K * V, 0.0);
      if (!p.initial_state.empty())
        for (int64_t e = 0; e < K * V; ++e) S[e] = p.initial_state[(s * H + h) * K * V + e];
      for (int64_t t = spans[s].first; t < spans[s].second; ++t) {
        const int64_t row = t * H + h;
        const bool restart = (t - spans[s].first) % chunk_size == 0;
        std::vector<double> q(K);
        double ssq = 0;
        for (int64_t d = 0; d < K; ++d) ssq += double(p.q[row * K + d]) * p.q[row * K + d];
        for (int64_t d = 0; d < K; ++d) q[d] = p.q[row * K + d] / std::sqrt(ssq + 1e-6);
        for (int64_t d = 0; d < K; ++d) {
          double gamma = p.gate[row * K + d];
          if (!restart) gamma -= double(p.gate[(row - H) * K + d]);
          const double decay = std::exp2(gamma);
          for (int64_t c = 0; c < V; ++c) S[d * V + c] *= decay;
        }
        for (int64_t c = 0; c < V; ++c) {
          double sk = 0;
          for (int64_t d = 0; d < K; ++d) sk += S[d * V + c] * p.k[row * K + d];
          run.delta[row * V + c] = p.beta[row] * (p.v[row * V + c] - sk);
        }
        for (int64_t d = 0; d < K; ++d)
          for (int64_t c = 0; c < V; ++c) S[d * V + c] += p.k[row * K + d] * run.delta[row * V + c];
        for (int64_t c = 0; c < V; ++c) {
          double o = 0;
          for (int64_t d = 0; d < K; ++d) o += S[d * V + c] * q[d];
          run.out[row * V + c] = scale * o;
        }
        std::copy(S.begin(), S.end(), run.state_after.begin() + row * K * V);
      }
      std::copy(S.begin(), S.end(), run.final_state.begin() + (s * H + h) * K * V);
    }
  }
  return run;
}

// max|a - b| / max|b| (b is the reference); 0 when both are all zero; NaN when any entry is
// NaN, infinity when the sizes differ.
template <class A, class B>
double relative_max_diff(const std::vector<A>& a, const std::vector<B>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    if (std::isnan(d)) return std::numeric_limits<double>::quiet_NaN();
    diff = std::max(diff, d);
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return scale == 0 ? diff : diff / scale;
}

}  // namespace kda::ref::testing
