// The portable random numbers: pure functions of (seed, stream, index), accurate transcendental
// replacements, and sane normal statistics.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "kda/harness/random.h"

namespace kda::harness {
namespace {

TEST(Random, CounterBasedAndStreamsDiffer) {
  EXPECT_EQ(random_bits(1, 2, 3), random_bits(1, 2, 3));
  std::set<uint64_t> seen;
  for (uint64_t seed : {0ull, 1ull}) {
    for (uint64_t stream : {0ull, 1ull, 2ull}) {
      for (uint64_t index : {0ull, 1ull, 2ull}) seen.insert(random_bits(seed, stream, index));
    }
  }
  EXPECT_EQ(seen.size(), 18u);
  // Frozen values: the generator is part of the input contract.
  EXPECT_EQ(mix64(0), 0ull);
  EXPECT_EQ(mix64(1), 0x5692161D100B05E5ull);
}

TEST(Random, UniformIsOpenInterval) {
  for (uint64_t i = 0; i < 100000; ++i) {
    const double u = random_uniform(3, 1, i);
    ASSERT_GT(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}

TEST(Random, PortableFunctionsMatchLibm) {
  // A few ulp of agreement is plenty: the draws are rounded to fp32 and then bf16 anyway.
  auto ulps = [](double a, double b) { return std::abs(a - b) / (std::abs(b) * 0x1p-52 + 1e-300); };
  for (uint64_t i = 0; i < 20000; ++i) {
    const double u = random_uniform(5, 9, i);
    EXPECT_LE(ulps(portable_log(u), std::log(u)), 4.0) << u;
    const double x = (u - 0.5) * 60.0;
    EXPECT_LE(ulps(portable_exp(x), std::exp(x)), 4.0) << x;
    const double c = portable_cos_2pi(u);
    // long double: cos(2 pi u) in double has its own argument-rounding error near the zeros.
    const long double pi = 3.141592653589793238462643383279502884L;
    const long double angle = 2.0L * pi * static_cast<long double>(u);
    EXPECT_NEAR(c, static_cast<double>(std::cos(angle)), 3e-16) << u;
    EXPECT_NEAR(portable_sin_2pi(u), static_cast<double>(std::sin(angle)), 3e-16) << u;
  }
  EXPECT_EQ(portable_log(1.0), 0.0);
  EXPECT_EQ(portable_exp(0.0), 1.0);
  EXPECT_EQ(portable_cos_2pi(0.0), 1.0);
  EXPECT_EQ(portable_cos_2pi(0.5), -1.0);
  EXPECT_TRUE(std::isinf(portable_exp(1000.0)));
  EXPECT_EQ(portable_exp(-1000.0), 0.0);
  EXPECT_TRUE(std::isnan(portable_log(-1.0)));
  EXPECT_NEAR(portable_sigmoid(0.0), 0.5, 0.0);
  EXPECT_NEAR(portable_sigmoid(2.0), 1.0 / (1.0 + std::exp(-2.0)), 1e-16);
}

TEST(Random, PairsAndSingleNormalsAgree) {
  const NormalPair pair = random_normal_pair(9, 4, 21);
  EXPECT_EQ(random_normal(9, 4, 42), pair.first);
  EXPECT_EQ(random_normal(9, 4, 43), pair.second);
  // for_each_normal gives element i the same value whatever the range's start (odd or even).
  for (uint64_t begin : {0ull, 1ull, 6ull, 7ull}) {
    uint64_t count = 0;
    for_each_normal(9, 4, begin, begin + 9, [&](uint64_t i, double x) {
      EXPECT_EQ(x, random_normal(9, 4, i)) << i;
      EXPECT_EQ(i, begin + count++);
    });
    EXPECT_EQ(count, 9u);
  }
}

TEST(Random, NormalMoments) {
  const int n = 200000;
  double mean = 0.0, m2 = 0.0, m4 = 0.0;
  int beyond_3 = 0;
  for (int i = 0; i < n; ++i) {
    const double x = random_normal(42, 1, static_cast<uint64_t>(i));
    mean += x;
    m2 += x * x;
    m4 += x * x * x * x;
    beyond_3 += std::abs(x) > 3.0;
  }
  mean /= n;
  m2 /= n;
  m4 /= n;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(m2, 1.0, 0.01);
  EXPECT_NEAR(m4, 3.0, 0.06);                      // kurtosis of a normal
  EXPECT_NEAR(beyond_3 / double(n), 0.0027, 0.0006);  // two-sided 3-sigma tail
}

}  // namespace
}  // namespace kda::harness
