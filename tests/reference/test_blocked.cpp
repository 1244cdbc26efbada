// blocked_forward: the chunked algorithm with every chunk computed in 16-row blocks (block-
// diagonal T, anchor-free cross-block grams, V_new by a block solve), the algebra of the hybrid
// one-kernel design (docs/design.md). Checked against the recurrence on long-memory gates (the
// carried state is most of the output) and on the steepest decay the contract allows (the cross
// terms' factors reach far below float's range there).
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

// Chunk-local cumulative log2 gates, per channel a decay per token `rate(h, d)`; inactive rows
// keep the generator's values.
template <class Rate>
void set_gate(Problem& p, int chunk_size, const Rate& rate) {
  const int64_t K = p.key_dim, H = p.heads;
  const auto spans = sequence_token_spans(p);
  for (int64_t h = 0; h < H; ++h)
    for (auto [begin, end] : spans)
      for (int64_t t = begin; t < end; ++t) {
        const int64_t i = (t - begin) % chunk_size;
        for (int64_t d = 0; d < K; ++d)
          p.gate[(t * H + h) * K + d] = static_cast<float>(static_cast<double>(i + 1) * rate(h, d));
      }
}

Problem long_memory_problem(const ProblemSpec& spec) {
  Problem p = make_problem(spec);
  std::mt19937_64 rng(spec.seed + 7);
  std::uniform_real_distribution<double> octave(-12.0, -1.0);
  std::vector<double> rate(static_cast<std::size_t>(p.heads * p.key_dim));
  for (auto& r : rate) r = -std::exp2(octave(rng));
  set_gate(p, spec.chunk_size, [&](int64_t h, int64_t d) {
    return rate[static_cast<std::size_t>(h * p.key_dim + d)];
  });
  return p;
}

// Every channel at the contract's steepest decay, 128 / 15 log2 units per token: 16 tokens span
// 2^-136, 64 tokens 2^-546.
Problem steepest_problem(const ProblemSpec& spec) {
  Problem p = make_problem(spec);
  set_gate(p, spec.chunk_size, [](int64_t, int64_t) { return -128.0 / 15.0; });
  return p;
}

std::vector<ProblemSpec> specs() {
  ProblemSpec dense;
  dense.batch = 2;
  dense.tokens = 64 * 3 + 37;  // the last chunk partial, its last block short
  dense.heads = 2;
  dense.key_dim = 12;
  dense.value_dim = 7;
  dense.chunk_size = 64;
  ProblemSpec packed = dense;
  packed.batch = 1;
  packed.lengths = {0, 1, 64 * 2, 17, 64 + 33};
  packed.tokens = 64 * 6;
  ProblemSpec chunk32 = dense;
  chunk32.chunk_size = 32;
  chunk32.initial_state = false;
  return {dense, packed, chunk32};
}

Options options_for(const ProblemSpec& spec) {
  Options o;
  o.chunk_size = spec.chunk_size;
  return o;
}

// In double, the blocked chunk is the chunked algorithm to rounding, on gates where the state
// matters (the reset-at-chunk-starts baseline is far off): not vacuous.
TEST(Blocked, MatchesTheRecurrenceOnLongMemory) {
  for (const ProblemSpec& spec : specs()) {
    const Problem p = long_memory_problem(spec);
    const Options o = options_for(spec);
    const auto recurrent = recurrent_forward<double>(p, o);
    Options reset = o;
    reset.reset_state_at_chunk_starts = true;
    EXPECT_GT(relative_max_diff(chunked_forward<double>(p, reset).out, recurrent.out), 0.1)
        << "the state must matter";
    const auto blocked = blocked_forward<double>(p, o);
    EXPECT_LE(relative_max_diff(blocked.out, recurrent.out), 1e-11) << spec.chunk_size;
    EXPECT_LE(relative_max_diff(blocked.final_state, recurrent.final_state), 1e-11);
  }
}

// At the steepest decay the cross terms' factors underflow: in float every output stays finite
// and as close to the double recurrence as the chunked float is (x4); in double exact.
TEST(Blocked, SteepestDecayStaysFiniteAndExact) {
  for (const ProblemSpec& spec : specs()) {
    const Problem p = steepest_problem(spec);
    const Options o = options_for(spec);
    const auto golden = recurrent_forward<double>(p, o);
    EXPECT_LE(relative_max_diff(blocked_forward<double>(p, o).out, golden.out), 1e-11);
    const auto blocked = blocked_forward<float>(p, o);
    for (const float x : blocked.out) ASSERT_TRUE(std::isfinite(x));
    const double chunked_error = relative_max_diff(chunked_forward<float>(p, o).out, golden.out);
    EXPECT_LE(relative_max_diff(blocked.out, golden.out), 4 * chunked_error + 1e-6);
  }
}

TEST(Blocked, FloatStaysCloseToTheGolden) {
  for (const ProblemSpec& spec : specs()) {
    const Problem p = long_memory_problem(spec);
    const Options o = options_for(spec);
    const auto golden = recurrent_forward<double>(p, o);
    const double chunked_error = relative_max_diff(chunked_forward<float>(p, o).out, golden.out);
    const auto blocked = blocked_forward<float>(p, o);
    EXPECT_LE(relative_max_diff(blocked.out, golden.out), 4 * chunked_error + 1e-6);
    EXPECT_LE(relative_max_diff(blocked.final_state, golden.final_state), 1e-4);
  }
}

TEST(BlockedArguments, RefusesAChunkThatIsNotWholeBlocks) {
  ProblemSpec spec;
  spec.tokens = 40;
  const Problem p = make_problem(spec);
  Options o;
  o.chunk_size = 24;
  try {
    blocked_forward<double>(p, o);
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 16, got 24"), std::string::npos);
  }
}

}  // namespace
}  // namespace kda::ref::testing
