// The CPU verification's references (verify.h): the raw path's golden (issue 16) against honest
// and broken emulations of a raw-input forward, and the guard that keeps each path on its own
// golden.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kda/harness/inputs.h"
#include "kda/harness/verify.h"
#include "kda/ref/reference.h"

namespace kda::harness {
namespace {

ShapeSpec shape_from(const std::string& yaml) {
  return parse_shape_file("shapes:\n  - " + yaml + "\n", "test").shapes.at(0);
}

// Packed with an empty sequence, a chunk boundary inside the first sequence, a tail after cu[N],
// states both ways; K = V = 16 keeps the references quick. Mixed gates carry state across chunks.
const char* kShape =
    "{id: a, heads: 2, seq_lens: [90, 0, 30], total_tokens: 128, head_dim: 16, "
    "initial_state: true, final_state: true, gate: mixed}";

std::vector<float> widened(const std::vector<uint16_t>& bits) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_float(bits[i]);
  return out;
}

// What a raw-input forward computes in fp32 from the raw tensors, as the kernels do: k normalized
// in fp32 and rounded to bf16, beta = sigmoid of the logits in fp32, the gate produced in fp32.
// `normalize_k` / `sigmoid` false: a forward that forgets that step.
kda::ref::Result<float> raw_forward_fp32(const HostInputs& in, bool normalize_k, bool sigmoid) {
  kda::ref::Problem p = in.to_reference();
  const int64_t rows = in.batch * in.tokens * in.heads;
  const std::vector<float> raw_k = widened(in.raw_k);
  if (normalize_k) {
    std::vector<float> k(raw_k.size());
    kda::ref::l2norm_rows<float>(raw_k.data(), k.data(), rows, in.key_dim);
    for (size_t i = 0; i < k.size(); ++i) p.k[i] = bf16_to_float(float_to_bf16(k[i]));
  } else {
    p.k = raw_k;
  }
  for (size_t row = 0; row < p.beta.size(); ++row) {
    const float logit = bf16_to_float(in.beta_logits[row]);
    p.beta[row] = sigmoid ? 1.0f / (1.0f + std::exp(-logit)) : logit;
  }
  p.gate = kda::ref::gate_cumsum<float>(widened(in.raw_gate), in.a_log, in.dt_bias, in.batch,
                                        in.tokens, in.heads, in.key_dim, in.lower_bound,
                                        in.cu_seqlens, 64);
  kda::ref::Options options;
  options.final_state = in.want_final_state;
  return kda::ref::recurrent_forward<float>(p, options);
}

TEST(RawGolden, JudgesARawForwardAndCatchesOneThatSkipsAStep) {
  const HostInputs in = make_inputs(shape_from(kShape), 3);
  const Golden golden = compute_golden(in, {}, true);
  const Golden raw = compute_raw_golden(in, {}, true);
  EXPECT_TRUE(raw.raw_inputs);
  EXPECT_FALSE(golden.raw_inputs);
  EXPECT_TRUE(raw.q_hat.empty());
  ASSERT_EQ(raw.out.size(), golden.out.size());
  ASSERT_EQ(raw.final_state.size(), golden.final_state.size());
  // The state carried between chunks moves the output (mixed gates): the rows test it.
  EXPECT_GT(raw.carry.rel_rms, 1e-2);
  EXPECT_FALSE(raw.carry.weak);

  // An honest fp32 raw forward passes on the output and the final state.
  const auto honest = raw_forward_fp32(in, true, true);
  const PathCheck ok = judge_path(Path::raw, in, raw, honest.out, honest.final_state);
  EXPECT_TRUE(ok.passed()) << ok.verdict();
  EXPECT_TRUE(ok.final_state_checked);

  // The raw golden is not the contract golden: its k and beta come from other roundings of the
  // same draws (close, not equal).
  const Judgement apart = judge(golden.out, golden.out_low, raw.out);
  EXPECT_GT(apart.max_abs_err, 0.0);
  EXPECT_LT(apart.rel_rms, 2e-2);

  // A forward that forgets k's norm, or the sigmoid, fails.
  for (const auto& [normalize_k, sigmoid] : {std::pair{false, true}, std::pair{true, false}}) {
    const auto broken = raw_forward_fp32(in, normalize_k, sigmoid);
    const PathCheck bad = judge_path(Path::raw, in, raw, broken.out, broken.final_state);
    EXPECT_FALSE(bad.passed()) << "normalize_k " << normalize_k << ", sigmoid " << sigmoid;
  }
}

TEST(RawGolden, EachPathIsJudgedWithItsOwnGolden) {
  const HostInputs in = make_inputs(shape_from(kShape), 3);
  const Golden golden = compute_golden(in);
  const Golden raw = compute_raw_golden(in);
  const std::vector<float> out(golden.out.size(), 0.0f), ht(golden.final_state.size(), 0.0f);
  EXPECT_THROW(judge_path(Path::raw, in, golden, out, ht), std::logic_error);
  EXPECT_THROW(judge_path(Path::fused, in, raw, out, ht), std::logic_error);
  EXPECT_NO_THROW(judge_path(Path::raw, in, raw, out, ht));
  // Inputs without raw tensors (a dump written before them) have no raw golden.
  HostInputs old = in;
  old.a_log.clear();
  try {
    compute_raw_golden(old);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "compute_raw_golden: the dump has no raw inputs: dump again with this version");
  }
}

TEST(RawGolden, APathNotRunIsNotVerifiedWithItsReason) {
  const HostInputs in = make_inputs(shape_from(kShape), 3);
  const CheckRow unsupported =
      path_not_run_row("a", in, Path::raw, "v1_mma", "unsupported by v1_mma: why");
  EXPECT_EQ(unsupported.path, "raw");
  EXPECT_EQ(unsupported.tensor, "out");
  EXPECT_EQ(unsupported.variant, "v1_mma");
  EXPECT_EQ(unsupported.gate, "mixed");
  EXPECT_EQ(unsupported.verdict, Verdict::not_verified);
  EXPECT_FALSE(unsupported.failed());
  EXPECT_EQ(unsupported.verdict_text(), "not verified: unsupported by v1_mma: why");
  const CheckRow no_raw = path_not_run_row("a", in, Path::raw, "", kNoRawInputs);
  EXPECT_FALSE(no_raw.variant.has_value());
  EXPECT_EQ(no_raw.verdict_text(),
            "not verified: the dump has no raw inputs: dump again with this version");
  const CheckCounts n = count_verdicts({unsupported, no_raw});
  EXPECT_EQ(n.not_verified, 2);
  EXPECT_EQ(n.failed, 0);
}

}  // namespace
}  // namespace kda::harness
