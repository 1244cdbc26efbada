// Private helpers shared by the reference's translation units: sequence spans, token-major
// indexing, option checks and the (sequence, head) parallel loop.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kda/ref/reference.h"

namespace kda::ref::detail {

template <class S>
using Vector = Eigen::Matrix<S, Eigen::Dynamic, 1>;

// One logical sequence: tokens [begin, end) of batch row `batch_row`.
struct SequenceSpan {
  int64_t batch_row = 0;
  int64_t begin = 0;
  int64_t end = 0;
};

// Dense: sequence b is batch row b. Packed: sequence s owns [cu[s], cu[s+1]) of batch row 0.
// `cu_seqlens` must already be validated.
std::vector<SequenceSpan> sequence_spans(int64_t batch, int64_t tokens,
                                         const std::vector<int32_t>& cu_seqlens);

// Throws std::invalid_argument naming `field` unless cu_seqlens follows kda-forward.md §5.
void check_cu_seqlens(const std::vector<int32_t>& cu_seqlens, int64_t batch, int64_t tokens,
                      const char* field);

// Throws std::invalid_argument: "<field>: expected <expected> elements (<formula>), got <actual>".
void check_size(const char* field, std::size_t actual, int64_t expected, const char* formula);

// Rejects chunk_size < 1 and a non-finite scale.
void check_options(const Options& options);

// Index of the (batch row, token, head) row in a token-major [B, T, H, D] tensor; multiply by D
// for the element offset.
struct TokenLayout {
  int64_t tokens = 0;
  int64_t heads = 0;
  int64_t row(int64_t batch_row, int64_t token, int64_t head) const {
    return (batch_row * tokens + token) * heads + head;
  }
};

template <class S>
S resolved_scale(const Options& options, int64_t key_dim) {
  if (options.scale != 0.0) return static_cast<S>(options.scale);
  return static_cast<S>(1.0 / std::sqrt(static_cast<double>(key_dim)));
}

// Writes the state entering a sequence, K x V row-major in precision S, to `state`: the
// initial_state row widened, or zeros (also when Options::reset_state_at_chunk_starts, which
// ignores the initial state).
template <class S>
void load_initial_state(const Problem& problem, const Options& options, int64_t sequence,
                        int64_t head, S* state) {
  const int64_t KV = problem.key_dim * problem.value_dim;
  if (problem.initial_state.empty() || options.reset_state_at_chunk_starts) {
    std::fill(state, state + KV, S(0));
    return;
  }
  const float* src = problem.initial_state.data() + (sequence * problem.heads + head) * KV;
  for (int64_t e = 0; e < KV; ++e) state[e] = static_cast<S>(src[e]);
}

template <class S>
void store_final_state(const S* state, const Problem& problem, int64_t sequence, int64_t head,
                       std::vector<S>& final_state) {
  const int64_t KV = problem.key_dim * problem.value_dim;
  std::copy(state, state + KV, final_state.data() + (sequence * problem.heads + head) * KV);
}

// std::exp2, returning +0 directly where the result underflows to zero anyway (2^x below half
// the smallest subnormal rounds to +0): glibc's exp2f takes a slow error-reporting path there,
// and fp32 chunk-local gates reach 2^-546. Same value as std::exp2 for every x, NaN included.
template <class S>
S exp2_or_zero(S x) {
  constexpr S kUnderflow =  // -150 for float, -1075 for double
      static_cast<S>(std::numeric_limits<S>::min_exponent - std::numeric_limits<S>::digits - 1);
  return x < kUnderflow ? S(0) : std::exp2(x);
}

// Gathers the q rows of tokens [first, first + rows) of one (batch row, head) into `raw` and
// writes them as the algorithms consume them to `destination` (rows x K): l2-normalized in S
// (Options::normalize_q; l2norm_rows interleaves several rows, same bits as one at a time) or
// widened.
template <class S>
void load_query_rows(const Problem& problem, const Options& options, int64_t batch_row,
                     int64_t first, int64_t rows, int64_t head, std::vector<float>& raw,
                     S* destination) {
  const int64_t K = problem.key_dim;
  const TokenLayout layout{problem.tokens, problem.heads};
  raw.resize(static_cast<std::size_t>(rows * K));
  for (int64_t i = 0; i < rows; ++i) {
    const float* src = problem.q.data() + layout.row(batch_row, first + i, head) * K;
    std::copy(src, src + K, raw.data() + i * K);
  }
  if (options.normalize_q) {
    l2norm_rows<S>(raw.data(), destination, rows, K);
  } else {
    for (int64_t e = 0; e < rows * K; ++e) destination[e] = static_cast<S>(raw[e]);
  }
}

// Runs work(sequence, head) for every pair, in parallel. Each pair is independent and writes a
// disjoint slice of the outputs, and its arithmetic does not depend on which thread runs it, so
// the results are bitwise identical for any thread count. `work` must not throw.
template <class Work>
void for_each_sequence_head(int64_t sequences, int64_t heads, const Work& work) {
  const int64_t tasks = sequences * heads;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t task = 0; task < tasks; ++task) work(task / heads, task % heads);
}

}  // namespace kda::ref::detail
