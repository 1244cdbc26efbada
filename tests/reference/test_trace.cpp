// ChunkTrace: the chunked algorithm's intermediates obey their definitions (§2.2) and match the
// per-token recurrence where the math says they must.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kda/ref/reference.h"
#include "test_support.h"

namespace kda::ref {
namespace {

using testing::make_problem;
using testing::naive_recurrence;
using testing::ProblemSpec;

ProblemSpec trace_spec() {
  ProblemSpec spec;
  spec.lengths = {65, 0, 63, 1};  // chunks per sequence: 2, 0, 1, 1
  spec.tokens = 140;              // inactive suffix
  spec.heads = 2;
  spec.key_dim = 12;
  spec.value_dim = 7;
  return spec;
}

double max_abs(const Matrix<double>& m) { return m.size() == 0 ? 0.0 : m.cwiseAbs().maxCoeff(); }

TEST(Trace, RecordsEveryChunkInOrder) {
  const Problem p = make_problem(trace_spec());
  std::vector<ChunkTrace<double>> trace;
  chunked_forward<double>(p, {}, &trace);
  // (sequence, chunk, first_token, rows) for one head; heads vary fastest after sequences.
  struct Expected {
    int64_t sequence, chunk, first_token, rows;
  };
  const std::vector<Expected> per_sequence = {{0, 0, 0, 64}, {0, 1, 64, 1}, {2, 0, 65, 63},
                                              {3, 0, 128, 1}};
  ASSERT_EQ(trace.size(), 2 * per_sequence.size());
  std::size_t index = 0;
  for (int64_t s : {0, 2, 3})
    for (int64_t h = 0; h < 2; ++h)
      for (const Expected& e : per_sequence) {
        if (e.sequence != s) continue;
        const ChunkTrace<double>& record = trace[index++];
        EXPECT_EQ(record.sequence, e.sequence);
        EXPECT_EQ(record.head, h);
        EXPECT_EQ(record.chunk, e.chunk);
        EXPECT_EQ(record.first_token, e.first_token);
        EXPECT_EQ(record.rows, e.rows);
        EXPECT_EQ(record.A_kk.rows(), e.rows);
        EXPECT_EQ(record.W.cols(), p.key_dim);
        EXPECT_EQ(record.U.cols(), p.value_dim);
        EXPECT_EQ(record.state_in.rows(), p.key_dim);
        EXPECT_EQ(record.state_in.cols(), p.value_dim);
      }
}

TEST(Trace, FilterSelectsOneSequenceAndHead) {
  const Problem p = make_problem(trace_spec());
  std::vector<ChunkTrace<double>> trace;
  chunked_forward<double>(p, {}, &trace, TraceFilter{1, 0});
  ASSERT_EQ(trace.size(), 2u);
  for (const auto& record : trace) {
    EXPECT_EQ(record.head, 1);
    EXPECT_EQ(record.sequence, 0);
  }
  trace.clear();
  chunked_forward<double>(p, {}, &trace, TraceFilter{-1, 1});  // the empty sequence
  EXPECT_TRUE(trace.empty());
}

TEST(Trace, TracingDoesNotChangeResults) {
  const Problem p = make_problem(trace_spec());
  std::vector<ChunkTrace<float>> trace;
  const auto traced = chunked_forward<float>(p, {}, &trace);
  const auto plain = chunked_forward<float>(p, {});
  EXPECT_EQ(traced.out, plain.out);
  EXPECT_EQ(traced.final_state, plain.final_state);
  EXPECT_FALSE(trace.empty());
}

TEST(Trace, IntermediatesMatchDefinitionsAndRecurrence) {
  const Problem p = make_problem(trace_spec());
  std::vector<ChunkTrace<double>> trace;
  chunked_forward<double>(p, {}, &trace);
  const auto naive = naive_recurrence(p, 64);
  const int64_t H = p.heads, K = p.key_dim, V = p.value_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(K));

  for (const auto& record : trace) {
    SCOPED_TRACE(::testing::Message() << "sequence " << record.sequence << " head "
                                      << record.head << " chunk " << record.chunk);
    const int64_t n = record.rows;
    auto token_row = [&](int64_t i) { return (record.first_token + i) * H + record.head; };

    // A_kk strictly lower, A_qk inclusive lower: the upper parts are exactly zero.
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = i; j < n; ++j) {
        EXPECT_EQ(record.A_kk(i, j), 0.0);
        if (j > i) {
          EXPECT_EQ(record.A_qk(i, j), 0.0);
        }
      }

    // T is the inverse of I + A_kk.
    const Matrix<double> identity = Matrix<double>::Identity(n, n);
    const Matrix<double> unit_lower = identity + record.A_kk;
    EXPECT_LE(max_abs(record.T * unit_lower - identity), 1e-12);
    EXPECT_LE(max_abs(unit_lower * record.T - identity), 1e-12);

    // Row i of V_new is the recurrence's delta at that token.
    Matrix<double> delta(n, V);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < V; ++c) delta(i, c) = naive.delta[token_row(i) * V + c];
    EXPECT_LE(max_abs(record.V_new - delta), 1e-12 * max_abs(delta));
    EXPECT_GT(max_abs(delta), 1e-3);

    // The state entering the chunk is the initial state or the recurrent state after the last
    // token of the previous chunk.
    Matrix<double> expected_state(K, V);
    for (int64_t e = 0; e < K * V; ++e) {
      expected_state.data()[e] =
          record.chunk == 0
              ? p.initial_state[(record.sequence * H + record.head) * K * V + e]
              : naive.state_after[((record.first_token - 1) * H + record.head) * K * V + e];
    }
    EXPECT_LE(max_abs(record.state_in - expected_state), 1e-12 * max_abs(expected_state));

    // Spot checks of the operand definitions on row 0 and the last row:
    // q'_0 = scale q_hat_0 2^G_0, W_0 = beta_0 k_0 2^G_0 (T row 0 is e_0), kg_{n-1} = k_{n-1}.
    const int64_t r0 = token_row(0), last = token_row(n - 1);
    double ssq = 0;
    for (int64_t d = 0; d < K; ++d) ssq += double(p.q[r0 * K + d]) * p.q[r0 * K + d];
    for (int64_t d = 0; d < K; ++d) {
      const double gamma = std::exp2(double(p.gate[r0 * K + d]));
      EXPECT_NEAR(record.q_prime(0, d), scale * p.q[r0 * K + d] / std::sqrt(ssq + 1e-6) * gamma,
                  1e-15);
      EXPECT_NEAR(record.W(0, d), double(p.beta[r0]) * p.k[r0 * K + d] * gamma, 1e-15);
      EXPECT_EQ(record.kg(n - 1, d), double(p.k[last * K + d]));
    }
  }
}

}  // namespace
}  // namespace kda::ref
