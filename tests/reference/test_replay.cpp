// replay_forward (kda/ref/replay.h): the number formats round as the hardware does, every point
// exact is the chunked algorithm, and the kernels' plans give the error levels the H200 measured.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kda/ref/reference.h"
#include "kda/ref/replay.h"
#include "test_support.h"

namespace kda::ref {
namespace {

using testing::make_problem;
using testing::ProblemSpec;

double rel_rms(const std::vector<double>& golden, const std::vector<double>& actual) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < golden.size(); ++i) {
    err += (actual[i] - golden[i]) * (actual[i] - golden[i]);
    ref += golden[i] * golden[i];
  }
  return std::sqrt(err / ref);
}

// bf16 by bit manipulation (round to nearest even on the fp32 bits), the harness's rule.
double bf16_bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits = (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;
  float y;
  std::memcpy(&y, &bits, 4);
  return y;
}

TEST(ReplayFormats, RoundLikeTheHardware) {
  // bf16 agrees with the bit rule on values that are fp32 already.
  for (float x : {1.0f, 1.00390625f, 1.005859375f, -3.14159f, 1e-30f, 3e38f, 6.1e-5f, 0.1f}) {
    EXPECT_EQ(round_to(Format::bf16, x), bf16_bits(x)) << x;
  }
  // Ties to even: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7.
  EXPECT_EQ(round_to(Format::bf16, 1.0 + std::ldexp(1.0, -8)), 1.0);
  EXPECT_EQ(round_to(Format::bf16, 1.0 + 3 * std::ldexp(1.0, -8)), 1.0 + std::ldexp(1.0, -6));
  // fp16: 11 significant bits, max 65504, subnormals in steps of 2^-24, overflow to inf.
  EXPECT_EQ(round_to(Format::f16, 1.0 + std::ldexp(1.0, -11)), 1.0);
  EXPECT_EQ(round_to(Format::f16, 1.0 + std::ldexp(1.0, -10)), 1.0 + std::ldexp(1.0, -10));
  EXPECT_EQ(round_to(Format::f16, 65504.0), 65504.0);
  EXPECT_EQ(round_to(Format::f16, 65519.0), 65504.0);
  EXPECT_TRUE(std::isinf(round_to(Format::f16, 65520.0)));
  EXPECT_EQ(round_to(Format::f16, 3.0 * std::ldexp(1.0, -25)), std::ldexp(1.0, -23));
  EXPECT_EQ(round_to(Format::f16, std::ldexp(1.0, -26)), 0.0);
  // f16s: fp16's significand without its range; tf32 the same bits in fp32's range.
  EXPECT_EQ(round_to(Format::f16s, 1e30), round_to(Format::tf32, 1e30));
  EXPECT_EQ(round_to(Format::f16s, 65520.0), 65536.0);
  // The split pairs carry twice the bits.
  const double x = 1.0 + std::ldexp(1.0, -12) + std::ldexp(1.0, -20);
  EXPECT_EQ(round_to(Format::bf16x2, x), 1.0 + std::ldexp(1.0, -12));
  EXPECT_EQ(round_to(Format::f32, 0.1), static_cast<double>(0.1f));
  EXPECT_EQ(round_to(Format::exact, 0.1), 0.1);
  EXPECT_TRUE(std::isnan(round_to(Format::bf16, std::numeric_limits<double>::quiet_NaN())));
  EXPECT_EQ(parse_format("bf16x2"), Format::bf16x2);
  EXPECT_THROW(parse_format("fp8"), std::invalid_argument);
}

TEST(ReplayPlan, PointsByName) {
  RoundingPlan plan;
  plan.set("state_operand", Format::bf16x2);
  EXPECT_EQ(plan.state_operand, Format::bf16x2);
  EXPECT_EQ(plan.diff(RoundingPlan::default_kernel(true)), "state_operand=bf16x2");
  EXPECT_THROW(plan.set("state", Format::bf16), std::invalid_argument);
  const RoundingPlan exact = plan.exact();
  for (const auto& p : RoundingPlan::points()) EXPECT_EQ(exact.*p.member, Format::exact) << p.name;
}

// With every point exact the replay is the chunked algorithm with the kernels' anchors: it agrees
// with the recurrence to double rounding, tails, empty sequences and states included.
TEST(Replay, ExactPlanIsTheChunkedAlgorithm) {
  ProblemSpec spec;
  spec.heads = 2;
  spec.key_dim = 32;
  spec.value_dim = 16;
  spec.lengths = {70, 0, 150, 1};
  spec.tokens = 230;
  const Problem problem = make_problem(spec);
  Options options;
  const auto golden = recurrent_forward<double>(problem, options);
  // The two kernels' 64-token chunks and the one pass's 16-token sub-chunks of the same gate.
  for (const RoundingPlan& kernel : {RoundingPlan::default_kernel(true),
                                     RoundingPlan::default_kernel(false),
                                     RoundingPlan::one_pass(true), RoundingPlan::one_pass(false)}) {
    const auto replay = replay_forward(problem, options, kernel.exact());
    double max_err = 0, max_golden = 0;
    for (size_t i = 0; i < golden.out.size(); ++i) {
      max_err = std::max(max_err, std::fabs(replay.out[i] - golden.out[i]));
      max_golden = std::max(max_golden, std::fabs(golden.out[i]));
    }
    const std::string what = std::string(kernel.fused_q_norm ? "fused" : "explicit") +
                             " chunk " + std::to_string(kernel.chunk);
    EXPECT_LE(max_err, 1e-12 * max_golden) << what;
    EXPECT_LE(rel_rms(golden.final_state, replay.final_state), 1e-13) << what;
  }
  // The state reset at every chunk start (kda-check's state-carry baseline) too.
  Options reset = options;
  reset.reset_state_at_chunk_starts = true;
  const auto golden_reset = recurrent_forward<double>(problem, reset);
  const auto replay_reset = replay_forward(problem, reset, RoundingPlan().exact());
  EXPECT_LE(rel_rms(golden_reset.out, replay_reset.out), 1e-13);
  EXPECT_GT(rel_rms(golden.out, golden_reset.out), 1e-3) << "the reset must change something";
  Options bad = options;
  bad.chunk_size = 32;
  EXPECT_THROW(replay_forward(problem, bad, RoundingPlan()), std::invalid_argument);
  RoundingPlan bad_chunk;
  bad_chunk.chunk = 32;
  EXPECT_THROW(replay_forward(problem, options, bad_chunk), std::invalid_argument);
}

// The plans give the error levels the kernels measured on the H200: the bf16 record (9954cfb's
// v2w) 4.0e-3 / 4.3e-3 fused / explicit on contract-like gates (measured 3.97 / 4.30e-3 on the
// contract shapes), and the default (fp16) plan clearly below it. Every rounding point matters
// somewhere, so each point alone gives an error well above double rounding.
TEST(Replay, KernelPlansGiveTheMeasuredErrorLevels) {
  ProblemSpec spec;
  spec.heads = 2;
  spec.key_dim = 128;
  spec.value_dim = 128;
  spec.lengths = {512};
  spec.initial_state = false;
  Problem problem = make_problem(spec);
  // The kernels' inputs are bf16: round q, k, v as the harness does.
  for (auto* x : {&problem.q, &problem.k, &problem.v})
    for (float& e : *x) e = static_cast<float>(bf16_bits(e));
  Options options;
  const auto golden = recurrent_forward<double>(problem, options);
  auto err = [&](const RoundingPlan& plan) {
    return rel_rms(golden.out, replay_forward(problem, options, plan).out);
  };
  const double old_fused = err(RoundingPlan::bf16_record(true));
  const double old_explicit = err(RoundingPlan::bf16_record(false));
  const double new_fused = err(RoundingPlan::default_kernel(true));
  const double new_explicit = err(RoundingPlan::default_kernel(false));
  EXPECT_NEAR(old_fused, 3.95e-3, 0.3e-3);
  EXPECT_NEAR(old_explicit, 4.29e-3, 0.3e-3);
  EXPECT_LT(new_fused, 0.8 * old_fused);
  EXPECT_LT(new_explicit, 0.85 * old_explicit);
  EXPECT_LT(new_fused, new_explicit) << "the explicit path carries q_hat's bf16 rounding";
  // The one pass's bf16 record tiles and scan operands: at the old bf16 record's level, above
  // the default's (measured on the H100 at 6a46b5f: 3.7e-3 / 4.1e-3 on long-memory problems).
  const double one_pass_fused = err(RoundingPlan::one_pass(true));
  const double one_pass_explicit = err(RoundingPlan::one_pass(false));
  EXPECT_GT(one_pass_fused, new_fused);
  EXPECT_LT(one_pass_fused, one_pass_explicit);
  EXPECT_NEAR(one_pass_fused, old_fused, 0.25 * old_fused);
  const RoundingPlan plan = RoundingPlan::default_kernel(false);
  for (const auto& p : RoundingPlan::points()) {
    if (plan.*p.member == Format::exact) continue;
    RoundingPlan alone = plan.exact();
    alone.*p.member = plan.*p.member;
    EXPECT_GT(err(alone), 1e-13) << p.name << ": a point the replay ignored would give ~1e-16";
  }
}

}  // namespace
}  // namespace kda::ref
