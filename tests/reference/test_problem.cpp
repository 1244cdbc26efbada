// Problem::check and Options validation: every bad size or offset is refused with a message
// that names the field.
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>

#include "kda/ref/reference.h"
#include "test_support.h"

namespace kda::ref {
namespace {

using testing::make_problem;
using testing::ProblemSpec;

Problem valid_packed() {
  ProblemSpec spec;
  spec.heads = 2;
  spec.key_dim = 4;
  spec.value_dim = 3;
  spec.lengths = {3, 0, 5};
  spec.tokens = 10;
  return make_problem(spec);
}

// Expects check() to throw std::invalid_argument whose message contains `field`.
void expect_rejected(const Problem& problem, const std::string& field) {
  try {
    problem.check();
    ADD_FAILURE() << "check() accepted a problem with a bad " << field;
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find(field), std::string::npos)
        << "message does not name " << field << ": " << error.what();
  }
}

void expect_rejected_after(const std::function<void(Problem&)>& mutate, const std::string& field) {
  Problem problem = valid_packed();
  mutate(problem);
  expect_rejected(problem, field);
}

TEST(ProblemCheck, AcceptsValidDenseAndPacked) {
  EXPECT_NO_THROW(valid_packed().check());
  ProblemSpec dense;
  dense.batch = 2;
  dense.tokens = 7;
  dense.heads = 3;
  EXPECT_NO_THROW(make_problem(dense).check());
  dense.initial_state = false;
  EXPECT_NO_THROW(make_problem(dense).check());
}

TEST(ProblemCheck, NumStates) {
  EXPECT_EQ(valid_packed().num_states(), 3);
  ProblemSpec dense;
  dense.batch = 4;
  dense.tokens = 2;
  EXPECT_EQ(make_problem(dense).num_states(), 4);
}

TEST(ProblemCheck, RejectsWrongBufferSizes) {
  expect_rejected_after([](Problem& p) { p.q.pop_back(); }, "Problem::q");
  expect_rejected_after([](Problem& p) { p.k.push_back(0); }, "Problem::k");
  expect_rejected_after([](Problem& p) { p.v.pop_back(); }, "Problem::v");
  expect_rejected_after([](Problem& p) { p.gate.pop_back(); }, "Problem::gate");
  expect_rejected_after([](Problem& p) { p.beta.push_back(0); }, "Problem::beta");
  expect_rejected_after([](Problem& p) { p.initial_state.pop_back(); }, "Problem::initial_state");
  // value_dim changes the expected size of v only.
  expect_rejected_after([](Problem& p) { p.value_dim = 4; }, "Problem::v");
  expect_rejected_after([](Problem& p) { p.key_dim = 0; }, "Problem::key_dim");
}

TEST(ProblemCheck, MessageStatesExpectedAndActualSize) {
  Problem problem = valid_packed();
  problem.beta.pop_back();  // 10 tokens x 2 heads = 20 expected
  try {
    problem.check();
    FAIL() << "accepted a short beta";
  } catch (const std::invalid_argument& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("20"), std::string::npos) << message;
    EXPECT_NE(message.find("19"), std::string::npos) << message;
  }
}

TEST(ProblemCheck, RejectsBadOffsets) {
  expect_rejected_after([](Problem& p) { p.cu_seqlens = {1, 3, 8}; }, "cu_seqlens");
  expect_rejected_after([](Problem& p) { p.cu_seqlens = {0, 5, 3, 8}; }, "cu_seqlens");
  expect_rejected_after([](Problem& p) { p.cu_seqlens = {0, 5, 11}; }, "cu_seqlens");
  expect_rejected_after([](Problem& p) { p.cu_seqlens = {0}; }, "cu_seqlens");
  // Packed input needs batch == 1 (sizes adjusted so only the batch rule can fire).
  expect_rejected_after(
      [](Problem& p) {
        p.batch = 2;
        p.tokens = 5;
      },
      "cu_seqlens");
}

TEST(ProblemCheck, AcceptsOffsetEdgeCases) {
  Problem problem = valid_packed();
  problem.cu_seqlens = {0, 0, 0, 0};  // all empty, inactive suffix is the whole buffer
  EXPECT_NO_THROW(problem.check());
  problem.cu_seqlens = {0, 4, 4, 10};  // ends exactly at tokens
  EXPECT_NO_THROW(problem.check());
}

TEST(ProblemCheck, ForwardEntryPointsValidate) {
  Problem problem = valid_packed();
  problem.gate.pop_back();
  EXPECT_THROW(recurrent_forward<double>(problem, {}), std::invalid_argument);
  EXPECT_THROW(chunked_forward<double>(problem, {}), std::invalid_argument);
  Options bad_chunk;
  bad_chunk.chunk_size = 0;
  EXPECT_THROW(chunked_forward<float>(valid_packed(), bad_chunk), std::invalid_argument);
  EXPECT_THROW(recurrent_forward<float>(valid_packed(), bad_chunk), std::invalid_argument);
}

// chunk_local: every 64-token chunk (counted from each sequence start) becomes a sequence of its
// own with a zero state; its output row by row equals a fresh run of that chunk alone.
TEST(ChunkLocal, EveryChunkIsASequenceStartingFromZero) {
  ProblemSpec spec;
  spec.heads = 2;
  spec.key_dim = 4;
  spec.value_dim = 3;
  spec.lengths = {70, 0, 5, 130};
  spec.tokens = 210;  // 5 inactive rows
  const Problem p = make_problem(spec);
  const Problem local = chunk_local(p, 64);
  EXPECT_EQ(local.cu_seqlens, (std::vector<int32_t>{0, 64, 70, 75, 139, 203, 205}));
  EXPECT_TRUE(local.initial_state.empty());
  EXPECT_NO_THROW(local.check());
  Options options;
  options.final_state = false;
  const auto out = recurrent_forward<double>(local, options).out;
  // Chunk [139, 203) of the fourth sequence, run alone.
  Problem alone = p;
  alone.cu_seqlens = {0, 64};
  alone.tokens = 64;
  alone.initial_state.clear();
  const int64_t row = p.heads * p.key_dim, vrow = p.heads * p.value_dim;
  auto slice = [](const std::vector<float>& x, int64_t begin, int64_t n) {
    return std::vector<float>(x.begin() + begin, x.begin() + begin + n);
  };
  alone.q = slice(p.q, 139 * row, 64 * row);
  alone.k = slice(p.k, 139 * row, 64 * row);
  alone.v = slice(p.v, 139 * vrow, 64 * vrow);
  alone.gate = slice(p.gate, 139 * row, 64 * row);
  alone.beta = slice(p.beta, 139 * p.heads, 64 * p.heads);
  const auto want = recurrent_forward<double>(alone, options).out;
  for (int64_t i = 0; i < 64 * vrow; ++i) ASSERT_EQ(out[139 * vrow + i], want[i]) << i;
  // The initial state is dropped too: sequence 0's first row differs from the full run's.
  const auto full = recurrent_forward<double>(p, options).out;
  EXPECT_NE(full[0], out[0]);
}

TEST(ChunkLocal, DenseBatchesBecomeOnePackedBuffer) {
  ProblemSpec spec;
  spec.batch = 3;
  spec.tokens = 70;
  spec.key_dim = 4;
  spec.value_dim = 4;
  spec.initial_state = false;
  const Problem p = make_problem(spec);
  const Problem local = chunk_local(p, 64);
  EXPECT_EQ(local.batch, 1);
  EXPECT_EQ(local.tokens, 210);
  EXPECT_EQ(local.cu_seqlens, (std::vector<int32_t>{0, 64, 70, 134, 140, 204, 210}));
  Options options;
  options.final_state = false;
  const auto full = recurrent_forward<double>(p, options).out;
  const auto reset = recurrent_forward<double>(local, options).out;
  ASSERT_EQ(full.size(), reset.size());
  // The first chunk of every batch row starts from zero either way: identical there.
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t i = 0; i < 64 * 4; ++i) ASSERT_EQ(full[(b * 70) * 4 + i], reset[(b * 70) * 4 + i]);
  EXPECT_THROW(chunk_local(p, 0), std::invalid_argument);
}

}  // namespace
}  // namespace kda::ref
