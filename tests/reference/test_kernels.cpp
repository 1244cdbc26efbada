// The fixed-order kernels (reference/src/kernels.h): every instruction set gives the same bits,
// the double results stay within 1e-12 of the Eigen implementation they replaced (0b498d2,
// eigen_reference.h), and the grams' anchored factorization falls back to the pairwise form for
// gates far outside the contract.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "eigen_reference.h"
#include "kda/ref/reference.h"
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

}  // namespace
}  // namespace kda::ref
