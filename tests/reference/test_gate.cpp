// gate_cumsum (kda-forward.md §3.1): formula, chunk-local restarts, sequence restarts, zero tail,
// lower-bound validation.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kda/ref/reference.h"

namespace kda::ref {
namespace {

constexpr long double kLog2eLong = 1.442695040888963407359924681001892137L;

template <class S>
class GateCumsum : public ::testing::Test {};
using Precisions = ::testing::Types<float, double>;
TYPED_TEST_SUITE(GateCumsum, Precisions);

template <class S>
constexpr double gate_tolerance() {  // relative
  return std::is_same_v<S, float> ? 4e-6 : 2e-7;  // double: only the final float rounding
}

TYPED_TEST(GateCumsum, SingleTokenByHand) {
  // raw = 0, A_log = 0, dt_bias = 0: gamma = -5 * sigmoid(0) = -2.5 (natural log), so
  // G = -2.5 * log2(e) = -3.6067376022224085.
  const auto gate = gate_cumsum<TypeParam>({0.0f}, {0.0f}, {0.0f}, 1, 1, 1, 1, -5.0, {});
  ASSERT_EQ(gate.size(), 1u);
  EXPECT_FLOAT_EQ(gate[0], -3.6067376022224085f);
  // lower_bound 0 gives an all-zero gate (no decay).
  EXPECT_EQ(gate_cumsum<TypeParam>({1.5f}, {0.3f}, {0.2f}, 1, 1, 1, 1, 0.0, {})[0], 0.0f);
}

TYPED_TEST(GateCumsum, FormulaWithHeadAndChannelParameters) {
  const int64_t T = 3, H = 2, D = 2;
  const std::vector<float> raw = {0.5f, -1.0f, 2.0f, 0.0f,   // t = 0: (h0 d0, h0 d1, h1 d0, h1 d1)
                                  -0.25f, 1.0f, 3.0f, -2.0f,  // t = 1
                                  0.0f, 0.75f, -0.5f, 1.25f}; // t = 2
  const std::vector<float> a_log = {0.0f, 0.5f};
  const std::vector<float> dt_bias = {0.1f, -0.2f, 0.3f, 0.0f};
  const double lb = -4.0;
  const auto gate = gate_cumsum<TypeParam>(raw, a_log, dt_bias, 1, T, H, D, lb, {});
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t d = 0; d < D; ++d) {
      long double running = 0;
      for (int64_t t = 0; t < T; ++t) {
        const long double x = std::exp(static_cast<long double>(a_log[h])) *
                              (static_cast<long double>(raw[(t * H + h) * D + d]) + dt_bias[h * D + d]);
        running += lb / (1 + std::exp(-x));
        const double expected = static_cast<double>(running * kLog2eLong);
        EXPECT_NEAR(gate[(t * H + h) * D + d], expected,
                    gate_tolerance<TypeParam>() * std::fabs(expected))
            << "t " << t << " h " << h << " d " << d;
      }
    }
  }
}

// With raw = A_log = dt_bias = 0 every gamma is -2.5, so G at local position p inside a chunk is
// -2.5 (p mod C + 1) log2 e: any missed or extra restart is visible.
float constant_gate(int64_t position_in_sequence, int chunk_size) {
  return static_cast<float>(-2.5 * static_cast<double>(position_in_sequence % chunk_size + 1) *
                            1.4426950408889634);
}

TYPED_TEST(GateCumsum, DenseRestartsEveryChunkAndBatchRow) {
  const int64_t B = 2, T = 130, H = 2, D = 3;
  for (int chunk : {64, 16}) {
    const auto gate = gate_cumsum<TypeParam>(std::vector<float>(B * T * H * D, 0.0f),
                                             std::vector<float>(H, 0.0f),
                                             std::vector<float>(H * D, 0.0f), B, T, H, D, -5.0,
                                             {}, chunk);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t e = 0; e < H * D; ++e)
          ASSERT_FLOAT_EQ(gate[(b * T + t) * H * D + e], constant_gate(t, chunk))
              << "chunk " << chunk << " b " << b << " t " << t;
  }
}

TYPED_TEST(GateCumsum, PackedRestartsAtSequenceStartsAndZeroesTail) {
  const int64_t T = 120, H = 1, D = 2;
  const std::vector<int32_t> cu = {0, 10, 10, 100};  // an empty sequence, 20 inactive rows
  std::vector<float> raw(T * H * D, 0.0f);
  for (int64_t i = 100 * H * D; i < T * H * D; ++i)
    raw[i] = std::numeric_limits<float>::quiet_NaN();  // never read
  const auto gate = gate_cumsum<TypeParam>(raw, {0.0f}, {0.0f, 0.0f}, 1, T, H, D, -5.0, cu);
  for (int64_t t = 0; t < T; ++t) {
    const float expected = t < 10 ? constant_gate(t, 64) : t < 100 ? constant_gate(t - 10, 64) : 0.0f;
    for (int64_t d = 0; d < D; ++d) ASSERT_FLOAT_EQ(gate[t * D + d], expected) << "t " << t;
  }
}

TYPED_TEST(GateCumsum, RandomGateSatisfiesBoundedContract) {
  // Per-token log2 decay recovered from the cumulative gate lies in [lb log2 e, 0].
  const int64_t T = 200, H = 3, D = 32;
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> raw(T * H * D), a_log(H), dt_bias(H * D);
  for (auto& x : raw) x = normal(rng);
  for (auto& x : a_log) x = normal(rng);
  for (auto& x : dt_bias) x = normal(rng);
  const double lb = kMinGateLowerBound;
  const auto gate = gate_cumsum<TypeParam>(raw, a_log, dt_bias, 1, T, H, D, lb, {});
  const double floor = lb * 1.4426950408889634 - 1e-4;  // float rounding of the running sum
  for (int64_t t = 0; t < T; ++t)
    for (int64_t e = 0; e < H * D; ++e) {
      const double previous = t % 64 == 0 ? 0.0 : gate[(t - 1) * H * D + e];
      const double decay = gate[t * H * D + e] - previous;
      ASSERT_LE(decay, 1e-4) << "t " << t;  // float rounding of the running sum only
      ASSERT_GE(decay, floor) << "t " << t;
    }
}

TYPED_TEST(GateCumsum, RejectsLowerBoundOutsideContract) {
  const std::vector<float> raw(4, 0.0f), a_log(1, 0.0f), dt_bias(4, 0.0f);
  auto run = [&](double lb) { return gate_cumsum<TypeParam>(raw, a_log, dt_bias, 1, 1, 1, 4, lb, {}); };
  for (double lb : {0.1, -6.0, -5.9148559408, std::nan(""), -std::numeric_limits<double>::infinity(),
                    std::numeric_limits<double>::infinity()})
    EXPECT_THROW(run(lb), std::invalid_argument) << "lb = " << lb;
  for (double lb : {0.0, -5.0, -5.914855940778, kMinGateLowerBound}) EXPECT_NO_THROW(run(lb)) << lb;
}

TYPED_TEST(GateCumsum, RejectsBadShapesAndOffsets) {
  const std::vector<float> raw(8, 0.0f), a_log(2, 0.0f), dt_bias(4, 0.0f);
  EXPECT_NO_THROW(gate_cumsum<TypeParam>(raw, a_log, dt_bias, 1, 2, 2, 2, -5.0, {}));
  EXPECT_THROW(gate_cumsum<TypeParam>(raw, a_log, dt_bias, 1, 3, 2, 2, -5.0, {}),
               std::invalid_argument);
  EXPECT_THROW(gate_cumsum<TypeParam>(raw, {0.0f}, dt_bias, 1, 2, 2, 2, -5.0, {}),
               std::invalid_argument);
  EXPECT_THROW(gate_cumsum<TypeParam>(raw, a_log, {0.0f}, 1, 2, 2, 2, -5.0, {}),
               std::invalid_argument);
  EXPECT_THROW(gate_cumsum<TypeParam>(raw, a_log, dt_bias, 1, 2, 2, 2, -5.0, {0, 3}),
               std::invalid_argument);
  EXPECT_THROW(gate_cumsum<TypeParam>(raw, a_log, dt_bias, 1, 2, 2, 2, -5.0, {}, 0),
               std::invalid_argument);
}

}  // namespace
}  // namespace kda::ref
