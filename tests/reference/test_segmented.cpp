// segmented_forward: the chunked algorithm split into segments that chain through their K x K
// transitions (pass 1 per segment from zero, pass 2 the chain, pass 3 the outputs), the exact
// split a GPU forward can run in parallel for few long sequences. Checked on long-memory gates,
// where the state carried between segments is most of the output.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kda/ref/reference.h"
#include "test_support.h"

namespace kda::ref::testing {
namespace {

// Replaces the generator's fast gate (every state forgotten within a chunk or two) by long
// memories: per channel a log2 decay per token from -2^-12 to -0.5, log-uniform, so some channels
// keep their state over the whole sequence and some over a few tokens; chunk-local cumulative as
// the contract wants; inactive rows stay NaN.
void use_long_memory_gate(Problem& p, int chunk_size, uint64_t seed) {
  const int64_t K = p.key_dim, H = p.heads;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> octave(-12.0, -1.0);
  std::vector<double> rate(static_cast<std::size_t>(H * K));
  for (auto& r : rate) r = -std::exp2(octave(rng));
  const auto spans = sequence_token_spans(p);
  for (int64_t h = 0; h < H; ++h) {
    for (auto [begin, end] : spans) {
      for (int64_t t = begin; t < end; ++t) {
        const int64_t i = (t - begin) % chunk_size;
        for (int64_t d = 0; d < K; ++d) {
          p.gate[(t * H + h) * K + d] =
              static_cast<float>(static_cast<double>(i + 1) * rate[static_cast<std::size_t>(h * K + d)]);
        }
      }
    }
  }
}

struct SegmentCase {
  std::string name;
  ProblemSpec spec;
};
void PrintTo(const SegmentCase& c, std::ostream* os) { *os << c.name; }

std::vector<SegmentCase> segment_cases() {
  std::vector<SegmentCase> cases;
  ProblemSpec dense;
  dense.batch = 2;
  dense.tokens = 16 * 13 + 5;  // 14 chunks of 16, the last partial
  dense.heads = 2;
  dense.key_dim = 12;
  dense.value_dim = 7;
  dense.chunk_size = 16;
  cases.push_back({"dense_14_chunks", dense});
  ProblemSpec packed = dense;
  packed.batch = 1;
  packed.lengths = {0, 1, 16 * 9, 37, 16 * 5 + 15};
  packed.tokens = 16 * 20;  // an inactive suffix
  cases.push_back({"packed_with_empty_and_suffix", packed});
  ProblemSpec chunk64 = dense;
  chunk64.tokens = 64 * 6 + 20;
  chunk64.chunk_size = 64;
  chunk64.initial_state = false;
  cases.push_back({"chunk64_no_initial_state", chunk64});
  return cases;
}

class Segmented : public ::testing::TestWithParam<SegmentCase> {
 protected:
  Problem problem() const {
    const ProblemSpec& spec = GetParam().spec;
    Problem p = make_problem(spec);
    use_long_memory_gate(p, spec.chunk_size, spec.seed + 100);
    return p;
  }
  Options options() const {
    Options o;
    o.chunk_size = GetParam().spec.chunk_size;
    return o;
  }
};

// One segment (or more chunks than a sequence has) is the chunked algorithm itself.
TEST_P(Segmented, OneSegmentIsTheChunkedForwardBitForBit) {
  const Problem p = problem();
  const auto chunked = chunked_forward<double>(p, options());
  const auto one = segmented_forward<double>(p, options(), 1 << 20);
  EXPECT_EQ(one.out, chunked.out);
  EXPECT_EQ(one.final_state, chunked.final_state);
  const auto chunked_f = chunked_forward<float>(p, options());
  const auto one_f = segmented_forward<float>(p, options(), 1 << 20);
  EXPECT_EQ(one_f.out, chunked_f.out);
  EXPECT_EQ(one_f.final_state, chunked_f.final_state);
}

// Every segment length agrees with the recurrence to double rounding, and the carried state is
// what the outputs are made of (the reset-at-chunk-starts baseline is far off): not vacuous.
TEST_P(Segmented, SegmentsMatchTheRecurrence) {
  const Problem p = problem();
  const auto recurrent = recurrent_forward<double>(p, options());
  Options reset = options();
  reset.reset_state_at_chunk_starts = true;
  const auto no_carry = chunked_forward<double>(p, reset);
  EXPECT_GT(relative_max_diff(no_carry.out, recurrent.out), 0.1) << "the state must matter";
  for (const int segment_chunks : {1, 2, 3, 5}) {
    const auto seg = segmented_forward<double>(p, options(), segment_chunks);
    EXPECT_LE(relative_max_diff(seg.out, recurrent.out), 1e-11) << segment_chunks;
    EXPECT_LE(relative_max_diff(seg.final_state, recurrent.final_state), 1e-11) << segment_chunks;
  }
}

// In float the split costs little precision: within 4x the chunked float's error (the chain's
// extra K x K products) plus a little, both against the double recurrence.
TEST_P(Segmented, FloatSegmentsStayCloseToTheGolden) {
  const Problem p = problem();
  const auto golden = recurrent_forward<double>(p, options());
  const auto chunked = chunked_forward<float>(p, options());
  const double chunked_error = relative_max_diff(chunked.out, golden.out);
  for (const int segment_chunks : {1, 2, 4}) {
    const auto seg = segmented_forward<float>(p, options(), segment_chunks);
    EXPECT_LE(relative_max_diff(seg.out, golden.out), 4 * chunked_error + 1e-6) << segment_chunks;
    EXPECT_LE(relative_max_diff(seg.final_state, golden.final_state), 1e-4) << segment_chunks;
  }
}

INSTANTIATE_TEST_SUITE_P(Reference, Segmented, ::testing::ValuesIn(segment_cases()),
                         [](const auto& c) { return c.param.name; });

TEST(SegmentedArguments, RefusesWhatItCannotSplit) {
  ProblemSpec spec;
  spec.tokens = 40;
  const Problem p = make_problem(spec);
  Options options;
  EXPECT_THROW(segmented_forward<double>(p, options, 0), std::invalid_argument);
  options.reset_state_at_chunk_starts = true;
  EXPECT_THROW(segmented_forward<double>(p, options, 2), std::invalid_argument);
  try {
    segmented_forward<double>(p, Options{}, -3);
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("segment_chunks must be >= 1, got -3"), std::string::npos);
  }
}

}  // namespace
}  // namespace kda::ref::testing
