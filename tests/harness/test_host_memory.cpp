// The host-memory estimate (host_memory.h): the bytes of known shapes, what /proc/meminfo says,
// and the refusal.
#include <gtest/gtest.h>

#include <string>

#include "kda/harness/host_memory.h"
#include "kda/harness/inputs.h"
#include "kda/harness/shapes.h"

namespace kda::harness {
namespace {

ShapeSpec shape_of(const std::string& yaml) { return parse_shape_file(yaml, "t.yaml").shapes.at(0); }

// h96-fixed: 8192 tokens x 96 heads = 786432 token-heads at K = V = 128.
const ShapeSpec kH96 = shape_of("shapes:\n  - {id: h96-fixed, heads: 96, seq_lens: [8192]}\n");
constexpr size_t kTokenHeads = 786432;

// The raw inputs of h96-fixed: raw k and raw gate bf16 (2 B x 128 each), beta logits bf16: 514 B a
// token-head, plus A_log (96 fp32) and dt_bias (96 x 128 fp32).
constexpr size_t kH96RawBytes = kTokenHeads * 514 + 96 * 4 + 96 * 128 * 4;

TEST(HostMemory, InputsAreWhatHostInputsHolds) {
  // q k v bf16 (2 B x 128 each), gate fp32 (4 B x 128), beta fp32: 1284 B a token-head, plus
  // cu_seqlens (2 int32), plus the raw inputs.
  EXPECT_EQ(ProblemSize::of(kH96).raw_input_bytes(), kH96RawBytes);
  EXPECT_EQ(ProblemSize::of(kH96).input_bytes(), kTokenHeads * 1284 + 8 + kH96RawBytes);
  const ShapeSpec small = shape_of(
      "shapes:\n  - {id: s, heads: 3, seq_lens: [70, 0, 50], key_dim: 4, value_dim: 2, "
      "initial_state: true}\n");
  HostInputs in = make_inputs(small, 1);
  const size_t contract = in.q.size() * 2 + in.k.size() * 2 + in.v.size() * 2 +
                          in.gate.size() * 4 + in.beta.size() * 4 + in.cu_seqlens.size() * 4 +
                          in.initial_state.size() * 4;
  const size_t raw = in.raw_k.size() * 2 + in.raw_gate.size() * 2 + in.beta_logits.size() * 2 +
                     in.a_log.size() * 4 + in.dt_bias.size() * 4;
  EXPECT_GT(raw, 0u);
  EXPECT_EQ(ProblemSize::of(small).input_bytes(), contract + raw);
  EXPECT_EQ(ProblemSize::of(in).input_bytes(), contract + raw);
  // Inputs without raw tensors (a dump written before them) hold and upload none.
  in.raw_k.clear();
  in.raw_gate.clear();
  in.beta_logits.clear();
  in.a_log.clear();
  in.dt_bias.clear();
  EXPECT_FALSE(ProblemSize::of(in).raw_inputs);
  EXPECT_EQ(ProblemSize::of(in).input_bytes(), contract);
}

TEST(HostMemory, PeakPerTokenHeadOfEachKindOfRun) {
  // gpu_check: golden (4 fp64 tensors: 4096 B) + judging (fp32 outputs of three paths, a repeat,
  // its bf16 download, two fp64 widenings: 4352 B), beyond the inputs.
  const HostFootprint gpu = host_footprint(ProblemSize::of(kH96), HostWork::gpu_check);
  EXPECT_EQ(gpu.inputs, kTokenHeads * 1284 + 8 + kH96RawBytes);
  EXPECT_EQ(gpu.working, kTokenHeads * (4096 + 4352));
  EXPECT_EQ(gpu.total(), gpu.inputs + gpu.working);
  EXPECT_NEAR(static_cast<double>(gpu.total()) / 1e9, 8.06, 0.01);
  // With the raw path: its golden kept (2 fp64 tensors: 2048 B), and judging then peaks (one
  // more fp32 output: 4864 B), above the raw golden's computation (fp32 copy 2052 B, state-carry
  // fp64 output 1024 B, fp32 result 512 B).
  EXPECT_EQ(host_footprint(ProblemSize::of(kH96), HostWork::gpu_check, true).working,
            kTokenHeads * (4096 + 2048 + 4864));
  // reference: the fp32 copy (2052 B), four results (3072 B), the state-carry run's fp64 output
  // (1024 B) and two fp64 widenings (2048 B).
  EXPECT_EQ(host_footprint(ProblemSize::of(kH96), HostWork::reference).working,
            kTokenHeads * (2052 + 3072 + 1024 + 2048));
  // inputs_only: the raw gate while the cumulative one is formed.
  EXPECT_EQ(host_footprint(ProblemSize::of(kH96), HostWork::inputs_only).working, kTokenHeads * 512);
  // Loaded inputs are not counted again.
  HostFootprint loaded = gpu;
  loaded.inputs_loaded = true;
  EXPECT_EQ(loaded.total(), gpu.working);
}

TEST(HostMemory, StatesCount) {
  const ShapeSpec stateful = shape_of(
      "shapes:\n  - {id: s, heads: 2, seq_lens: [64, 64], initial_state: true, final_state: true}\n");
  const ShapeSpec plain = shape_of("shapes:\n  - {id: s, heads: 2, seq_lens: [64, 64]}\n");
  const size_t state = 2 * 2 * 128 * 128;  // N x H x K x V elements
  const HostFootprint a = host_footprint(ProblemSize::of(stateful), HostWork::gpu_check);
  const HostFootprint b = host_footprint(ProblemSize::of(plain), HostWork::gpu_check);
  EXPECT_EQ(a.inputs - b.inputs, state * 4);  // h0 fp32
  // Final states: golden and low fp64 (16 B), the paths' fp32 copies and widenings (20 B).
  EXPECT_EQ(a.working - b.working, state * (16 + 20));
}

TEST(HostMemory, ShapesAtTheParserBoundDoNotWrap) {
  const ShapeSpec huge = shape_of("shapes:\n  - {id: h, heads: 4096, seq_lens: [2097152]}\n");
  const HostFootprint f = host_footprint(ProblemSize::of(huge), HostWork::reference);
  EXPECT_GT(f.total(), size_t{1} << 46);  // ~80 TB, not a wrapped small number
}

TEST(HostMemory, MeminfoParsing) {
  const std::string meminfo =
      "MemTotal:       24000000 kB\nMemFree:         1000000 kB\nMemAvailable:   20000000 kB\n"
      "Buffers:          100000 kB\nCached:          3000000 kB\n";
  const auto available = parse_meminfo(meminfo);
  ASSERT_TRUE(available.has_value());
  EXPECT_EQ(available->bytes, uint64_t{20000000} * 1024);
  EXPECT_EQ(available->source, "MemAvailable");
  // Kernels before 3.14 have no MemAvailable: free + buffers + page cache.
  const auto old = parse_meminfo("MemTotal: 8 kB\nMemFree: 1 kB\nBuffers: 2 kB\nCached: 4 kB\n");
  ASSERT_TRUE(old.has_value());
  EXPECT_EQ(old->bytes, uint64_t{7} * 1024);
  EXPECT_EQ(old->source, "MemFree + Buffers + Cached");
  EXPECT_FALSE(parse_meminfo("").has_value());
  EXPECT_FALSE(parse_meminfo("MemAvailableX: 5 kB\n").has_value());
  // This machine has a /proc/meminfo (Linux CI).
  EXPECT_TRUE(available_host_memory().has_value());
}

TEST(HostMemory, RefusalSaysWhatIsNeededWhatIsThereAndWhatToDo) {
  const HostFootprint need = host_footprint(ProblemSize::of(kH96), HostWork::gpu_check);
  EXPECT_EQ(host_memory_shortfall("h96-fixed", need, {need.total(), "MemAvailable"}), "");
  EXPECT_EQ(host_memory_shortfall("h96-fixed", need, {uint64_t{4} << 30, "MemAvailable"}),
            "shape 'h96-fixed' needs about 7.50 GiB of host memory (8057831816 bytes: inputs "
            "1414054280, references and judging 6643777536), 4.00 GiB available (MemAvailable); "
            "use a smaller shape, check fewer shapes at a time (--only), or free memory");
  HostFootprint loaded = need;
  loaded.inputs_loaded = true;
  EXPECT_NE(host_memory_shortfall("x", loaded, {1, "cgroup memory.max"})
                .find("inputs 1414054280 loaded already, references and judging"),
            std::string::npos);
  EXPECT_THROW(require_host_memory("huge", HostFootprint{size_t{1} << 62, 0, false}),
               HostMemoryError);
  EXPECT_NO_THROW(require_host_memory("tiny", HostFootprint{1024, 0, false}));
  EXPECT_EQ(out_of_host_memory("while checking shape 'x'"),
            "out of host memory (std::bad_alloc) while checking shape 'x'; use a smaller shape, "
            "check fewer shapes at a time (--only), or free memory");
}

}  // namespace
}  // namespace kda::harness
