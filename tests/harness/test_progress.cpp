// ReferenceEta and the start line of kda-check's progress output.
#include <gtest/gtest.h>

#include <vector>

#include "kda/harness/progress.h"

namespace kda::harness {
namespace {

TEST(ReferenceWork, ScalesWithTokenHeadsAndDimsOverUsableThreads) {
  EXPECT_DOUBLE_EQ(reference_work(1000, 128, 128, 64, 2), 1000.0 * 128 * 128 / 2);
  // One (sequence, head) pair: only one thread can work on it.
  EXPECT_DOUBLE_EQ(reference_work(16384, 128, 128, 1, 2), 16384.0 * 128 * 128);
  EXPECT_DOUBLE_EQ(reference_work(10, 4, 8, 0, 0), 10.0 * 4 * 8);  // never divides by 0
}

TEST(ReferenceLoad, FromSpecAndFromInputsAgree) {
  ShapeSpec shape;
  shape.id = "ragged";
  shape.heads = 3;
  shape.seq_lens = {5, 0, 7};
  shape.total_tokens = 20;  // an inactive suffix does not count
  shape.key_dim = 16;
  shape.value_dim = 8;
  const ReferenceLoad from_spec = reference_load(shape, 2);
  EXPECT_EQ(from_spec.token_heads, 12 * 3);
  EXPECT_DOUBLE_EQ(from_spec.work, 36.0 * 16 * 8 / 2);
  const ReferenceLoad from_inputs = reference_load(make_inputs(shape, 1), 2);
  EXPECT_EQ(from_inputs.token_heads, from_spec.token_heads);
  EXPECT_DOUBLE_EQ(from_inputs.work, from_spec.work);
}

TEST(ReferenceEta, UsesThePriorUntilAShapeIsRecordedThenTheMeasuredRate) {
  ReferenceEta eta(2e-9);
  EXPECT_DOUBLE_EQ(eta.estimate(1e9), 2.0);
  eta.record(1e9, 5.0);
  EXPECT_DOUBLE_EQ(eta.estimate(1e9), 5.0);
  eta.record(3e9, 3.0);  // the rate is total seconds over total work: 8 s / 4e9
  EXPECT_DOUBLE_EQ(eta.seconds_per_work(), 2e-9);
  eta.record(0.0, 7.0);  // a shape without work (nothing verified) changes nothing
  eta.record(1e9, -1.0);
  EXPECT_DOUBLE_EQ(eta.seconds_per_work(), 2e-9);
  EXPECT_DOUBLE_EQ(eta.remaining({1e9, 2e9, 3e9}, 1), 10.0);
  EXPECT_DOUBLE_EQ(eta.remaining({1e9}, 1), 0.0);
}

TEST(ReferenceStartLine, QuietForShortShapes) {
  EXPECT_FALSE(reference_start_line(0, 6, "smoke", 1024, 0.4, 30.0).has_value());
  EXPECT_FALSE(reference_start_line(0, 1, "smoke", 1024, 1.99, 1.99).has_value());
}

TEST(ReferenceStartLine, NamesShapeWorkAndEta) {
  const auto line = reference_start_line(1, 6, "h96-ragged6", 786432, 12.4, 50.0);
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(*line, "[2/6] h96-ragged6: CPU references for 786432 token-heads, about 12 s; "
                   "about 50 s left in this run");
  // The last shape has no run ETA; long estimates in minutes.
  EXPECT_EQ(*reference_start_line(5, 6, "h64-uniform8", 524288, 150.0, 150.0),
            "[6/6] h64-uniform8: CPU references for 524288 token-heads, about 2.5 min");
}

}  // namespace
}  // namespace kda::harness
