// The device-memory footprint the apps check before allocating (apps/common/device_memory.h):
// exact bytes for known shapes, and the refusal message for a fake amount of free memory.
// Pure host code: runs without a GPU.
#include <gtest/gtest.h>

#include <string>

#include "common/device_memory.h"
#include "kda/harness/inputs.h"
#include "kda/harness/shapes.h"
#include "kda/kda.h"

namespace kda::app {
namespace {

kda::harness::ShapeSpec only_shape(const std::string& entry) {
  return kda::harness::parse_shape_file("shapes:\n  - " + entry, "t.yaml").shapes.at(0);
}

const std::string kH64Fixed = "id: h64-fixed\n    heads: 64\n    seq_lens: [8192]\n";

// One forward record per (head, chunk slot); v0_fp32's are the largest (tests/kda/test_validate).
constexpr size_t kRecordV0 = 147968;

TEST(DeviceFootprint, ContractShapeH64Fixed) {
  const auto shape = only_shape(kH64Fixed);
  const DeviceFootprint f = device_footprint(kda::harness::ProblemSize::of(shape));
  const size_t th = 8192 * 64;
  // q, k, v bf16 (3 x 256 B), gate fp32 (512 B), beta fp32 (4 B) per token-head; 2 offsets; the
  // raw inputs: raw k and raw gate bf16 (2 x 256 B), beta logits bf16 (2 B) per token-head,
  // A_log and dt_bias fp32.
  EXPECT_EQ(f.inputs, th * 1284 + 2 * 4 + th * 514 + 64 * 4 + 64 * 128 * 4);
  // out and q_hat bf16.
  EXPECT_EQ(f.outputs, th * 512);
  // 64 heads x (128 chunks + 1 slot per sequence) records.
  EXPECT_EQ(f.workspace, size_t{64} * 129 * kRecordV0);
  EXPECT_EQ(f.total(), size_t{2432762120});
}

TEST(DeviceFootprint, StatesDenseAndUnsupportedDims) {
  // 3 sequences x 3 heads x 128 x 128 fp32 = 589824 B each way.
  const auto state = only_shape(
      "id: s\n    heads: 3\n    seq_lens: [70, 0, 50]\n    initial_state: true\n"
      "    final_state: true\n");
  const DeviceFootprint f = device_footprint(kda::harness::ProblemSize::of(state));
  const size_t raw = size_t{120} * 3 * 514 + 3 * 4 + 3 * 128 * 4;
  EXPECT_EQ(f.inputs, size_t{120} * 3 * 1284 + 4 * 4 + 589824 + raw);
  EXPECT_EQ(f.outputs, size_t{120} * 3 * 512 + 589824);
  // The largest variant's: here the L2 helpers' ring (the sequences' order 256 B, counters and
  // mailboxes of 9 chains 1,280, their raw carry rows 9 x 16 KB, record slots for 9 helper CTAs
  // 9 x 4 x 2 x 23,040), above v0's records (full chunks + 1 per sequence: 1,775,616).
  EXPECT_GT(f.workspace, size_t{3} * (120 / 64 + 3) * kRecordV0);
  EXPECT_EQ(f.workspace, size_t{256} + 1280 + 9 * 16384 + 9 * 4 * 2 * 23040);

  // Dense: B rows, no offsets.
  const auto dense = only_shape("id: d\n    heads: 2\n    batch: 2\n    seq_len: 96\n");
  EXPECT_EQ(device_footprint(kda::harness::ProblemSize::of(dense)).inputs,
            size_t{2} * 96 * 2 * (1284 + 514) + 2 * 4 + 2 * 128 * 4);

  // The same problem generated on the host gives the same footprint (kda-check --load path).
  const kda::harness::HostInputs inputs = kda::harness::make_inputs(state, 1);
  const DeviceFootprint g = device_footprint(kda::harness::ProblemSize::of(inputs));
  EXPECT_EQ(g.inputs, f.inputs);
  EXPECT_EQ(g.outputs, f.outputs);
  EXPECT_EQ(g.workspace, f.workspace);
  // Inputs without raw tensors (a dump written before them) upload none.
  kda::harness::HostInputs old = inputs;
  old.raw_k.clear();
  old.raw_gate.clear();
  old.beta_logits.clear();
  old.a_log.clear();
  old.dt_bias.clear();
  EXPECT_EQ(device_footprint(kda::harness::ProblemSize::of(old)).inputs, f.inputs - raw);

  // K != 128: never run on the GPU, so no workspace is asked of the library.
  const auto k64 = only_shape("id: k\n    heads: 1\n    seq_lens: [8]\n    key_dim: 64\n");
  EXPECT_EQ(device_footprint(kda::harness::ProblemSize::of(k64)).workspace, 0u);
}

TEST(DeviceFootprint, RefusalNamesShapeBytesAndDevice) {
  const auto shape = only_shape(kH64Fixed);
  const DeviceFootprint f = device_footprint(kda::harness::ProblemSize::of(shape));
  EXPECT_EQ(device_memory_shortfall("h64-fixed", f, f.total(), 0, "NVIDIA H200"), "");
  EXPECT_EQ(device_memory_shortfall("h64-fixed", f, size_t{1} << 30, 1, "NVIDIA H200"),
            "shape 'h64-fixed' needs 2.27 GiB of device memory (2432762120 bytes: inputs "
            "942702856, outputs 268435456, workspace 1221623808), 1.00 GiB free on device 1 "
            "(NVIDIA H200); use a smaller shape (--only) or free the device");
}

}  // namespace
}  // namespace kda::app
