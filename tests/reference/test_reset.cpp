// Options::reset_state_at_chunk_starts, the "state-carry" baseline: with it every chunk sees only
// its own tokens, in both algorithms and precisions.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kda/ref/reference.h"
#include "test_support.h"

namespace kda::ref {
namespace {

using testing::make_problem;
using testing::ProblemSpec;
using testing::relative_max_diff;

// Packed, with an initial state (which the reset must ignore), a partial last chunk, an empty
// sequence, and chunk_size 16 so that there are many chunks.
ProblemSpec reset_spec() {
  ProblemSpec spec;
  spec.lengths = {70, 0, 33, 16};
  spec.heads = 2;
  spec.key_dim = 12;
  spec.value_dim = 7;
  spec.chunk_size = 16;
  return spec;
}

Options reset_options(bool reset) {
  Options options;
  options.chunk_size = 16;
  options.reset_state_at_chunk_starts = reset;
  return options;
}

// Tokens [first, first + n) of `p` as a problem of their own: dense, one sequence, no initial
// state. The gate is chunk-local, so a chunk's gate rows are the same in both problems.
Problem chunk_alone(const Problem& p, int64_t first, int64_t n) {
  Problem c;
  c.batch = 1;
  c.tokens = n;
  c.heads = p.heads;
  c.key_dim = p.key_dim;
  c.value_dim = p.value_dim;
  const int64_t HK = p.heads * p.key_dim, HV = p.heads * p.value_dim;
  c.q.assign(p.q.begin() + first * HK, p.q.begin() + (first + n) * HK);
  c.k.assign(p.k.begin() + first * HK, p.k.begin() + (first + n) * HK);
  c.gate.assign(p.gate.begin() + first * HK, p.gate.begin() + (first + n) * HK);
  c.v.assign(p.v.begin() + first * HV, p.v.begin() + (first + n) * HV);
  c.beta.assign(p.beta.begin() + first * p.heads, p.beta.begin() + (first + n) * p.heads);
  return c;
}

template <class S>
Result<S> run(bool chunked, const Problem& p, const Options& options) {
  return chunked ? chunked_forward<S>(p, options) : recurrent_forward<S>(p, options);
}

template <class S>
class Reset : public ::testing::Test {};
using Precisions = ::testing::Types<float, double>;
TYPED_TEST_SUITE(Reset, Precisions);

// Each chunk's output rows equal a fresh run on that chunk alone, bit for bit; the final state
// equals the fresh run's on the sequence's last chunk; an empty sequence ends with zeros.
TYPED_TEST(Reset, EveryChunkEqualsAFreshRunOnItAlone) {
  const Problem p = make_problem(reset_spec());
  const int64_t HV = p.heads * p.value_dim, HKV = p.heads * p.key_dim * p.value_dim;
  for (bool chunked : {false, true}) {
    SCOPED_TRACE(chunked ? "chunked" : "recurrent");
    const auto reset = run<TypeParam>(chunked, p, reset_options(true));
    int64_t checked_chunks = 0;
    for (std::size_t s = 0; s + 1 < p.cu_seqlens.size(); ++s) {
      const int64_t begin = p.cu_seqlens[s], end = p.cu_seqlens[s + 1];
      std::vector<TypeParam> last_state(HKV, TypeParam(0));
      for (int64_t first = begin; first < end; first += 16) {
        const int64_t n = std::min<int64_t>(16, end - first);
        const auto alone = run<TypeParam>(chunked, chunk_alone(p, first, n), reset_options(false));
        const std::vector<TypeParam> rows(reset.out.begin() + first * HV,
                                          reset.out.begin() + (first + n) * HV);
        ASSERT_EQ(rows, alone.out) << "sequence " << s << " chunk at token " << first;
        last_state = alone.final_state;
        ++checked_chunks;
      }
      const std::vector<TypeParam> state(reset.final_state.begin() + s * HKV,
                                         reset.final_state.begin() + (s + 1) * HKV);
      EXPECT_EQ(state, last_state) << "final state of sequence " << s;
    }
    EXPECT_EQ(checked_chunks, 5 + 3 + 1);
  }
}

// The option changes the answer: without decay (gate 0) the carried state is the whole history,
// so resetting it moves the output by a large fraction; chunks starting a sequence with no
// initial state are unaffected.
TYPED_TEST(Reset, CarriedStateMattersWithoutDecay) {
  ProblemSpec spec = reset_spec();
  spec.initial_state = false;
  Problem p = make_problem(spec);
  std::fill(p.gate.begin(), p.gate.end(), 0.0f);
  const int64_t HV = p.heads * p.value_dim;
  for (bool chunked : {false, true}) {
    SCOPED_TRACE(chunked ? "chunked" : "recurrent");
    const auto carried = run<TypeParam>(chunked, p, reset_options(false));
    const auto reset = run<TypeParam>(chunked, p, reset_options(true));
    double diff = 0, norm = 0;
    for (std::size_t i = 0; i < carried.out.size(); ++i) {
      const double d = double(carried.out[i]) - double(reset.out[i]);
      diff += d * d;
      norm += double(carried.out[i]) * double(carried.out[i]);
    }
    EXPECT_GT(std::sqrt(diff / norm), 0.3) << "rel-RMS(carried - reset) / RMS(carried)";
    for (int64_t e = 0; e < 16 * HV; ++e)  // the first chunk of sequence 0
      ASSERT_EQ(carried.out[e], reset.out[e]) << e;
    EXPECT_NE(carried.out[16 * HV], reset.out[16 * HV]);
  }
}

// Both algorithms agree under the reset too.
TEST(Reset, ChunkedMatchesRecurrentInDouble) {
  const Problem p = make_problem(reset_spec());
  const auto recurrent = recurrent_forward<double>(p, reset_options(true));
  const auto chunked = chunked_forward<double>(p, reset_options(true));
  EXPECT_LE(relative_max_diff(chunked.out, recurrent.out), 1e-12);
  EXPECT_LE(relative_max_diff(chunked.final_state, recurrent.final_state), 1e-12);
}

}  // namespace
}  // namespace kda::ref
