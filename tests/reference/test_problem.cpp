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

}  // namespace
}  // namespace kda::ref
