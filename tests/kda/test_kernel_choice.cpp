// The forward's kernel choice (lib/kda/src/kernel_choice.h): which inputs the one pass reads, the
// time model of both kernels against the H200 measurements it was fitted to, and the choice on
// the contract shapes (no GPU, no CUDA calls).
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "kda/kda.h"
#include "kernel_choice.h"

namespace {

using kda::detail::choose_forward_kernel;
using kda::detail::estimate_forward;
using kda::detail::ForwardKernel;
using kda::detail::one_pass_precise_enough;
using kda::detail::one_pass_reads;

constexpr int kH200Sms = 132;

const std::vector<int64_t> kFixed = {8192};
const std::vector<int64_t> kRagged6 = {1300, 547, 2048, 963, 271, 3063};
const std::vector<int64_t> kUniform8(8, 1024);

std::vector<int32_t> offsets(const std::vector<int64_t>& lengths) {
  std::vector<int32_t> cu{0};
  for (const int64_t len : lengths) cu.push_back(cu.back() + static_cast<int32_t>(len));
  return cu;
}

// A contract call (the attention-gym inputs) on packed sequences; the pointers are never read.
kda::ForwardParams contract_call(const std::vector<int32_t>& cu, int heads) {
  kda::ForwardParams p;
  p.batch = 1;
  p.tokens = cu.back();
  p.heads = heads;
  p.cu_seqlens = reinterpret_cast<const int32_t*>(0x1000);  // device pointer: not dereferenced
  p.cu_seqlens_host = cu.data();
  p.num_seqs = static_cast<int>(cu.size()) - 1;
  p.fuse_q_l2norm = true;  // the fused path: the one pass's precise enough path
  return p;
}

// Every input option, raw ones included; the library takes it for the fused contract path only
// (its precision elsewhere is above the long-memory bar).
TEST(KernelChoice, OnePassReadsEveryInputOptionWithinItsStrides) {
  const std::vector<int32_t> cu = offsets(kUniform8);
  const kda::ForwardParams contract = contract_call(cu, 96);
  EXPECT_TRUE(one_pass_reads(contract));
  EXPECT_TRUE(one_pass_precise_enough(contract));
  EXPECT_EQ(choose_forward_kernel(contract, kH200Sms), ForwardKernel::one_pass);
  kda::ForwardParams p = contract;
  p.fuse_q_l2norm = false;  // the explicit path
  EXPECT_TRUE(one_pass_reads(p));
  EXPECT_FALSE(one_pass_precise_enough(p));
  EXPECT_EQ(choose_forward_kernel(p, kH200Sms), ForwardKernel::two_kernel);
  p = contract;
  p.gate_input = kda::GateInput::raw;
  p.gate_dtype = kda::DType::bf16;
  p.beta_input = kda::BetaInput::logits;
  p.beta_dtype = kda::DType::bf16;
  p.fuse_k_l2norm = true;
  EXPECT_TRUE(one_pass_reads(p));
  EXPECT_FALSE(one_pass_precise_enough(p));
  EXPECT_EQ(choose_forward_kernel(p, kH200Sms), ForwardKernel::two_kernel);
  for (const auto edit : {+[](kda::ForwardParams& x) { x.gate_input = kda::GateInput::raw; },
                          +[](kda::ForwardParams& x) { x.beta_input = kda::BetaInput::logits; },
                          +[](kda::ForwardParams& x) { x.beta_dtype = kda::DType::bf16; },
                          +[](kda::ForwardParams& x) { x.fuse_k_l2norm = true; }}) {
    kda::ForwardParams one = contract;
    edit(one);
    EXPECT_FALSE(one_pass_precise_enough(one));
  }
  // 16 rows of a stride must fit a 32-bit element offset: 2^26 elements is one too many.
  p = contract;
  p.v_token_stride = (int64_t{1} << 26) - 8;
  EXPECT_TRUE(one_pass_reads(p));
  p.v_token_stride = int64_t{1} << 26;
  EXPECT_FALSE(one_pass_reads(p));
  EXPECT_EQ(choose_forward_kernel(p, kH200Sms), ForwardKernel::two_kernel);
}

// The model reproduces the measurements it was fitted to within 6 % (docs/perf-notes.md: the
// library's two kernels at d682e8f and the one pass, three builders, at 38112ce, H200).
TEST(KernelChoice, TheModelMatchesTheMeasuredTimes) {
  struct Measured {
    const std::vector<int64_t>* lengths;
    int heads;
    double two_kernel_us, one_pass_us;  // NaN: not measured
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const Measured& m :
       {Measured{&kFixed, 96, 933.8, 1027}, Measured{&kUniform8, 96, 949.6, 782},
        Measured{&kFixed, 64, 696.8, 1024}, Measured{&kUniform8, 64, 642.2, 528},
        Measured{&kRagged6, 96, 960.4, nan}, Measured{&kRagged6, 64, 648.8, nan}}) {
    const auto e = estimate_forward(*m.lengths, m.heads, kH200Sms);
    EXPECT_NEAR(e.two_kernel_us / m.two_kernel_us, 1.0, 0.06) << m.heads << " heads";
    if (!std::isnan(m.one_pass_us)) {
      EXPECT_NEAR(e.one_pass_us / m.one_pass_us, 1.0, 0.06) << m.heads << " heads";
    }
  }
}

// The contract shapes: the one pass on the many-chain ones, the two kernels on one long sequence.
TEST(KernelChoice, ContractShapes) {
  for (const int heads : {96, 64}) {
    const std::vector<int32_t> fixed = offsets(kFixed), ragged = offsets(kRagged6),
                               uniform = offsets(kUniform8);
    EXPECT_EQ(choose_forward_kernel(contract_call(fixed, heads), kH200Sms),
              ForwardKernel::two_kernel)
        << heads;
    EXPECT_EQ(choose_forward_kernel(contract_call(ragged, heads), kH200Sms),
              ForwardKernel::one_pass)
        << heads;
    EXPECT_EQ(choose_forward_kernel(contract_call(uniform, heads), kH200Sms),
              ForwardKernel::one_pass)
        << heads;
    // Dense batches are the same sequences.
    kda::ForwardParams dense;
    dense.fuse_q_l2norm = true;
    dense.batch = 8;
    dense.tokens = 1024;
    dense.heads = heads;
    EXPECT_EQ(choose_forward_kernel(dense, kH200Sms), ForwardKernel::one_pass) << heads;
  }
  // Fewer SMs make the same chains fill them sooner: on 66 SMs a single sequence of 96 heads
  // still keeps the two kernels (512 steps a chain), and many short chains the one pass.
  EXPECT_EQ(choose_forward_kernel(contract_call(offsets(kFixed), 96), 66),
            ForwardKernel::two_kernel);
  EXPECT_EQ(choose_forward_kernel(contract_call(offsets(kUniform8), 96), 66),
            ForwardKernel::one_pass);
}

// List scheduling, longest first: one chain per SM at a time, so chains beyond the SM count wait
// for the earliest to finish; empty sequences cost only their state.
TEST(KernelChoice, OnePassSchedule) {
  // 132 chains of 64 sub-chunks: one round; 133: two.
  const auto one_round = estimate_forward({1024}, 132, kH200Sms);
  const auto two_rounds = estimate_forward({1024}, 133, kH200Sms);
  EXPECT_DOUBLE_EQ(one_round.one_pass_us, 64 * 2.0 + 4.0);
  EXPECT_DOUBLE_EQ(two_rounds.one_pass_us, 2 * (64 * 2.0 + 4.0));
  // A long chain first and short ones beside it: the long one sets the time.
  const auto mixed = estimate_forward({16, 16, 16, 160}, 1, 2);
  EXPECT_DOUBLE_EQ(mixed.one_pass_us, 10 * 2.0 + 4.0);
  // Empty sequences (and a call of only empty sequences) are finite and cheap.
  const auto empty = estimate_forward({0, 0}, 4, kH200Sms);
  EXPECT_DOUBLE_EQ(empty.one_pass_us, 4.0);
  EXPECT_DOUBLE_EQ(empty.two_kernel_us, 0.0);
  // Beyond the simulated chain count the bound total / SMs + longest is used: within one
  // chain of the simulation at the boundary.
  const auto simulated = estimate_forward(std::vector<int64_t>(128, 100), 128, kH200Sms);
  const auto bounded = estimate_forward(std::vector<int64_t>(129, 100), 128, kH200Sms);
  EXPECT_GE(bounded.one_pass_us, simulated.one_pass_us);
  EXPECT_LE(bounded.one_pass_us, simulated.one_pass_us + 2 * (7 * 2.0 + 4.0));
}

}  // namespace
