// Host-side validation of the kda entry points and the workspace size (no GPU: the pointers
// below are fake, aligned addresses that are never dereferenced).
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kda/kda.h"
#include "record.h"              // lib/kda/src: record size and chunk-slot formula
#include "validation_support.h"  // tests/kda: fake pointers, a valid call, expect_error

namespace {

using kda::DType;
using kda::ErrorCode;

using kda::test::expect_error;
using kda::test::fake;

template <class Params>
void expect_invalid(const Params& p, ErrorCode code, const std::string& fragment) {
  expect_error([&] { kda::validate(p); }, code, fragment);
}

// (4 * 64 * 128 + 64 * 64) fp16 + 128 fp32 decays + 128 fp32 U bounds (the lab's records:
// tests/lab/test_variants.cpp).
constexpr int64_t kRecordBytes = 74752;

// ---------------------------------------------------------------------------------------------
// chunk_forward

kda::ForwardParams dense_forward() {
  kda::ForwardParams p = kda::test::dense_forward_on_fake_pointers();
  p.workspace_bytes = kda::forward_workspace_bytes(p);
  return p;
}

struct PackedForward {
  std::vector<int32_t> cu = {0, 65, 65, 128};
  kda::ForwardParams p = dense_forward();
  PackedForward() {
    p.batch = 1;
    p.tokens = 140;
    p.cu_seqlens = fake<const int32_t>(0x700000);
    p.cu_seqlens_host = cu.data();
    p.num_seqs = 3;
    p.initial_state = fake<const float>(0x800000);
    p.final_state = fake<float>(0x900000);
    p.workspace_bytes = kda::forward_workspace_bytes(p);
  }
  PackedForward(const PackedForward&) = delete;  // p points into cu
  PackedForward& operator=(const PackedForward&) = delete;
};

TEST(ValidateForward, AcceptsValidParams) {
  kda::ForwardParams dense = dense_forward();
  EXPECT_NO_THROW(kda::validate(dense));
  dense.fuse_q_l2norm = true;
  EXPECT_NO_THROW(kda::validate(dense));
  dense.num_seqs = 2;  // == batch is tolerated for dense batches
  EXPECT_NO_THROW(kda::validate(dense));
  // Slices of one packed QKV projection: token stride 3 * heads * 128.
  dense.q_token_stride = dense.k_token_stride = dense.v_token_stride = 3 * 2 * 128;
  dense.out_token_stride = 2 * 128 + 8;
  EXPECT_NO_THROW(kda::validate(dense));

  PackedForward packed;
  EXPECT_NO_THROW(kda::validate(packed.p));
  packed.cu = {0, 0, 0, 0};  // all sequences empty
  EXPECT_NO_THROW(kda::validate(packed.p));
  packed.cu = {0, 140, 140, 140};  // ends exactly at tokens
  EXPECT_NO_THROW(kda::validate(packed.p));
}

TEST(ValidateForward, UnsupportedHeadDims) {
  kda::ForwardParams p = dense_forward();
  p.key_dim = 64;
  expect_invalid(p, ErrorCode::unsupported,
                 "chunk_forward: key_dim = 64 is not supported: the GPU kernels support K = V = "
                 "128 only (use the CPU reference for other sizes)");
  p = dense_forward();
  p.value_dim = 256;
  expect_invalid(p, ErrorCode::unsupported, "value_dim = 256 is not supported");
  expect_error([&] { (void)kda::forward_workspace_bytes(p); }, ErrorCode::unsupported,
               "value_dim = 256");
}

TEST(ValidateForward, QDtype) {
  kda::ForwardParams p = dense_forward();
  p.q_dtype = DType::f32;
  p.fuse_q_l2norm = true;
  expect_invalid(p, ErrorCode::invalid_argument,
                 "chunk_forward: fuse_q_l2norm requires bf16 q (got f32): normalize q with "
                 "kda::l2norm first or cast it to bf16");
  p.fuse_q_l2norm = false;
  expect_invalid(p, ErrorCode::invalid_argument, "chunk_forward: q_dtype = f32: q must be bf16");
}

TEST(ValidateForward, NullPointers) {
  const struct {
    const char* field;
    void (*clear)(kda::ForwardParams&);
  } cases[] = {
      {"q is null", [](kda::ForwardParams& p) { p.q = nullptr; }},
      {"k is null", [](kda::ForwardParams& p) { p.k = nullptr; }},
      {"v is null", [](kda::ForwardParams& p) { p.v = nullptr; }},
      {"gate is null", [](kda::ForwardParams& p) { p.gate = nullptr; }},
      {"beta is null", [](kda::ForwardParams& p) { p.beta = nullptr; }},
      {"out is null", [](kda::ForwardParams& p) { p.out = nullptr; }},
  };
  for (const auto& c : cases) {
    kda::ForwardParams p = dense_forward();
    c.clear(p);
    expect_invalid(p, ErrorCode::invalid_argument, std::string("chunk_forward: ") + c.field);
  }
  // Optional states may be null.
  kda::ForwardParams p = dense_forward();
  p.initial_state = nullptr;
  p.final_state = nullptr;
  EXPECT_NO_THROW(kda::validate(p));
}

TEST(ValidateForward, Sizes) {
  kda::ForwardParams p = dense_forward();
  p.batch = 0;
  expect_invalid(p, ErrorCode::invalid_argument, "chunk_forward: batch = 0 must be >= 1");
  p = dense_forward();
  p.tokens = -3;
  expect_invalid(p, ErrorCode::invalid_argument, "chunk_forward: tokens = -3 must be >= 1");
  p = dense_forward();
  p.heads = 0;
  expect_invalid(p, ErrorCode::invalid_argument, "chunk_forward: heads = 0 must be >= 1");
  p = dense_forward();
  p.num_seqs = 3;
  expect_invalid(p, ErrorCode::invalid_argument, "num_seqs = 3 without cu_seqlens");
}

TEST(ValidateForward, Offsets) {
  {
    PackedForward packed;
    packed.p.batch = 2;
    expect_invalid(packed.p, ErrorCode::invalid_argument,
                   "chunk_forward: cu_seqlens requires batch == 1 (got batch = 2)");
  }
  {
    PackedForward packed;
    packed.p.cu_seqlens_host = nullptr;
    expect_invalid(packed.p, ErrorCode::invalid_argument,
                   "cu_seqlens is set but cu_seqlens_host is null");
  }
  {
    PackedForward packed;
    packed.p.cu_seqlens = nullptr;
    expect_invalid(packed.p, ErrorCode::invalid_argument,
                   "cu_seqlens_host is set but cu_seqlens is null");
  }
  {
    PackedForward packed;
    packed.p.num_seqs = 0;
    expect_invalid(packed.p, ErrorCode::invalid_argument, "num_seqs = 0 with cu_seqlens");
  }
  {
    PackedForward packed;
    packed.cu = {3, 65, 65, 128};
    expect_invalid(packed.p, ErrorCode::invalid_argument, "cu_seqlens_host[0] = 3 must be 0");
  }
  {
    PackedForward packed;
    packed.cu = {0, 65, 64, 128};
    expect_invalid(packed.p, ErrorCode::invalid_argument,
                   "cu_seqlens_host decreases at index 2 (cu[1] = 65 > cu[2] = 64)");
  }
  {
    PackedForward packed;
    packed.cu = {0, 65, 65, 141};
    expect_invalid(packed.p, ErrorCode::invalid_argument,
                   "cu_seqlens_host[3] = 141 exceeds tokens = 140");
  }
  {
    PackedForward packed;
    packed.p.cu_seqlens = fake<const int32_t>(0x700002);
    expect_invalid(packed.p, ErrorCode::invalid_argument,
                   "cu_seqlens = 0x700002 is not 4-byte aligned");
  }
}

TEST(ValidateForward, Alignment) {
  const struct {
    const char* message;
    void (*shift)(kda::ForwardParams&);
  } cases[] = {
      {"q = 0x100008 is not 16-byte aligned", [](kda::ForwardParams& p) { p.q = fake(0x100008); }},
      {"k = 0x200004 is not 16-byte aligned", [](kda::ForwardParams& p) { p.k = fake(0x200004); }},
      {"v = 0x300002 is not 16-byte aligned", [](kda::ForwardParams& p) { p.v = fake(0x300002); }},
      {"gate = 0x400004 is not 16-byte aligned",
       [](kda::ForwardParams& p) { p.gate = fake<const float>(0x400004); }},
      {"beta = 0x500002 is not 4-byte aligned",
       [](kda::ForwardParams& p) { p.beta = fake<const float>(0x500002); }},
      {"out = 0x600008 is not 16-byte aligned",
       [](kda::ForwardParams& p) { p.out = fake(0x600008); }},
      {"initial_state = 0x800004 is not 16-byte aligned",
       [](kda::ForwardParams& p) { p.initial_state = fake<const float>(0x800004); }},
      {"final_state = 0x900008 is not 16-byte aligned",
       [](kda::ForwardParams& p) { p.final_state = fake<float>(0x900008); }},
      {"workspace = 0x10000080 is not 256-byte aligned",
       [](kda::ForwardParams& p) { p.workspace = fake(0x10000080); }},
  };
  for (const auto& c : cases) {
    kda::ForwardParams p = dense_forward();
    c.shift(p);
    expect_invalid(p, ErrorCode::invalid_argument, c.message);
  }
  // beta only needs 4 bytes.
  kda::ForwardParams p = dense_forward();
  p.beta = fake<const float>(0x500004);
  EXPECT_NO_THROW(kda::validate(p));
}

// Raw inputs (kda.h GateInput::raw, BetaInput::logits, fuse_k_l2norm).
kda::ForwardParams raw_forward() {
  kda::ForwardParams p = dense_forward();
  p.gate_input = kda::GateInput::raw;
  p.gate_dtype = kda::DType::bf16;
  p.a_log = fake<const float>(0xA00000);
  p.dt_bias = fake<const float>(0xB00000);
  p.lower_bound = -5.0f;
  p.beta_input = kda::BetaInput::logits;
  p.beta_dtype = kda::DType::bf16;
  p.fuse_k_l2norm = true;
  p.fuse_q_l2norm = true;
  return p;
}

TEST(ValidateForward, RawInputsAccepted) {
  kda::ForwardParams p = raw_forward();
  EXPECT_NO_THROW(kda::validate(p));
  p.gate_dtype = kda::DType::f32;
  p.beta_dtype = kda::DType::f32;
  EXPECT_NO_THROW(kda::validate(p));
  // Bounds of the lower bound are inclusive; bf16 beta needs only 2-byte alignment.
  p = raw_forward();
  p.lower_bound = -kda::kMaxLowerBound;
  EXPECT_NO_THROW(kda::validate(p));
  p.lower_bound = 0.0f;
  p.beta = fake<const float>(0x500002);
  EXPECT_NO_THROW(kda::validate(p));
  // The contract gate with bf16 logits alone is a raw input too, and fine.
  p = dense_forward();
  p.beta_input = kda::BetaInput::logits;
  p.beta_dtype = kda::DType::bf16;
  EXPECT_NO_THROW(kda::validate(p));
}

// Bounds outside [-kMaxLowerBound, 0], NaN and -inf are refused by `op` (params p, valid else).
template <class Params>
void expect_lower_bounds_refused(Params p, const std::string& op) {
  p.lower_bound = -6.0f;
  expect_invalid(p, ErrorCode::invalid_argument,
                 op + ": lower_bound = -6 must lie in [-5.91485595703, 0] (finite)");
  p.lower_bound = 0.5f;
  expect_invalid(p, ErrorCode::invalid_argument, "lower_bound = 0.5 must lie in");
  p.lower_bound = std::numeric_limits<float>::quiet_NaN();
  expect_invalid(p, ErrorCode::invalid_argument, "lower_bound = nan must lie in");
  p.lower_bound = -std::numeric_limits<float>::infinity();
  expect_invalid(p, ErrorCode::invalid_argument, "lower_bound = -inf must lie in");
}

TEST(ValidateForward, RawInputsRefused) {
  expect_lower_bounds_refused(raw_forward(), "chunk_forward");
  kda::ForwardParams p = raw_forward();
  p.a_log = nullptr;
  expect_invalid(p, ErrorCode::invalid_argument, "a_log is null");
  p = raw_forward();
  p.dt_bias = nullptr;
  expect_invalid(p, ErrorCode::invalid_argument, "dt_bias is null");
  p = raw_forward();
  p.dt_bias = fake<const float>(0xB00002);
  expect_invalid(p, ErrorCode::invalid_argument, "dt_bias = 0xb00002 is not 4-byte aligned");
  p = raw_forward();
  p.beta_dtype = kda::DType::f32;
  p.beta = fake<const float>(0x500002);
  expect_invalid(p, ErrorCode::invalid_argument, "beta = 0x500002 is not 4-byte aligned");
  p = raw_forward();
  p.gate_input = static_cast<kda::GateInput>(7);
  expect_invalid(p, ErrorCode::invalid_argument, "gate_input = 7 is not a GateInput");
  p = raw_forward();
  p.beta_input = static_cast<kda::BetaInput>(3);
  expect_invalid(p, ErrorCode::invalid_argument, "beta_input = 3 is not a BetaInput");
  p = raw_forward();
  p.beta_dtype = static_cast<kda::DType>(9);
  expect_invalid(p, ErrorCode::invalid_argument, "beta_dtype = 9 is not a DType");
  p = raw_forward();
  p.gate_dtype = static_cast<kda::DType>(9);
  expect_invalid(p, ErrorCode::invalid_argument, "gate_dtype = 9 is not a DType");
  // The contract gate is fp32 and never reads the raw gate's parameters.
  p = dense_forward();
  p.gate_dtype = kda::DType::bf16;
  expect_invalid(p, ErrorCode::invalid_argument,
                 "gate_dtype = bf16 with GateInput::chunk_log2: the cumulative log2 gate is fp32");
  p = dense_forward();
  p.a_log = fake<const float>(0xA00000);
  expect_invalid(p, ErrorCode::invalid_argument,
                 "a_log / dt_bias are set but gate_input is GateInput::chunk_log2");
  // (The lab's v0 / v1 PREP refuse the raw inputs: tests/lab/test_variants.cpp.)
  EXPECT_STREQ(kda::to_string(kda::GateInput::raw), "raw");
  EXPECT_STREQ(kda::to_string(kda::GateInput::chunk_log2), "chunk_log2");
  EXPECT_STREQ(kda::to_string(kda::BetaInput::logits), "logits");
  EXPECT_STREQ(kda::to_string(kda::BetaInput::probability), "probability");
}

TEST(ValidateForward, TokenStrides) {
  kda::ForwardParams p = dense_forward();
  p.q_token_stride = 200;
  expect_invalid(p, ErrorCode::invalid_argument,
                 "q_token_stride = 200 is smaller than heads * 128 = 256");
  p = dense_forward();
  p.k_token_stride = 260;
  expect_invalid(p, ErrorCode::invalid_argument, "k_token_stride = 260 is not a multiple of 8");
  p = dense_forward();
  p.v_token_stride = -8;
  expect_invalid(p, ErrorCode::invalid_argument, "v_token_stride = -8 must be >= 0");
  p = dense_forward();
  p.out_token_stride = 128;
  expect_invalid(p, ErrorCode::invalid_argument, "out_token_stride = 128 is smaller than");
}

TEST(ValidateForward, Overflow) {
  kda::ForwardParams p = dense_forward();
  p.batch = int64_t{1} << 32;
  p.tokens = int64_t{1} << 32;
  expect_invalid(p, ErrorCode::unsupported, "exceeds 2^62");

  p = dense_forward();
  p.batch = 1;
  p.tokens = int64_t{1} << 23;
  p.workspace_bytes = kda::forward_workspace_bytes(p);
  p.q_token_stride = int64_t{1} << 40;  // (2^23 tokens) * 2^40 elements > 2^62
  expect_invalid(p, ErrorCode::unsupported, "rows * q_token_stride = ");

  p = dense_forward();
  p.heads = 70000;
  expect_invalid(p, ErrorCode::unsupported, "heads = 70000 exceeds 65535");

  p = dense_forward();
  p.batch = int64_t{1} << 31;
  p.tokens = 1;
  expect_invalid(p, ErrorCode::unsupported, "exceeds 2^31 - 1 sequences");

  // (SCANs of 4 CTAs per sequence and head, the lab's v0 and v1, have a lower limit:
  // tests/lab/test_variants.cpp.)

  p = dense_forward();
  p.batch = 1;
  p.tokens = int64_t{1} << 40;  // 2^34 chunk slots per head
  expect_invalid(p, ErrorCode::unsupported, "chunk slots per head exceed 2^31 - 1");
}

TEST(ValidateForward, Workspace) {
  kda::ForwardParams p = dense_forward();
  const size_t needed = kda::forward_workspace_bytes(p);
  p.workspace = nullptr;
  expect_invalid(p, ErrorCode::invalid_argument,
                 "chunk_forward: workspace is null: allocate forward_workspace_bytes(params) = " +
                     std::to_string(needed) + " bytes");
  p = dense_forward();
  p.workspace_bytes = needed - 1;
  expect_invalid(p, ErrorCode::invalid_argument,
                 "workspace_bytes = " + std::to_string(needed - 1) +
                     " is too small: these sizes need " + std::to_string(needed) + " bytes");
}

TEST(ValidateForward, WorkspaceSizeIsExact) {
  kda::ForwardParams p;
  p.batch = 1;
  p.tokens = 64;
  p.heads = 1;
  EXPECT_EQ(kda::forward_workspace_bytes(p), size_t{2} * kRecordBytes);  // 1 chunk + 1 slot
  p.batch = 2;
  p.tokens = 130;
  p.heads = 2;
  EXPECT_EQ(kda::forward_workspace_bytes(p), size_t{2} * (260 / 64 + 2) * kRecordBytes);
  // Packed contract shape h96-ragged6: 6 sequences over 8192 tokens.
  std::vector<int32_t> cu = {0, 1300, 1847, 3895, 4858, 5129, 8192};
  p.batch = 1;
  p.tokens = 8192;
  p.heads = 96;
  p.cu_seqlens = fake<const int32_t>(0x700000);
  p.cu_seqlens_host = cu.data();
  p.num_seqs = 6;
  EXPECT_EQ(kda::forward_workspace_bytes(p), size_t{96} * (128 + 6) * kRecordBytes);
  // Sizing before the offsets exist: num_seqs alone counts.
  p.cu_seqlens = nullptr;
  p.cu_seqlens_host = nullptr;
  EXPECT_EQ(kda::forward_workspace_bytes(p), size_t{96} * (128 + 6) * kRecordBytes);
  EXPECT_EQ(kRecordBytes, kda::detail::kRecordBytes);
}

TEST(ValidateForward, WorkspaceSizeIsMonotone) {
  kda::ForwardParams p;
  p.batch = 1;
  p.heads = 3;
  size_t previous = 0;
  for (int64_t tokens = 1; tokens <= 1000; ++tokens) {
    p.tokens = tokens;
    const size_t bytes = kda::forward_workspace_bytes(p);
    EXPECT_GE(bytes, previous) << "tokens = " << tokens;
    previous = bytes;
  }
  previous = 0;
  for (int heads = 1; heads <= 64; ++heads) {
    p.heads = heads;
    const size_t bytes = kda::forward_workspace_bytes(p);
    EXPECT_GT(bytes, previous) << "heads = " << heads;
    previous = bytes;
  }
}

// The record slots of the sequences (record.h) are disjoint and below the capacity for any
// valid offsets, including empty sequences and offsets ending before the last token.
TEST(ValidateForward, ChunkSlotsAreDisjointAndFit) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 12);
    std::vector<int64_t> cu(n + 1, 0);
    for (int s = 1; s <= n; ++s) {
      const uint64_t kind = rng() % 4;
      const int64_t length = kind == 0   ? 0
                             : kind == 1 ? static_cast<int64_t>(rng() % 3)
                                         : static_cast<int64_t>(rng() % 300);
      cu[s] = cu[s - 1] + length;
    }
    const int64_t tokens = cu[n] + static_cast<int64_t>(rng() % 100);
    const int64_t capacity = kda::detail::chunk_capacity(tokens, n);
    int64_t next_free = 0;
    for (int s = 0; s < n; ++s) {
      const int64_t base = cu[s] / kda::kChunk + s;
      const int64_t chunks = (cu[s + 1] - cu[s] + kda::kChunk - 1) / kda::kChunk;
      ASSERT_GE(base, next_free) << "trial " << trial << " sequence " << s;
      next_free = base + chunks;
      ASSERT_LE(next_free, capacity) << "trial " << trial << " sequence " << s;
    }
  }
}

TEST(ValidateForward, Stages) {
  EXPECT_EQ(kda::forward_stage_count(), 4);
  EXPECT_STREQ(kda::forward_stage_name(0), "prep");
  EXPECT_STREQ(kda::forward_stage_name(1), "scan");
  EXPECT_STREQ(kda::forward_stage_name(2), "one_pass");
  EXPECT_STREQ(kda::forward_stage_name(3), "zero_tail");
  expect_error([] { (void)kda::forward_stage_name(4); }, ErrorCode::invalid_argument,
               "stage = 4 is out of range");
  // Rejected before any CUDA call.
  const kda::ForwardParams p = dense_forward();
  expect_error([&] { kda::chunk_forward_stage(p, -1, nullptr); }, ErrorCode::invalid_argument,
               "chunk_forward_stage: stage = -1 is out of range");
  // Invalid params are rejected by the entry points before any CUDA call, too.
  kda::ForwardParams bad = dense_forward();
  bad.key_dim = 64;
  expect_error([&] { kda::chunk_forward(bad, nullptr); }, ErrorCode::unsupported, "key_dim");
  expect_error([&] { kda::chunk_forward_stage(bad, 0, nullptr); }, ErrorCode::unsupported,
               "key_dim");
}

// ---------------------------------------------------------------------------------------------
// l2norm

kda::L2NormParams valid_l2norm() {
  kda::L2NormParams p;
  p.x = fake(0x100000);
  p.y = fake(0x200000);
  p.rows = 1000;
  return p;
}

TEST(ValidateL2Norm, AcceptsValidParams) {
  kda::L2NormParams p = valid_l2norm();
  EXPECT_NO_THROW(kda::validate(p));
  p.x_dtype = DType::f32;
  p.x_row_stride = 132;  // 16-byte rows of fp32
  p.y_row_stride = 384;
  EXPECT_NO_THROW(kda::validate(p));
  // Zero rows: a no-op, pointers are not needed (and no CUDA call is made).
  kda::L2NormParams empty;
  EXPECT_NO_THROW(kda::validate(empty));
  EXPECT_NO_THROW(kda::l2norm(empty, nullptr));
}

TEST(ValidateL2Norm, Errors) {
  kda::L2NormParams p = valid_l2norm();
  p.rows = -1;
  expect_invalid(p, ErrorCode::invalid_argument, "l2norm: rows = -1 must be >= 0");
  p = valid_l2norm();
  p.dim = 64;
  expect_invalid(p, ErrorCode::unsupported, "l2norm: dim = 64 is not supported");
  p = valid_l2norm();
  p.x_dtype = static_cast<DType>(7);
  expect_invalid(p, ErrorCode::invalid_argument, "x_dtype = 7 is not a DType");
  p = valid_l2norm();
  p.x = nullptr;
  expect_invalid(p, ErrorCode::invalid_argument, "l2norm: x is null");
  p = valid_l2norm();
  p.y = nullptr;
  expect_invalid(p, ErrorCode::invalid_argument, "l2norm: y is null");
  p = valid_l2norm();
  p.x = fake(0x100008);
  expect_invalid(p, ErrorCode::invalid_argument, "x = 0x100008 is not 16-byte aligned");
  p = valid_l2norm();
  p.y = fake(0x200002);
  expect_invalid(p, ErrorCode::invalid_argument, "y = 0x200002 is not 16-byte aligned");
  p = valid_l2norm();
  p.x_row_stride = 100;
  expect_invalid(p, ErrorCode::invalid_argument, "x_row_stride = 100 is smaller than dim = 128");
  p = valid_l2norm();
  p.x_row_stride = 132;  // fine for fp32, not for bf16 (264-byte rows)
  expect_invalid(p, ErrorCode::invalid_argument, "x_row_stride = 132 is not a multiple of 8");
  p.x_dtype = DType::f32;
  EXPECT_NO_THROW(kda::validate(p));
  p.x_row_stride = 130;
  expect_invalid(p, ErrorCode::invalid_argument, "x_row_stride = 130 is not a multiple of 4");
  p = valid_l2norm();
  p.y_row_stride = 132;
  expect_invalid(p, ErrorCode::invalid_argument, "y_row_stride = 132 is not a multiple of 8");
  p = valid_l2norm();
  p.rows = int64_t{1} << 60;
  expect_invalid(p, ErrorCode::unsupported, "exceeds 2^62");
}

// ---------------------------------------------------------------------------------------------
// gate_cumsum

kda::GateCumsumParams valid_gate() {
  kda::GateCumsumParams p;
  p.raw_gate = fake(0x100000);
  p.a_log = fake<const float>(0x200000);
  p.dt_bias = fake<const float>(0x300000);
  p.out = fake<float>(0x400000);
  p.batch = 2;
  p.tokens = 130;
  p.heads = 3;
  return p;
}

TEST(ValidateGate, AcceptsValidParams) {
  kda::GateCumsumParams p = valid_gate();
  EXPECT_NO_THROW(kda::validate(p));
  p.lower_bound = 0.0f;
  EXPECT_NO_THROW(kda::validate(p));
  p.lower_bound = -kda::kMaxLowerBound;
  EXPECT_NO_THROW(kda::validate(p));
  std::vector<int32_t> cu = {0, 65, 65, 128};
  p.batch = 1;
  p.cu_seqlens = fake<const int32_t>(0x500000);
  p.cu_seqlens_host = cu.data();
  p.num_seqs = 3;
  EXPECT_NO_THROW(kda::validate(p));
}

TEST(ValidateGate, Errors) {
  expect_lower_bounds_refused(valid_gate(), "gate_cumsum");
  kda::GateCumsumParams p = valid_gate();
  p.dim = 64;
  expect_invalid(p, ErrorCode::unsupported, "gate_cumsum: dim = 64 is not supported");
  p = valid_gate();
  p.heads = -1;
  expect_invalid(p, ErrorCode::invalid_argument, "gate_cumsum: heads = -1 must be >= 1");
  p = valid_gate();
  p.batch = 0;
  expect_invalid(p, ErrorCode::invalid_argument, "gate_cumsum: batch = 0 must be >= 1");
  p = valid_gate();
  p.raw_gate = nullptr;
  expect_invalid(p, ErrorCode::invalid_argument, "gate_cumsum: raw_gate is null");
  p = valid_gate();
  p.raw_gate_dtype = kda::DType::f32;
  EXPECT_NO_THROW(kda::validate(p));
  p.raw_gate_dtype = static_cast<kda::DType>(5);
  expect_invalid(
      p, ErrorCode::invalid_argument,
      "gate_cumsum: raw_gate_dtype = 5 is not a DType: the raw gate must be bf16 or f32");
  p = valid_gate();
  p.a_log = nullptr;
  expect_invalid(p, ErrorCode::invalid_argument, "gate_cumsum: a_log is null");
  p = valid_gate();
  p.dt_bias = nullptr;
  expect_invalid(p, ErrorCode::invalid_argument, "gate_cumsum: dt_bias is null");
  p = valid_gate();
  p.out = nullptr;
  expect_invalid(p, ErrorCode::invalid_argument, "gate_cumsum: out is null");
  p = valid_gate();
  p.out = fake<float>(0x400004);
  expect_invalid(p, ErrorCode::invalid_argument, "out = 0x400004 is not 16-byte aligned");
  p = valid_gate();
  p.dt_bias = fake<const float>(0x300002);
  expect_invalid(p, ErrorCode::invalid_argument, "dt_bias = 0x300002 is not 4-byte aligned");

  std::vector<int32_t> cu = {0, 65, 60};
  p = valid_gate();
  p.batch = 1;
  p.cu_seqlens = fake<const int32_t>(0x500000);
  p.cu_seqlens_host = cu.data();
  p.num_seqs = 2;
  expect_invalid(p, ErrorCode::invalid_argument,
                 "gate_cumsum: cu_seqlens_host decreases at index 2");
  p.batch = 3;
  expect_invalid(p, ErrorCode::invalid_argument, "gate_cumsum: cu_seqlens requires batch == 1");
}

}  // namespace
