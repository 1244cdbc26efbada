// l2norm_rows: y = x / sqrt(sum x^2 + 1e-6) for every finite row, in float and double.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kda/ref/reference.h"

namespace kda::ref {
namespace {

// The formula evaluated in long double (64-bit mantissa, 15-bit exponent: no overflow for any
// float row).
std::vector<long double> long_double_l2norm(const std::vector<float>& x, long double eps = 1e-6L) {
  long double ssq = 0;
  for (float value : x) ssq += static_cast<long double>(value) * value;
  std::vector<long double> y;
  for (float value : x) y.push_back(value / std::sqrt(ssq + eps));
  return y;
}

template <class S>
std::vector<S> normalize(const std::vector<float>& x) {
  std::vector<S> y(x.size(), S(-1));
  l2norm_rows<S>(x.data(), y.data(), 1, static_cast<int64_t>(x.size()));
  return y;
}

template <class S>
class L2Norm : public ::testing::Test {};
using Precisions = ::testing::Types<float, double>;
TYPED_TEST_SUITE(L2Norm, Precisions);

// Relative tolerance of one row against the long double formula.
template <class S>
constexpr double row_tolerance() {
  return std::is_same_v<S, float> ? 1e-6 : 1e-14;
}

TYPED_TEST(L2Norm, ZeroRowGivesZeros) {
  for (int64_t dim : {1, 5, 128}) {
    const auto y = normalize<TypeParam>(std::vector<float>(dim, 0.0f));
    for (auto value : y) EXPECT_EQ(value, TypeParam(0));
  }
}

TYPED_TEST(L2Norm, HugeRowIsUnitNormAndFinite) {
  // ||x|| = 3e38 * sqrt(128) overflows any fp32 sum of squares; the answer is 1/sqrt(128) each.
  const auto y = normalize<TypeParam>(std::vector<float>(128, 3e38f));
  double norm = 0;
  for (auto value : y) {
    ASSERT_TRUE(std::isfinite(value));
    EXPECT_NEAR(double(value), 1.0 / std::sqrt(128.0), row_tolerance<TypeParam>());
    norm += double(value) * double(value);
  }
  EXPECT_NEAR(norm, 1.0, 4 * row_tolerance<TypeParam>());
}

TYPED_TEST(L2Norm, HugeMixedRowMatchesLongDouble) {
  std::vector<float> x = {3.4e38f, -1.0e38f, 1.0f, -2.5e37f, 1e-30f, 0.0f, 7e20f};
  const auto y = normalize<TypeParam>(x);
  const auto expected = long_double_l2norm(x);
  for (std::size_t d = 0; d < x.size(); ++d)
    EXPECT_NEAR(double(y[d]), double(expected[d]), row_tolerance<TypeParam>()) << "d = " << d;
}

TYPED_TEST(L2Norm, TinyRowIsEpsDominated) {
  // sum x^2 = 128e-60, negligible next to eps = 1e-6: y = x / sqrt(1e-6) = 1e-27. In float this
  // row takes the unscaled path (eps * 2^-2e overflows).
  const auto y = normalize<TypeParam>(std::vector<float>(128, 1e-30f));
  const double expected = double(1e-30f) / std::sqrt(double(TypeParam(1e-6)));
  for (auto value : y) EXPECT_NEAR(double(value) / expected, 1.0, row_tolerance<TypeParam>());
}

TYPED_TEST(L2Norm, SubnormalRowIsEpsDominated) {
  std::vector<float> x(16, std::numeric_limits<float>::denorm_min());
  x[3] = -1e-40f;
  const auto y = normalize<TypeParam>(x);
  const auto expected = long_double_l2norm(x, static_cast<long double>(TypeParam(1e-6)));
  for (std::size_t d = 0; d < x.size(); ++d) {
    // Some float outputs are subnormal themselves: allow one unit of the subnormal spacing.
    const long double allowed = row_tolerance<TypeParam>() * std::fabs(expected[d]) +
                                std::numeric_limits<TypeParam>::denorm_min();
    EXPECT_LE(std::fabs(y[d] - expected[d]), allowed) << "d = " << d;
  }
}

TYPED_TEST(L2Norm, RandomRowsMatchLongDouble) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal(0.0, 1.0);
  double worst = 0;
  for (int64_t dim : {1, 3, 64, 128, 200}) {
    // Row scales 1e-20 .. 1e20 cover eps-dominated, eps-sensitive (1e-3) and huge rows.
    for (int exponent = -20; exponent <= 20; ++exponent) {
      std::vector<float> x(dim);
      for (auto& value : x) value = static_cast<float>(normal(rng) * std::pow(10.0, exponent));
      const auto y = normalize<TypeParam>(x);
      const auto expected = long_double_l2norm(x, static_cast<long double>(TypeParam(1e-6)));
      long double largest = 0;
      for (auto e : expected) largest = std::max(largest, std::fabs(e));
      for (int64_t d = 0; d < dim; ++d) {
        const double error = double(std::fabs(y[d] - expected[d]) / largest);
        worst = std::max(worst, error);
        ASSERT_LE(error, row_tolerance<TypeParam>())
            << "dim " << dim << " scale 1e" << exponent << " d " << d;
      }
    }
  }
  this->RecordProperty("worst_relative_error", std::to_string(worst));
}

TYPED_TEST(L2Norm, RowsAreIndependent) {
  // Two rows in one call give the same bits as one row per call.
  std::vector<float> x = {1, 2, 3, 0, 0, 0, 3e38f, -3e38f, 1e-20f};
  std::vector<TypeParam> together(x.size());
  l2norm_rows<TypeParam>(x.data(), together.data(), 3, 3);
  for (int r = 0; r < 3; ++r) {
    std::vector<TypeParam> alone(3);
    l2norm_rows<TypeParam>(x.data() + 3 * r, alone.data(), 1, 3);
    for (int d = 0; d < 3; ++d) EXPECT_EQ(together[3 * r + d], alone[d]);
  }
}

TYPED_TEST(L2Norm, ManyRowsGiveTheBitsOfOneRowPerCall) {
  // Large calls interleave groups of rows and run in parallel; every row must still get the
  // bits of a one-row call, for every kind of row (groups mixing them included).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (int64_t dim : {9, 128}) {
    const int64_t rows = 20000;  // above the parallel threshold
    std::vector<float> x(static_cast<std::size_t>(rows * dim));
    for (int64_t r = 0; r < rows; ++r) {
      float* row = x.data() + r * dim;
      for (int64_t d = 0; d < dim; ++d) row[d] = normal(rng);
      switch (r % 23) {
        case 3: std::fill(row, row + dim, 0.0f); break;
        case 7: for (int64_t d = 0; d < dim; ++d) row[d] *= 3e37f; break;
        case 11: for (int64_t d = 0; d < dim; ++d) row[d] *= 1e-30f; break;
        case 13: for (int64_t d = 0; d < dim; ++d) row[d] *= 1e-44f; break;
        case 17: row[dim / 2] = nan; break;
        case 19: row[0] = -inf; break;
        case 21: row[1] = 3e38f; break;
        default: break;
      }
    }
    std::vector<TypeParam> together(x.size());
    l2norm_rows<TypeParam>(x.data(), together.data(), rows, dim);
    std::vector<TypeParam> alone(static_cast<std::size_t>(dim));
    for (int64_t r = 0; r < rows; ++r) {
      l2norm_rows<TypeParam>(x.data() + r * dim, alone.data(), 1, dim);
      ASSERT_EQ(std::memcmp(alone.data(), together.data() + r * dim, dim * sizeof(TypeParam)), 0)
          << "dim " << dim << " row " << r;
    }
  }
}

TYPED_TEST(L2Norm, NanPropagates) {
  std::vector<float> x(8, 1.0f);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  for (auto value : normalize<TypeParam>(x)) EXPECT_TRUE(std::isnan(value));
}

TYPED_TEST(L2Norm, InfinityGivesNonFinite) {
  for (float inf : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}) {
    std::vector<float> x(8, 1.0f);
    x[2] = inf;
    const auto y = normalize<TypeParam>(x);
    EXPECT_FALSE(std::isfinite(y[2])) << "an inf entry must not become a plausible number";
  }
}

TEST(L2NormArguments, RejectsNegativeEps) {
  float x = 1.0f, y = 0.0f;
  EXPECT_THROW(l2norm_rows<float>(&x, &y, 1, 1, -1.0), std::invalid_argument);
  EXPECT_THROW(l2norm_rows<float>(&x, &y, 1, 1, std::nan("")), std::invalid_argument);
}

}  // namespace
}  // namespace kda::ref
