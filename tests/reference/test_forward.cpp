// recurrent_forward and chunked_forward: hand-computed cases, agreement of the two algorithms
// (and with an independent scalar recurrence) in double, float vs double, and the ragged rules.
#include <gtest/gtest.h>
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "kda/ref/reference.h"
#include "test_support.h"

namespace kda::ref {
namespace {

using testing::make_problem;
using testing::naive_recurrence;
using testing::ProblemSpec;
using testing::relative_max_diff;

// ---------------------------------------------------------------------------------------------
// Hand-computed cases (scale = 1 and raw q unless stated, so every number is a short binary
// fraction and both algorithms must reproduce it to rounding).

// K = V = 1, chunk_size 2, initial state 4. Tokens (q, k, v, beta, cumulative log2 gate G):
//   t0: (1, 1, 3, 0.5, -1)  decay 2^-1:        S = 2;       delta = 0.5 (3 - 2)      = 0.5
//                           S = 2 + 0.5 = 2.5;        o = 2.5 * 1   = 2.5
//   t1: (2, 0.5, 1, 1, -3)  decay 2^(-3+1):    S = 0.625;   delta = 1 - 0.625 * 0.5  = 0.6875
//                           S = 0.625 + 0.5 * 0.6875 = 0.96875;     o = 0.96875 * 2 = 1.9375
//   t2: (-1, 1, 0, 0.25, -1), new chunk so decay 2^-1: S = 0.484375;
//                           delta = 0.25 (0 - 0.484375) = -0.12109375
//                           S = 0.36328125;  o = -0.36328125
Problem scalar_hand_problem(int64_t tokens) {
  const std::vector<float> q = {1, 2, -1}, k = {1, 0.5f, 1}, v = {3, 1, 0}, beta = {0.5f, 1, 0.25f};
  const std::vector<float> gate = {-1, -3, -1};
  Problem p;
  p.batch = 1;
  p.tokens = tokens;
  p.heads = 1;
  p.key_dim = 1;
  p.value_dim = 1;
  p.q.assign(q.begin(), q.begin() + tokens);
  p.k.assign(k.begin(), k.begin() + tokens);
  p.v.assign(v.begin(), v.begin() + tokens);
  p.beta.assign(beta.begin(), beta.begin() + tokens);
  p.gate.assign(gate.begin(), gate.begin() + tokens);
  p.initial_state = {4};
  return p;
}

Options hand_options(int chunk_size) {
  Options options;
  options.normalize_q = false;
  options.scale = 1.0;
  options.chunk_size = chunk_size;
  return options;
}

template <class S>
class Forward : public ::testing::Test {};
using Precisions = ::testing::Types<float, double>;
TYPED_TEST_SUITE(Forward, Precisions);

template <class S>
constexpr double hand_tolerance() {
  return std::is_same_v<S, float> ? 1e-6 : 1e-15;
}

TYPED_TEST(Forward, ScalarHandCaseOneToThreeTokens) {
  const double outputs[] = {2.5, 1.9375, -0.36328125};
  const double states[] = {2.5, 0.96875, 0.36328125};
  for (int64_t tokens = 1; tokens <= 3; ++tokens) {
    const Problem p = scalar_hand_problem(tokens);
    const auto recurrent = recurrent_forward<TypeParam>(p, hand_options(2));
    const auto chunked = chunked_forward<TypeParam>(p, hand_options(2));
    for (const auto* result : {&recurrent, &chunked}) {
      ASSERT_EQ(result->out.size(), static_cast<std::size_t>(tokens));
      for (int64_t t = 0; t < tokens; ++t)
        EXPECT_NEAR(result->out[t], outputs[t], hand_tolerance<TypeParam>()) << "T " << tokens;
      ASSERT_EQ(result->final_state.size(), 1u);
      EXPECT_NEAR(result->final_state[0], states[tokens - 1], hand_tolerance<TypeParam>());
    }
  }
}

// K = V = 2, T = 2, zero initial state, chunk_size 64:
//   t0: q = (1, 1), k = (1, 0), v = (1, 2), beta = 1, G = (0, -1)
//       S = 0 -> delta = (1, 2), S = k delta^T = [[1, 2], [0, 0]], o = S^T q = (1, 2)
//   t1: q = (1, -1), k = (0.5, 0.75), v = (0, 1), beta = 0.5, G = (-1, -3): decay (2^-1, 2^-2)
//       S = [[0.5, 1], [0, 0]], S^T k = (0.25, 0.5), delta = 0.5 ((0, 1) - (0.25, 0.5))
//       = (-0.125, 0.25); S = [[0.4375, 1.125], [-0.09375, 0.1875]];
//       o = S^T q = (0.4375 + 0.09375, 1.125 - 0.1875) = (0.53125, 0.9375)
TYPED_TEST(Forward, TwoChannelHandCase) {
  Problem p;
  p.batch = 1;
  p.tokens = 2;
  p.heads = 1;
  p.key_dim = 2;
  p.value_dim = 2;
  p.q = {1, 1, 1, -1};
  p.k = {1, 0, 0.5f, 0.75f};
  p.v = {1, 2, 0, 1};
  p.beta = {1, 0.5f};
  p.gate = {0, -1, -1, -3};
  const std::vector<double> out = {1, 2, 0.53125, 0.9375};
  const std::vector<double> state = {0.4375, 1.125, -0.09375, 0.1875};
  const auto recurrent = recurrent_forward<TypeParam>(p, hand_options(64));
  const auto chunked = chunked_forward<TypeParam>(p, hand_options(64));
  for (const auto* result : {&recurrent, &chunked}) {
    for (std::size_t i = 0; i < out.size(); ++i)
      EXPECT_NEAR(result->out[i], out[i], hand_tolerance<TypeParam>()) << i;
    for (std::size_t i = 0; i < state.size(); ++i)
      EXPECT_NEAR(result->final_state[i], state[i], hand_tolerance<TypeParam>()) << i;
  }
}

// Default options: q is l2-normalized with eps 1e-6 and scale = 1/sqrt(K).
//   K = 4, V = 1, T = 1, zero state: q = (2, 0, 0, 0), k = (1, 0, 0, 0), v = 3, beta = 0.5
//   delta = 1.5, S = (1.5, 0, 0, 0)^T, q_hat = 2 / sqrt(4 + 1e-6) e0, scale = 1/2
//   o = 0.5 * 1.5 * 2 / sqrt(4.000001) = 0.7499999062500177
TYPED_TEST(Forward, NormalizedQueryAndDefaultScale) {
  Problem p;
  p.batch = 1;
  p.tokens = 1;
  p.heads = 1;
  p.key_dim = 4;
  p.value_dim = 1;
  p.q = {2, 0, 0, 0};
  p.k = {1, 0, 0, 0};
  p.v = {3};
  p.beta = {0.5f};
  p.gate = {-1, -1, -1, -1};
  const double expected = 0.7499999062500177;
  EXPECT_NEAR(recurrent_forward<TypeParam>(p, {}).out[0], expected, hand_tolerance<TypeParam>());
  EXPECT_NEAR(chunked_forward<TypeParam>(p, {}).out[0], expected, hand_tolerance<TypeParam>());
}

// ---------------------------------------------------------------------------------------------
// Agreement on generated problems.

struct AgreementCase {
  std::string name;
  ProblemSpec spec;
};

ProblemSpec spec_dense(int64_t batch, int64_t tokens, int64_t heads, int64_t K, int64_t V) {
  ProblemSpec spec;
  spec.batch = batch;
  spec.tokens = tokens;
  spec.heads = heads;
  spec.key_dim = K;
  spec.value_dim = V;
  return spec;
}

ProblemSpec spec_packed(std::vector<int32_t> lengths, int64_t tokens = 0) {
  ProblemSpec spec;
  spec.lengths = std::move(lengths);
  spec.tokens = tokens;
  spec.heads = 2;
  spec.key_dim = 12;
  spec.value_dim = 7;
  return spec;
}

std::vector<AgreementCase> agreement_cases() {
  std::vector<AgreementCase> cases;
  cases.push_back({"dense_b2_t130", spec_dense(2, 130, 2, 16, 8)});
  cases.push_back({"dense_t100_tail_chunk", spec_dense(1, 100, 3, 8, 8)});
  cases.push_back({"dense_t64_exact_chunk", spec_dense(1, 64, 1, 8, 4)});
  cases.push_back({"packed_65_0_63", spec_packed({65, 0, 63})});
  cases.push_back({"packed_0_1_64_0_65", spec_packed({0, 1, 64, 0, 65})});
  cases.push_back({"packed_1", spec_packed({1})});
  std::vector<int32_t> two_zero;
  for (int i = 0; i < 40; ++i) two_zero.insert(two_zero.end(), {2, 0});
  cases.push_back({"packed_2_0_x40", spec_packed(two_zero)});
  cases.push_back({"packed_inactive_suffix", spec_packed({5, 65}, 100)});
  cases.push_back({"packed_all_empty", spec_packed({0, 0}, 5)});
  auto no_initial = spec_packed({70, 3});
  no_initial.initial_state = false;
  cases.push_back({"packed_no_initial_state", no_initial});
  cases.push_back({"odd_k5_v3", spec_dense(1, 70, 3, 5, 3)});
  cases.push_back({"k128_v128", spec_dense(1, 70, 2, 128, 128)});
  auto chunk16_dense = spec_dense(2, 50, 2, 8, 6);
  chunk16_dense.chunk_size = 16;
  cases.push_back({"chunk16_dense", chunk16_dense});
  auto chunk16_packed = spec_packed({17, 0, 33, 16}, 70);
  chunk16_packed.chunk_size = 16;
  cases.push_back({"chunk16_packed", chunk16_packed});
  return cases;
}

// gtest prints a failing parameter with this instead of its raw bytes.
void PrintTo(const AgreementCase& test_case, std::ostream* os) { *os << test_case.name; }

class Agreement : public ::testing::TestWithParam<AgreementCase> {};

// First token row (times heads) that belongs to no sequence.
int64_t first_inactive_row(const Problem& p) {
  return p.cu_seqlens.empty() ? p.batch * p.tokens * p.heads
                              : static_cast<int64_t>(p.cu_seqlens.back()) * p.heads;
}

template <class S>
void expect_tail_zero_and_rest_finite(const Problem& p, const Result<S>& result) {
  const int64_t boundary = first_inactive_row(p) * p.value_dim;
  for (int64_t i = 0; i < static_cast<int64_t>(result.out.size()); ++i) {
    if (i >= boundary)
      ASSERT_EQ(result.out[i], S(0)) << "inactive row element " << i;
    else
      ASSERT_TRUE(std::isfinite(result.out[i])) << "element " << i;
  }
  for (S x : result.final_state) ASSERT_TRUE(std::isfinite(x));
}

TEST_P(Agreement, ChunkedMatchesRecurrentInDouble) {
  const ProblemSpec& spec = GetParam().spec;
  const Problem p = make_problem(spec);
  Options options;
  options.chunk_size = spec.chunk_size;
  const auto recurrent = recurrent_forward<double>(p, options);
  const auto chunked = chunked_forward<double>(p, options);
  const auto naive = naive_recurrence(p, spec.chunk_size);

  EXPECT_LE(relative_max_diff(chunked.out, recurrent.out), 1e-12);
  EXPECT_LE(relative_max_diff(chunked.final_state, recurrent.final_state), 1e-12);
  // The library recurrence against a plain scalar one (guards against a shared mistake).
  EXPECT_LE(relative_max_diff(recurrent.out, naive.out), 1e-12);
  EXPECT_LE(relative_max_diff(recurrent.final_state, naive.final_state), 1e-12);
  expect_tail_zero_and_rest_finite(p, recurrent);
  expect_tail_zero_and_rest_finite(p, chunked);
  // Not vacuous: the outputs carry signal.
  double largest = 0;
  for (double x : recurrent.out) largest = std::max(largest, std::fabs(x));
  if (first_inactive_row(p) > 0) {
    EXPECT_GT(largest, 1e-3);
  }
}

TEST_P(Agreement, FloatCloseToDouble) {
  const ProblemSpec& spec = GetParam().spec;
  const Problem p = make_problem(spec);
  Options options;
  options.chunk_size = spec.chunk_size;
  const auto golden = recurrent_forward<double>(p, options);
  const auto recurrent = recurrent_forward<float>(p, options);
  const auto chunked = chunked_forward<float>(p, options);
  EXPECT_LE(relative_max_diff(recurrent.out, golden.out), 1e-5);
  EXPECT_LE(relative_max_diff(recurrent.final_state, golden.final_state), 1e-5);
  EXPECT_LE(relative_max_diff(chunked.out, golden.out), 1e-5);
  EXPECT_LE(relative_max_diff(chunked.final_state, golden.final_state), 1e-5);
  expect_tail_zero_and_rest_finite(p, recurrent);
  expect_tail_zero_and_rest_finite(p, chunked);
}

INSTANTIATE_TEST_SUITE_P(Reference, Agreement, ::testing::ValuesIn(agreement_cases()),
                         [](const auto& test_case) { return test_case.param.name; });

// ---------------------------------------------------------------------------------------------
// Ragged rules, determinism, causality.

TYPED_TEST(Forward, EmptySequencePassesInitialStateBitwise) {
  ProblemSpec spec = spec_packed({3, 0, 2, 0});
  const Problem p = make_problem(spec);
  const int64_t KV = p.key_dim * p.value_dim, H = p.heads;
  for (const auto& result :
       {recurrent_forward<TypeParam>(p, {}), chunked_forward<TypeParam>(p, {})}) {
    for (int64_t s : {1, 3})
      for (int64_t e = 0; e < H * KV; ++e)
        ASSERT_EQ(result.final_state[s * H * KV + e],
                  static_cast<TypeParam>(p.initial_state[s * H * KV + e]))
            << "sequence " << s;
    // Non-empty sequences did change their state.
    EXPECT_NE(result.final_state[0], static_cast<TypeParam>(p.initial_state[0]));
  }
}

TYPED_TEST(Forward, ZeroStateWithoutInitialState) {
  ProblemSpec spec = spec_packed({0, 4, 0});
  spec.initial_state = false;
  const Problem p = make_problem(spec);
  const int64_t HKV = p.heads * p.key_dim * p.value_dim;
  for (const auto& result :
       {recurrent_forward<TypeParam>(p, {}), chunked_forward<TypeParam>(p, {})}) {
    ASSERT_EQ(result.final_state.size(), static_cast<std::size_t>(3 * HKV));
    for (int64_t s : {0, 2})
      for (int64_t e = 0; e < HKV; ++e) ASSERT_EQ(result.final_state[s * HKV + e], TypeParam(0));
  }
}

TYPED_TEST(Forward, NoFinalStateWhenNotAsked) {
  const Problem p = make_problem(spec_packed({3, 5}));
  Options options;
  options.final_state = false;
  EXPECT_TRUE(recurrent_forward<TypeParam>(p, options).final_state.empty());
  EXPECT_TRUE(chunked_forward<TypeParam>(p, options).final_state.empty());
}

TYPED_TEST(Forward, DenseEqualsPackedLoweringBitwise) {
  // Dense [2, 70, H, D] has the same memory as packed [1, 140, H, D] with cu = [0, 70, 140].
  const Problem dense = make_problem(spec_dense(2, 70, 2, 8, 8));
  Problem packed = dense;
  packed.batch = 1;
  packed.tokens = 140;
  packed.cu_seqlens = {0, 70, 140};
  for (bool chunked : {false, true}) {
    const auto a = chunked ? chunked_forward<TypeParam>(dense, {}) : recurrent_forward<TypeParam>(dense, {});
    const auto b = chunked ? chunked_forward<TypeParam>(packed, {}) : recurrent_forward<TypeParam>(packed, {});
    EXPECT_EQ(a.out, b.out) << (chunked ? "chunked" : "recurrent");
    EXPECT_EQ(a.final_state, b.final_state) << (chunked ? "chunked" : "recurrent");
  }
}

TYPED_TEST(Forward, BitwiseDeterministicAcrossThreadCounts) {
  const Problem p = make_problem(spec_packed({65, 0, 63, 129, 1}));
  const int saved = omp_get_max_threads();
  std::vector<Result<TypeParam>> recurrent, chunked;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    recurrent.push_back(recurrent_forward<TypeParam>(p, {}));
    chunked.push_back(chunked_forward<TypeParam>(p, {}));
  }
  omp_set_num_threads(saved);
  for (std::size_t i = 1; i < recurrent.size(); ++i) {
    EXPECT_EQ(recurrent[i].out, recurrent[0].out);
    EXPECT_EQ(recurrent[i].final_state, recurrent[0].final_state);
    EXPECT_EQ(chunked[i].out, chunked[0].out);
    EXPECT_EQ(chunked[i].final_state, chunked[0].final_state);
  }
}

TYPED_TEST(Forward, OutputPrefixIgnoresLaterTokensBitwise) {
  // Changing tokens at and after `cut` must leave every earlier output row bit-identical, also
  // inside the chunk that contains the cut (the chunked path must not leak G_{n-1} or later
  // rows into earlier outputs).
  const Problem p = make_problem(spec_dense(1, 100, 2, 8, 8));
  const int64_t H = p.heads, K = p.key_dim, V = p.value_dim;
  for (int64_t cut : {5, 37, 70}) {
    Problem changed = p;
    for (int64_t t = cut; t < p.tokens; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        const int64_t r = t * H + h;
        for (int64_t d = 0; d < K; ++d) {
          changed.q[r * K + d] *= -1.5f;
          changed.k[r * K + d] = -changed.k[r * K + d];
          // Halve every per-token decay from the cut on (stays inside the gate contract): the
          // cumulative gate moves halfway towards its value just before the cut (or towards 0
          // in a chunk that starts after the cut).
          const bool same_chunk = t / 64 == (cut - 1) / 64;
          const float anchor = same_chunk ? p.gate[((cut - 1) * H + h) * K + d] : 0.0f;
          changed.gate[r * K + d] = anchor + 0.5f * (p.gate[r * K + d] - anchor);
        }
        for (int64_t d = 0; d < V; ++d) changed.v[r * V + d] += 1.0f;
        changed.beta[r] *= 0.5f;
      }
    }
    for (bool chunked : {false, true}) {
      const auto a = chunked ? chunked_forward<TypeParam>(p, {}) : recurrent_forward<TypeParam>(p, {});
      const auto b =
          chunked ? chunked_forward<TypeParam>(changed, {}) : recurrent_forward<TypeParam>(changed, {});
      for (int64_t i = 0; i < cut * H * V; ++i)
        ASSERT_EQ(a.out[i], b.out[i]) << "cut " << cut << " element " << i;
      EXPECT_NE(a.out[cut * H * V], b.out[cut * H * V]) << "the change is visible at the cut";
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Timing of one contract shape (run with --gtest_also_run_disabled_tests).

TEST(ForwardTiming, DISABLED_H64SingleSequence8192) {
  ProblemSpec spec = spec_dense(1, 8192, 64, 128, 128);
  spec.initial_state = false;
  const Problem p = make_problem(spec);
  auto time = [](const char* label, auto&& run) {
    const auto start = std::chrono::steady_clock::now();
    auto result = run();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%-22s %8.2f s (%d threads)\n", label, seconds, omp_get_max_threads());
    return result;
  };
  const auto recurrent = time("recurrent<double>", [&] { return recurrent_forward<double>(p, {}); });
  const auto chunked = time("chunked<double>", [&] { return chunked_forward<double>(p, {}); });
  const auto recurrent_f = time("recurrent<float>", [&] { return recurrent_forward<float>(p, {}); });
  const auto chunked_f = time("chunked<float>", [&] { return chunked_forward<float>(p, {}); });
  EXPECT_LE(relative_max_diff(chunked.out, recurrent.out), 1e-12);
  EXPECT_LE(relative_max_diff(chunked.final_state, recurrent.final_state), 1e-12);
  EXPECT_LE(relative_max_diff(chunked_f.out, recurrent.out), 1e-4);
  EXPECT_LE(relative_max_diff(recurrent_f.out, recurrent.out), 1e-4);
  std::printf("chunked vs recurrent (double) %.3g, float chunked %.3g, float recurrent %.3g\n",
              relative_max_diff(chunked.out, recurrent.out),
              relative_max_diff(chunked_f.out, recurrent.out),
              relative_max_diff(recurrent_f.out, recurrent.out));
}

}  // namespace
}  // namespace kda::ref
