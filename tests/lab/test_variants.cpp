// The lab's registry of forward variants (lab/include/kda/lab/variants.h): names, capabilities,
// workspace sizes and the refusals each variant's validation adds to the library's (no GPU: the
// pointers below are fake, aligned addresses that are never dereferenced).
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kda/kda.h"
#include "kda/lab/variants.h"
#include "records.h"             // lab/src: the v0 and v1 record sizes
#include "scans.h"               // lab/src: v2_mma's SCAN choice
#include "validation_support.h"  // tests/kda: fake pointers, a valid call, expect_error

namespace {

using kda::ErrorCode;
using kda::lab::Variant;

using kda::test::expect_error;
using kda::test::fake;

const Variant& variant(const char* name) {
  const Variant* v = kda::lab::find_variant(name);
  if (v == nullptr) throw std::logic_error(std::string("no variant ") + name);
  return *v;
}

// A valid dense call, its workspace sized for `v`.
kda::ForwardParams dense_forward(const Variant& v) {
  kda::ForwardParams p = kda::test::dense_forward_on_fake_pointers();
  p.workspace_bytes = v.workspace_bytes(p);
  return p;
}

// Every raw input at once (what engines pass).
kda::ForwardParams raw_forward(const Variant& v) {
  kda::ForwardParams p = dense_forward(v);
  p.gate_input = kda::GateInput::raw;
  p.gate_dtype = kda::DType::bf16;
  p.a_log = fake<const float>(0xA00000);
  p.dt_bias = fake<const float>(0xB00000);
  p.beta_input = kda::BetaInput::logits;
  p.beta_dtype = kda::DType::bf16;
  p.fuse_k_l2norm = true;
  p.fuse_q_l2norm = true;
  return p;
}

TEST(LabVariants, TheLadderInOrderTheLibrarysLast) {
  const std::vector<std::string> names = {
      "v0_fp32",         "v1_mma",           "v2_mma",         "v2t_mma", "v2w_whole_chains",
      "v2w_two_kernel",  "one_pass16",       "one_pass16_bf16", "one_pass16_pairs",
      "one_pass16_f16",  "one_pass16_vpairs", "one_pass16_halves", "one_pass16_halves_staged",
      "one_pass16_helpers", "one_pass16_l2_helpers", "one_pass16_l2_chains_alone", "v2w_mma"};
  EXPECT_EQ(kda::lab::variant_names(), names);
  ASSERT_EQ(kda::lab::variants().size(), names.size());
  for (const Variant& v : kda::lab::variants()) {
    EXPECT_EQ(kda::lab::find_variant(v.name), &v);
    EXPECT_NE(std::string(v.summary), "") << v.name;
    EXPECT_EQ(v.ships, &v == &kda::lab::shipping_variant()) << v.name;
  }
  EXPECT_EQ(kda::lab::find_variant("v9"), nullptr);
  EXPECT_EQ(kda::lab::find_variant(""), nullptr);
  // The shipping variant is kda.h's own entry points, not a copy of them.
  const Variant& ships = kda::lab::shipping_variant();
  EXPECT_STREQ(ships.name, "v2w_mma");
  EXPECT_EQ(ships.forward, &kda::chunk_forward);
  EXPECT_EQ(ships.forward_stage, &kda::chunk_forward_stage);
  EXPECT_EQ(ships.workspace_bytes, &kda::forward_workspace_bytes);
}

TEST(LabVariants, Capabilities) {
  for (const char* name : {"v0_fp32", "v1_mma"}) {
    EXPECT_FALSE(variant(name).raw_inputs) << name;
    EXPECT_TRUE(variant(name).fused_q_norm_exact) << name;
  }
  for (const char* name :
       {"v2_mma", "v2t_mma", "v2w_whole_chains", "v2w_two_kernel", "one_pass16", "one_pass16_bf16",
        "one_pass16_pairs", "one_pass16_f16", "one_pass16_vpairs", "one_pass16_halves",
        "one_pass16_l2_helpers", "one_pass16_l2_chains_alone", "v2w_mma"}) {
    EXPECT_TRUE(variant(name).raw_inputs) << name;
    EXPECT_FALSE(variant(name).fused_q_norm_exact) << name;
  }
  // The staged value halves and the helper clusters read the contract's inputs only; their
  // fused q norm is the one pass's.
  for (const char* name : {"one_pass16_halves_staged", "one_pass16_helpers"}) {
    EXPECT_FALSE(variant(name).raw_inputs) << name;
    EXPECT_FALSE(variant(name).fused_q_norm_exact) << name;
  }
}

// One record per (head, chunk slot) of each variant's size: v0's fp32 record, the bf16 v1 record
// of v1, v2 and v2t (half of v0's), the library's fp16 one (v1's + 512 B of U bounds).
TEST(LabVariants, WorkspaceSizes) {
  EXPECT_EQ(kda::lab::kRecord0Bytes, 147968);  // (4 * 64 * 128 + 64 * 64 + 128) fp32
  EXPECT_EQ(kda::lab::kRecord1Bytes, 74240);   // (4 * 64 * 128 + 64 * 64) bf16 + 128 fp32
  kda::ForwardParams p;
  p.batch = 2;
  p.tokens = 130;
  p.heads = 2;
  const size_t slots = size_t{2} * (260 / 64 + 2);
  EXPECT_EQ(variant("v0_fp32").workspace_bytes(p), slots * kda::lab::kRecord0Bytes);
  for (const char* name : {"v1_mma", "v2_mma", "v2t_mma"}) {
    EXPECT_EQ(variant(name).workspace_bytes(p), slots * kda::lab::kRecord1Bytes) << name;
  }
  EXPECT_EQ(variant("v2w_mma").workspace_bytes(p), slots * 74752);
  EXPECT_EQ(variant("v2w_mma").workspace_bytes(p), kda::forward_workspace_bytes(p));
  // Packed contract shape h96-ragged6, sized before the offsets exist: num_seqs alone counts.
  p.batch = 1;
  p.tokens = 8192;
  p.heads = 96;
  p.num_seqs = 6;
  EXPECT_EQ(variant("v0_fp32").workspace_bytes(p), size_t{96} * (128 + 6) * 147968);
}

// Each variant checks the workspace against its own record size: a v1-sized workspace is too
// small for v0 and for the library's record, a v0-sized one is enough for every variant.
TEST(LabVariants, WorkspaceCheckedAgainstTheVariantsRecord) {
  const kda::ForwardParams v0 = dense_forward(variant("v0_fp32"));
  const kda::ForwardParams v1 = dense_forward(variant("v1_mma"));
  const kda::ForwardParams v2w = dense_forward(variant("v2w_mma"));
  EXPECT_EQ(v0.workspace_bytes * kda::lab::kRecord1Bytes,
            v1.workspace_bytes * kda::lab::kRecord0Bytes);
  for (const Variant& v : kda::lab::variants()) {
    EXPECT_NO_THROW(v.validate(v0)) << v.name;
    kda::ForwardParams p = dense_forward(v);
    EXPECT_NO_THROW(v.validate(p)) << v.name;
    p.fuse_q_l2norm = true;
    EXPECT_NO_THROW(v.validate(p)) << v.name;
  }
  expect_error([&] { variant("v0_fp32").validate(v1); }, ErrorCode::invalid_argument,
               "workspace_bytes = " + std::to_string(v1.workspace_bytes) +
                   " is too small: these sizes need " + std::to_string(v0.workspace_bytes) +
                   " bytes");
  expect_error([&] { variant("v2w_mma").validate(v1); }, ErrorCode::invalid_argument,
               "workspace_bytes = " + std::to_string(v1.workspace_bytes) +
                   " is too small: these sizes need " + std::to_string(v2w.workspace_bytes) +
                   " bytes");
  EXPECT_NO_THROW(variant("v2t_mma").validate(v1));  // the same record as v1
}

// v0's and v1's PREP read only the contract inputs: unsupported, naming the variant, before any
// CUDA call; v2's (the library's PREP) takes them.
TEST(LabVariants, RawInputs) {
  for (const char* name : {"v0_fp32", "v1_mma"}) {
    const Variant& v = variant(name);
    const kda::ForwardParams raw = raw_forward(v);
    const std::string fragment =
        std::string(
            "chunk_forward: raw inputs (GateInput::raw, BetaInput::logits, bf16 beta, "
            "fuse_k_l2norm) need a v2 variant (v2_mma, v2t_mma, v2w_mma); variant ") +
        name + " reads only the contract inputs";
    expect_error([&] { v.validate(raw); }, ErrorCode::unsupported, fragment);
    expect_error([&] { v.forward(raw, nullptr); }, ErrorCode::unsupported, fragment);
    expect_error([&] { v.forward_stage(raw, 0, nullptr); }, ErrorCode::unsupported, fragment);
    kda::ForwardParams k_only = dense_forward(v);
    k_only.fuse_k_l2norm = true;
    expect_error([&] { v.validate(k_only); }, ErrorCode::unsupported, "raw inputs");
  }
  for (const char* name :
       {"v2_mma", "v2t_mma", "v2w_two_kernel", "one_pass16", "one_pass16_bf16", "one_pass16_pairs",
        "one_pass16_f16", "one_pass16_vpairs", "one_pass16_halves", "one_pass16_l2_helpers",
        "one_pass16_l2_chains_alone", "v2w_mma"}) {
    const Variant& v = variant(name);
    kda::ForwardParams p = raw_forward(v);
    EXPECT_NO_THROW(v.validate(p)) << name;
    p.gate_dtype = kda::DType::f32;
    p.beta_dtype = kda::DType::f32;
    EXPECT_NO_THROW(v.validate(p)) << name;
  }
  // The staged value halves and the helper clusters refuse every raw input at validation (before
  // any CUDA call), each one alone too, so kda-check reports their raw path as unsupported instead of stopping at its
  // launch; the contract's inputs pass.
  for (const char* name : {"one_pass16_halves_staged", "one_pass16_helpers"}) {
    const Variant& v = variant(name);
    const char* fragment =
        "the one pass's staged value halves and helper clusters read the contract's inputs "
        "only";
    expect_error([&] { v.validate(raw_forward(v)); }, ErrorCode::unsupported, fragment);
    kda::ForwardParams one = dense_forward(v);
    one.fuse_k_l2norm = true;
    expect_error([&] { v.validate(one); }, ErrorCode::unsupported, fragment);
    one = dense_forward(v);
    one.beta_input = kda::BetaInput::logits;
    expect_error([&] { v.validate(one); }, ErrorCode::unsupported, fragment);
    EXPECT_NO_THROW(v.validate(dense_forward(v))) << name;
  }
}

// The library's contract checks come first, for every variant alike.
TEST(LabVariants, TheLibrarysChecks) {
  for (const Variant& v : kda::lab::variants()) {
    kda::ForwardParams p = dense_forward(v);
    p.key_dim = 64;
    expect_error([&] { v.validate(p); }, ErrorCode::unsupported, "chunk_forward: key_dim = 64");
    expect_error([&] { v.forward(p, nullptr); }, ErrorCode::unsupported, "key_dim");
    expect_error([&] { (void)v.workspace_bytes(p); }, ErrorCode::unsupported, "key_dim");
    p = dense_forward(v);
    p.q = nullptr;
    expect_error([&] { v.validate(p); }, ErrorCode::invalid_argument, "q is null");
    p = dense_forward(v);
    expect_error([&] { v.forward_stage(p, 4, nullptr); }, ErrorCode::invalid_argument,
                 "chunk_forward_stage: stage = 4 is out of range");
  }
}

// The SCANs of 4 CTAs per (sequence, head) chain (v0, v1, and v2 below its threshold) hit the
// grid's 2^31 - 1 CTAs at a quarter of the sequences the one-CTA SCANs do.
TEST(LabVariants, ScanGridLimit) {
  for (const char* name : {"v0_fp32", "v1_mma", "v2_mma"}) {
    kda::ForwardParams p = dense_forward(variant(name));
    p.batch = int64_t{1} << 30;
    p.tokens = 1;
    expect_error([&] { variant(name).validate(p); }, ErrorCode::unsupported,
                 "sequences exceed the scan grid limit of (2^31 - 1) / 4");
  }
  for (const char* name : {"v2t_mma", "v2w_two_kernel", "one_pass16", "one_pass16_bf16",
                           "one_pass16_pairs", "one_pass16_f16", "one_pass16_vpairs",
                           "one_pass16_halves",
                           "one_pass16_halves_staged", "one_pass16_helpers", "one_pass16_l2_helpers",
                           "one_pass16_l2_chains_alone", "v2w_mma"}) {
    kda::ForwardParams p = dense_forward(variant(name));
    p.batch = int64_t{1} << 30;
    p.tokens = 1;
    p.workspace_bytes = variant(name).workspace_bytes(p);
    EXPECT_NO_THROW(variant(name).validate(p)) << name;
  }
}

// v2_mma's SCAN choice (scans.h): the transposed-state SCAN from 60 % of the SMs' worth of
// (sequence, head) chains, measured on the H200 to win at 96 chains and lose at 64 (132 SMs).
TEST(LabVariants, TransposedScanChoice) {
  using kda::lab::transposed_scan_pays;
  EXPECT_FALSE(transposed_scan_pays(64, 132));  // h64-fixed
  EXPECT_TRUE(transposed_scan_pays(96, 132));   // h96-fixed
  EXPECT_FALSE(transposed_scan_pays(79, 132));
  EXPECT_TRUE(transposed_scan_pays(80, 132));   // 80 / 132 >= 0.6 > 79 / 132
  EXPECT_TRUE(transposed_scan_pays(384, 132));  // h64-ragged6
  EXPECT_FALSE(transposed_scan_pays(0, 132));   // nothing to fill: v1 (launches no work either)
  EXPECT_FALSE(transposed_scan_pays(2, 8));
  EXPECT_TRUE(transposed_scan_pays(int64_t{1} << 40, 132));  // no overflow in the product
}

}  // namespace
