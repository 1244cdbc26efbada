// The fixed-order kernels (reference/src/kernels.h): every instruction set gives the same bits,
// the double results stay within 1e-12 of the Eigen implementation they replaced (0b498d2,
// eigen_reference.h), and the grams' anchored factorization falls back to the pairwise form for
// gates far outside the contract.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "eigen_reference.h"
#include "kda/ref/reference.h"
#include "kernels.h"
#include "test_support.h"

namespace kda::ref {
namespace {

using testing::make_problem;
using testing::ProblemSpec;
using testing::relative_max_diff;

struct KernelCase {
  std::string name;
  ProblemSpec spec;
};

ProblemSpec spec(int64_t heads, int64_t K, int64_t V, std::vector<int32_t> lengths,
                 int chunk_size = 64) {
  ProblemSpec s;
  s.heads = heads;
  s.key_dim = K;
  s.value_dim = V;
  s.lengths = std::move(lengths);
  s.chunk_size = chunk_size;
  return s;
}

// Value widths that exercise every column path of every instruction set: slices of four
// vectors, single vectors and single columns (doubles per vector: 8, 4, 2; floats: 16, 8, 4).
std::vector<KernelCase> kernel_cases() {
  std::vector<KernelCase> cases;
  cases.push_back({"k128_v128_ragged", spec(2, 128, 128, {200, 0, 64, 17})});
  cases.push_back({"k64_v96", spec(2, 64, 96, {150})});
  cases.push_back({"k12_v7", spec(3, 12, 7, {65, 1, 80})});
  cases.push_back({"k5_v3", spec(2, 5, 3, {70})});
  cases.push_back({"k32_v130_chunk16", spec(1, 32, 130, {50, 33}, 16)});
  cases.push_back({"k128_v40_chunk100", spec(1, 128, 40, {230}, 100)});
  return cases;
}

void PrintTo(const KernelCase& c, std::ostream* os) { *os << c.name; }

class Kernels : public ::testing::TestWithParam<KernelCase> {};

// Restores the instruction set chosen at start-up when a test forced another.
class IsaGuard {
 public:
  IsaGuard() : saved_(active_isa()) {}
  ~IsaGuard() { set_isa(saved_); }
  IsaGuard(const IsaGuard&) = delete;  // restores one global setting once
  IsaGuard& operator=(const IsaGuard&) = delete;

 private:
  Isa saved_;
};

template <class S>
void expect_same_bits(const Result<S>& a, const Result<S>& b, const std::string& what) {
  EXPECT_EQ(a.out, b.out) << what;
  EXPECT_EQ(a.final_state, b.final_state) << what;
}

TEST_P(Kernels, EveryInstructionSetGivesTheSameBits) {
  const Problem p = make_problem(GetParam().spec);
  Options options;
  options.chunk_size = GetParam().spec.chunk_size;
  const IsaGuard guard;
  set_isa(Isa::baseline);
  const auto recurrent_d = recurrent_forward<double>(p, options);
  const auto recurrent_f = recurrent_forward<float>(p, options);
  const auto chunked_d = chunked_forward<double>(p, options);
  const auto chunked_f = chunked_forward<float>(p, options);
  int compared = 0;
  for (Isa isa : {Isa::avx2, Isa::avx512}) {
    if (!isa_supported(isa)) continue;
    set_isa(isa);
    const std::string name = isa_name(isa);
    expect_same_bits(recurrent_forward<double>(p, options), recurrent_d, name + " recurrent<double>");
    expect_same_bits(recurrent_forward<float>(p, options), recurrent_f, name + " recurrent<float>");
    expect_same_bits(chunked_forward<double>(p, options), chunked_d, name + " chunked<double>");
    expect_same_bits(chunked_forward<float>(p, options), chunked_f, name + " chunked<float>");
    ++compared;
  }
  if (compared == 0) GTEST_SKIP() << "this CPU has no AVX2: only the baseline to compare";
}

TEST_P(Kernels, DoubleWithin1e12OfTheEigenImplementation) {
  const Problem p = make_problem(GetParam().spec);
  Options options;
  options.chunk_size = GetParam().spec.chunk_size;
  const auto old_recurrent = testing::eigen::recurrent<double>(p, options);
  const auto old_chunked = testing::eigen::chunked<double>(p, options);
  const auto recurrent = recurrent_forward<double>(p, options);
  const auto chunked = chunked_forward<double>(p, options);
  const double diffs[] = {relative_max_diff(recurrent.out, old_recurrent.out),
                          relative_max_diff(recurrent.final_state, old_recurrent.final_state),
                          relative_max_diff(chunked.out, old_chunked.out),
                          relative_max_diff(chunked.final_state, old_chunked.final_state)};
  for (double diff : diffs) EXPECT_LE(diff, 1e-12);
  std::printf("%s: max|new - old| / max|old|: recurrent out %.2e state %.2e, chunked out %.2e "
              "state %.2e\n",
              GetParam().name.c_str(), diffs[0], diffs[1], diffs[2], diffs[3]);
  // The float versions changed at float rounding level only.
  EXPECT_LE(relative_max_diff(recurrent_forward<float>(p, options).out,
                              testing::eigen::recurrent<float>(p, options).out),
            1e-5);
  EXPECT_LE(relative_max_diff(chunked_forward<float>(p, options).out,
                              testing::eigen::chunked<float>(p, options).out),
            1e-5);
}

INSTANTIATE_TEST_SUITE_P(Reference, Kernels, ::testing::ValuesIn(kernel_cases()),
                         [](const auto& c) { return c.param.name; });

TEST(Isa, ForcingAnUnsupportedOneThrows) {
  EXPECT_TRUE(isa_supported(Isa::baseline));
  EXPECT_STREQ(isa_name(Isa::avx512), "avx512");
  const IsaGuard guard;
  int unsupported = 0;
  for (Isa isa : {Isa::avx2, Isa::avx512}) {
    if (isa_supported(isa)) continue;
    EXPECT_THROW(set_isa(isa), std::invalid_argument);
    ++unsupported;
  }
  if (unsupported == 0) GTEST_SKIP() << "this CPU supports every instruction set";
}

// Gates with per-token log2 decays far beyond the contract's -8.53: an anchored factor 2^(7 d)
// would overflow (double: d = -150, 2^1050; float: d = -20, 2^140), so the grams must take the
// pairwise form, and the chunked results still match the recurrence.
Problem strongly_decaying(double per_token_log2_decay) {
  ProblemSpec s = spec(2, 16, 8, {100, 40});
  Problem p = make_problem(s);
  const int64_t K = p.key_dim, H = p.heads;
  for (std::size_t sequence = 0; sequence + 1 < p.cu_seqlens.size(); ++sequence)
    for (int64_t t = p.cu_seqlens[sequence]; t < p.cu_seqlens[sequence + 1]; ++t) {
      const int64_t in_chunk = (t - p.cu_seqlens[sequence]) % 64 + 1;
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < K; ++d)  // channel d decays a little less than the others
          p.gate[(t * H + h) * K + d] =
              static_cast<float>(double(in_chunk) * per_token_log2_decay * (1.0 - 0.02 * double(d)));
    }
  return p;
}

TEST(Kernels, GramsFallBackToPairwiseForHugeDecays) {
  const Problem p64 = strongly_decaying(-150.0);
  const auto recurrent = recurrent_forward<double>(p64, {});
  const auto chunked = chunked_forward<double>(p64, {});
  EXPECT_LE(relative_max_diff(chunked.out, recurrent.out), 1e-12);
  EXPECT_LE(relative_max_diff(chunked.final_state, recurrent.final_state), 1e-12);

  const Problem p32 = strongly_decaying(-20.0);
  const auto golden = recurrent_forward<double>(p32, {});
  const auto chunked_f = chunked_forward<float>(p32, {});
  EXPECT_LE(relative_max_diff(chunked_f.out, golden.out), 1e-5);
  EXPECT_LE(relative_max_diff(chunked_f.final_state, golden.final_state), 1e-5);
}

// detail::exp2_array in double (its own polynomial) against exp2l: <= 2 ulp over the whole range,
// exact for integers, std::exp2's values outside the normal range, and the same bits on every
// instruction set; in float it is std::exp2 with underflow to +0.
TEST(Exp2Array, DoubleWithinTwoUlpOfExp2lEverywhere) {
  std::vector<double> x;
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> wide(-1080.0, 1030.0), unit(-1.0, 1.0);
  for (int i = 0; i < 200000; ++i) x.push_back(i % 2 ? wide(rng) : unit(rng));
  for (double special : {0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1e-300, -546.25, -1022.0, -1022.5,
                         -1074.0, -1075.0, -1075.5, -2000.0, 1023.0, 1023.9, 1024.0, 5000.0})
    x.push_back(special);
  x.push_back(std::numeric_limits<double>::quiet_NaN());
  x.push_back(-std::numeric_limits<double>::infinity());
  x.push_back(std::numeric_limits<double>::infinity());
  std::vector<double> y(x.size());
  detail::exp2_array(x.data(), y.data(), static_cast<int64_t>(x.size()));
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(y[i]));
      continue;
    }
    if (x[i] < -1075.0) {
      EXPECT_EQ(y[i], 0.0) << x[i];
      continue;
    }
    if (!(x[i] >= -1022.0 && x[i] <= 1023.0)) {
      EXPECT_EQ(y[i], std::exp2(x[i])) << x[i];
      continue;
    }
    const long double truth = exp2l(static_cast<long double>(x[i]));
    const double ulp = std::ldexp(1.0, std::ilogb(static_cast<double>(truth)) - 52);
    worst = std::max(worst, static_cast<double>(std::fabs(y[i] - truth)) / ulp);
    if (x[i] == std::floor(x[i])) {
      EXPECT_EQ(y[i], std::ldexp(1.0, static_cast<int>(x[i]))) << x[i];
    }
  }
  EXPECT_LE(worst, 2.0);
  std::printf("exp2_array<double>: worst error %.2f ulp\n", worst);
  std::vector<double> in_place = x;  // y == x gives the same values
  detail::exp2_array(in_place.data(), in_place.data(), static_cast<int64_t>(x.size()));
  EXPECT_EQ(std::memcmp(in_place.data(), y.data(), y.size() * sizeof(double)), 0);

  const IsaGuard guard;
  for (Isa isa : {Isa::baseline, Isa::avx2, Isa::avx512}) {
    if (!isa_supported(isa)) continue;
    set_isa(isa);
    std::vector<double> again(x.size());
    detail::exp2_array(x.data(), again.data(), static_cast<int64_t>(x.size()));
    EXPECT_EQ(std::memcmp(again.data(), y.data(), y.size() * sizeof(double)), 0) << isa_name(isa);
  }
}

TEST(Exp2Array, FloatIsStdExp2WithUnderflowToZero) {
  const std::vector<float> x = {0.0f, -1.0f, -3.3f, -126.5f, -149.0f, -150.5f, -1000.0f, 10.25f};
  std::vector<float> y(x.size());
  detail::exp2_array(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (std::size_t i = 0; i < x.size(); ++i)
    EXPECT_EQ(y[i], x[i] < -150.0f ? 0.0f : std::exp2(x[i])) << x[i];
}

}  // namespace
}  // namespace kda::ref
