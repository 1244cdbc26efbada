// The reference as it was at 0b498d2, before the fixed-order kernels (reference/src/kernels.h):
// the per-token recurrence with Eigen's matrix-vector products and the chunked algorithm with one
// exp2 per (i, j, d) in the grams, Eigen GEMMs and Eigen's triangular solve. Kept for the tests
// only (test_eigen_agreement.cpp: the new code stays within 1e-12 of it in double), sequential,
// with the helpers it needs inlined. Options::reset_state_at_chunk_starts did not exist then.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kda/ref/reference.h"

namespace kda::ref::testing::eigen {

template <class S>
using Vector = Eigen::Matrix<S, Eigen::Dynamic, 1>;

// [begin, end) token range and batch row of every sequence.
struct Span {
  int64_t batch_row, begin, end;
};

inline std::vector<Span> spans_of(const Problem& p) {
  std::vector<Span> spans;
  if (p.cu_seqlens.empty()) {
    for (int64_t b = 0; b < p.batch; ++b) spans.push_back({b, 0, p.tokens});
  } else {
    for (std::size_t s = 0; s + 1 < p.cu_seqlens.size(); ++s)
      spans.push_back({0, p.cu_seqlens[s], p.cu_seqlens[s + 1]});
  }
  return spans;
}

template <class S>
S exp2_or_zero(S x) {
  constexpr S kUnderflow =
      static_cast<S>(std::numeric_limits<S>::min_exponent - std::numeric_limits<S>::digits - 1);
  return x < kUnderflow ? S(0) : std::exp2(x);
}

template <class S>
S scale_of(const Options& options, int64_t K) {
  return options.scale != 0.0 ? static_cast<S>(options.scale)
                              : static_cast<S>(1.0 / std::sqrt(static_cast<double>(K)));
}

template <class S>
void query_row(const Problem& p, const Options& options, int64_t row, S* out) {
  const float* q = p.q.data() + row * p.key_dim;
  if (options.normalize_q) {
    l2norm_rows<S>(q, out, 1, p.key_dim);
  } else {
    for (int64_t d = 0; d < p.key_dim; ++d) out[d] = static_cast<S>(q[d]);
  }
}

template <class S>
Matrix<S> state_of(const Problem& p, int64_t sequence, int64_t head) {
  const int64_t K = p.key_dim, V = p.value_dim;
  if (p.initial_state.empty()) return Matrix<S>::Zero(K, V);
  const float* src = p.initial_state.data() + (sequence * p.heads + head) * K * V;
  return Eigen::Map<const Matrix<float>>(src, K, V).template cast<S>();
}

template <class S>
Result<S> make_result(const Problem& p, const Options& options) {
  Result<S> result;
  result.out.assign(p.batch * p.tokens * p.heads * p.value_dim, S(0));
  if (options.final_state)
    result.final_state.assign(p.num_states() * p.heads * p.key_dim * p.value_dim, S(0));
  return result;
}

// Runs state = run(span, head, state) for every (sequence, head) in order, from the initial state,
// and stores the final states.
template <class S, class Run>
void for_each_pair(const Problem& p, Result<S>& result, const Run& run) {
  const auto spans = spans_of(p);
  const int64_t KV = p.key_dim * p.value_dim;
  for (std::size_t sequence = 0; sequence < spans.size(); ++sequence)
    for (int64_t head = 0; head < p.heads; ++head) {
      const auto s = static_cast<int64_t>(sequence);
      const Matrix<S> state = run(spans[sequence], head, state_of<S>(p, s, head));
      if (!result.final_state.empty())
        Eigen::Map<Matrix<S>>(result.final_state.data() + (s * p.heads + head) * KV, p.key_dim,
                              p.value_dim) = state;
    }
}

// 0b498d2's recurrent_forward.
template <class S>
Result<S> recurrent(const Problem& p, const Options& options) {
  const int64_t K = p.key_dim, V = p.value_dim, H = p.heads;
  const S scale = scale_of<S>(options, K);
  Result<S> result = make_result<S>(p, options);
  for_each_pair<S>(p, result, [&](const Span& span, int64_t head, Matrix<S> state) {
    Vector<S> q(K), k(K), decay(K), v(V), delta(V), output(V);
    for (int64_t t = span.begin; t < span.end; ++t) {
      const int64_t row = (span.batch_row * p.tokens + t) * H + head;
      const bool chunk_start = (t - span.begin) % options.chunk_size == 0;
      for (int64_t d = 0; d < K; ++d) {
        const S g = static_cast<S>(p.gate[row * K + d]);
        decay[d] = exp2_or_zero(chunk_start ? g : g - static_cast<S>(p.gate[(row - H) * K + d]));
        k[d] = static_cast<S>(p.k[row * K + d]);
      }
      for (int64_t c = 0; c < V; ++c) v[c] = static_cast<S>(p.v[row * V + c]);
      query_row(p, options, row, q.data());
      const S beta = static_cast<S>(p.beta[row]);
      state.array().colwise() *= decay.array();
      delta.noalias() = beta * (v - state.transpose() * k);
      state.noalias() += k * delta.transpose();
      output.noalias() = state.transpose() * (scale * q);
      Eigen::Map<Vector<S>>(result.out.data() + row * V, V) = output;
    }
    return state;
  });
  return result;
}

// 0b498d2's chunked_forward (without traces).
template <class S>
Result<S> chunked(const Problem& p, const Options& options) {
  using Index = Eigen::Index;
  const int64_t K = p.key_dim, V = p.value_dim, H = p.heads;
  const S scale = scale_of<S>(options, K);
  const auto exp2 = [](S x) { return exp2_or_zero(x); };
  Result<S> result = make_result<S>(p, options);
  for_each_pair<S>(p, result, [&](const Span& span, int64_t head, Matrix<S> state) {
    for (int64_t first = span.begin; first < span.end; first += options.chunk_size) {
      const Index n = std::min<int64_t>(options.chunk_size, span.end - first);
      Matrix<S> q_hat(n, K), k(n, K), v(n, V), gate(n, K);
      Vector<S> beta(n);
      for (Index i = 0; i < n; ++i) {
        const int64_t row = (span.batch_row * p.tokens + first + i) * H + head;
        query_row(p, options, row, q_hat.row(i).data());
        for (int64_t d = 0; d < K; ++d) {
          k(i, d) = static_cast<S>(p.k[row * K + d]);
          gate(i, d) = static_cast<S>(p.gate[row * K + d]);
        }
        for (int64_t c = 0; c < V; ++c) v(i, c) = static_cast<S>(p.v[row * V + c]);
        beta[i] = static_cast<S>(p.beta[row]);
      }
      const Matrix<S> gamma = gate.unaryExpr(exp2);
      Matrix<S> a_qk = Matrix<S>::Zero(n, n), a_kk = Matrix<S>::Zero(n, n), decayed(n, K);
      Vector<S> dots(n);
      for (Index i = 0; i < n; ++i) {
        for (Index j = 0; j < i; ++j)
          for (Index d = 0; d < K; ++d) decayed(j, d) = k(j, d) * exp2(gate(i, d) - gate(j, d));
        decayed.row(i) = k.row(i);
        dots.head(i + 1).noalias() = decayed.topRows(i + 1) * q_hat.row(i).transpose();
        for (Index j = 0; j <= i; ++j) a_qk(i, j) = scale * dots[j];
        dots.head(i + 1).noalias() = decayed.topRows(i + 1) * k.row(i).transpose();
        for (Index j = 0; j < i; ++j) a_kk(i, j) = beta[i] * dots[j];
      }
      Matrix<S> t = Matrix<S>::Identity(n, n);
      a_kk.template triangularView<Eigen::UnitLower>().solveInPlace(t);
      const Matrix<S> w = t * (beta.asDiagonal() * k.cwiseProduct(gamma));
      const Matrix<S> u = t * (beta.asDiagonal() * v);
      const Matrix<S> q_prime = scale * q_hat.cwiseProduct(gamma);
      Matrix<S> kg(n, K);
      for (Index i = 0; i < n; ++i)
        kg.row(i) = k.row(i).cwiseProduct((gate.row(n - 1) - gate.row(i)).unaryExpr(exp2));
      Matrix<S> v_new = u;
      v_new.noalias() -= w * state;
      Matrix<S> out = q_prime * state;
      out.noalias() += a_qk * v_new;
      state.array().colwise() *= gamma.row(n - 1).transpose().array();
      state.noalias() += kg.transpose() * v_new;
      for (Index i = 0; i < n; ++i) {
        const int64_t row = (span.batch_row * p.tokens + first + i) * H + head;
        Eigen::Map<Vector<S>>(result.out.data() + row * V, V) = out.row(i).transpose();
      }
    }
    return state;
  });
  return result;
}

}  // namespace kda::ref::testing::eigen
