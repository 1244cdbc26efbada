// The --dump writer and --load reader (dump.h): round trips of generated problems, and every
// refusal of issue 18 (gate contract, file set, meta.json against the arrays, ids, stale files).
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "kda/harness/dump.h"
#include "kda/harness/inputs.h"
#include "kda/harness/npy.h"
#include "kda/harness/shapes.h"
#include "kda/ref/reference.h"
#include "scratch.h"

namespace kda::harness {
namespace {

namespace fs = std::filesystem;
using test::put;
using test::scratch_dir;
using test::slurp;

ShapeSpec shape_of(const std::string& yaml) { return parse_shape_file(yaml, "t.yaml").shapes.at(0); }

// A small packed problem with an initial state: 3 sequences (one empty), 70 tokens in the first
// (so a chunk starts inside it), K = 4, V = 3.
const char* kPacked =
    "shapes:\n  - {id: p, heads: 2, seq_lens: [70, 0, 5], total_tokens: 80, key_dim: 4, "
    "value_dim: 3, initial_state: true, final_state: true}\n";

// The files a dump of `inputs` holds, in memory: meta.json and the input .npy files.
std::map<std::string, std::string, std::less<>> dumped_files(const HostInputs& inputs,
                                                             const std::string& name) {
  const fs::path dir = scratch_dir(name);
  dump_inputs(dir.string(), "p", 7, inputs);
  std::map<std::string, std::string, std::less<>> files;
  for (const auto& entry : fs::directory_iterator(dir / "p")) {
    files[entry.path().filename().string()] = slurp(entry.path());
  }
  return files;
}

std::string npy_bytes(const std::vector<float>& values, const std::vector<int64_t>& shape) {
  const fs::path file = scratch_dir("npy_bytes") / "a.npy";
  write_npy(file.string(), values, shape);
  return slurp(file);
}

std::string npy_bytes(const std::vector<int32_t>& values, const std::vector<int64_t>& shape) {
  const fs::path file = scratch_dir("npy_bytes") / "a.npy";
  write_npy(file.string(), values, shape);
  return slurp(file);
}

// parse_problem's refusal of `files` ("" when it is accepted).
std::string refusal(std::map<std::string, std::string, std::less<>> files) {
  MemoryFiles source("d", std::move(files));
  try {
    parse_problem(source);
  } catch (const std::runtime_error& e) {  // DumpError, NpyError
    return e.what();
  }
  return "";
}

std::string edited_meta(const std::string& meta, const std::string& key, const nlohmann::json& value) {
  nlohmann::json doc = nlohmann::json::parse(meta);
  if (value.is_discarded()) {
    doc.erase(key);
  } else {
    doc[key] = value;
  }
  return doc.dump();
}

// ---------------------------------------------------------------------------------------------
// Round trips

TEST(Dump, EveryGeneratedShapeRoundTripsAndMeetsTheGateContract) {
  // The real shape files (contract shapes are too large to generate here; smoke and edge cover
  // packed, dense, empty sequences, states, the row-scale suite and K, V != 128).
  for (const char* file : {"smoke.yaml", "edge.yaml"}) {
    const std::string path = std::string(KDA_SOURCE_DIR) + "/shapes/" + file;
    for (const ShapeSpec& shape : load_shape_file(path).shapes) {
      const HostInputs in = make_inputs(shape, kDefaultSeed);
      EXPECT_NO_THROW(check_gate_contract(in, "gate.npy")) << shape.id;
      const fs::path dir = scratch_dir("roundtrip");
      dump_inputs(dir.string(), shape.id, 11, in);
      const std::vector<DumpedProblem> loaded = load_problems(dir.string());
      ASSERT_EQ(loaded.size(), 1u);
      const HostInputs& out = loaded[0].inputs;
      EXPECT_EQ(loaded[0].id, shape.id);
      EXPECT_EQ(loaded[0].seed, 11u);
      EXPECT_EQ(out.q, in.q);
      EXPECT_EQ(out.k, in.k);
      EXPECT_EQ(out.v, in.v);
      EXPECT_EQ(out.gate, in.gate);
      EXPECT_EQ(out.beta, in.beta);
      EXPECT_EQ(out.cu_seqlens, in.cu_seqlens);
      EXPECT_EQ(out.initial_state, in.initial_state);
      EXPECT_EQ(out.want_final_state, in.want_final_state);
      // The raw inputs too, bit for bit (bf16 widened to float32 and back; the fp32 bound).
      ASSERT_TRUE(out.has_raw_inputs()) << shape.id;
      EXPECT_EQ(out.raw_k, in.raw_k);
      EXPECT_EQ(out.raw_gate, in.raw_gate);
      EXPECT_EQ(out.beta_logits, in.beta_logits);
      EXPECT_EQ(out.a_log, in.a_log);
      EXPECT_EQ(out.dt_bias, in.dt_bias);
      EXPECT_EQ(out.lower_bound, in.lower_bound);
    }
  }
}

TEST(Dump, RawInputsOfOtherRecipesRoundTrip) {
  // A bound that is no fp32 number (-5.9) and A_log / dt_bias far from the contract's.
  for (const char* gate : {"{preset: long, lower_bound: -5.9}", "mixed",
                           "{preset: contract, lower_bound: -5.914855940778}"}) {
    const HostInputs in = make_inputs(
        shape_of(std::string("shapes:\n  - {id: p, heads: 2, seq_lens: [70, 5], key_dim: 4, "
                             "value_dim: 3, gate: ") + gate + "}\n"),
        1);
    const auto files = dumped_files(in, "raw_recipes");
    EXPECT_EQ(nlohmann::json::parse(files.at("meta.json"))["lower_bound"].get<double>(),
              static_cast<double>(in.lower_bound));
    MemoryFiles source("d", files);
    const HostInputs out = parse_problem(source).inputs;
    EXPECT_EQ(out.raw_gate, in.raw_gate) << gate;
    EXPECT_EQ(out.a_log, in.a_log) << gate;
    EXPECT_EQ(out.dt_bias, in.dt_bias) << gate;
    EXPECT_EQ(out.lower_bound, in.lower_bound) << gate;
    EXPECT_GE(static_cast<double>(out.lower_bound), kda::ref::kMinGateLowerBound) << gate;
  }
}

TEST(Dump, ADumpWithoutRawInputsLoadsWithoutThem) {
  // What a dump written before issue 16 holds: no raw files, no lower_bound.
  auto files = dumped_files(make_inputs(shape_of(kPacked), 1), "no_raw");
  for (const char* raw : {"k_raw.npy", "gate_raw.npy", "beta_logits.npy", "a_log.npy",
                          "dt_bias.npy"}) {
    files.erase(raw);
  }
  nlohmann::json meta = nlohmann::json::parse(files.at("meta.json"));
  meta.erase("lower_bound");
  meta["inputs"] = {"q.npy", "k.npy", "v.npy", "gate.npy", "beta.npy", "cu_seqlens.npy", "h0.npy"};
  files["meta.json"] = meta.dump();
  MemoryFiles source("d", files);
  const HostInputs loaded = parse_problem(source).inputs;
  EXPECT_FALSE(loaded.has_raw_inputs());
  EXPECT_TRUE(loaded.raw_k.empty() && loaded.raw_gate.empty() && loaded.beta_logits.empty());
}

TEST(Dump, MetaRecordsTheInputFiles) {
  const HostInputs in = make_inputs(shape_of(kPacked), 1);
  const auto files = dumped_files(in, "meta_files");
  const nlohmann::json meta = nlohmann::json::parse(files.at("meta.json"));
  EXPECT_EQ(meta["inputs"], nlohmann::json({"q.npy", "k.npy", "v.npy", "gate.npy", "beta.npy",
                                            "cu_seqlens.npy", "h0.npy", "k_raw.npy",
                                            "gate_raw.npy", "beta_logits.npy", "a_log.npy",
                                            "dt_bias.npy"}));
  EXPECT_EQ(meta["lower_bound"], -5.0);
  EXPECT_EQ(meta["sequences"], 3);
  EXPECT_EQ(refusal(files), "");
}

// ---------------------------------------------------------------------------------------------
// Item 5: the gate contract

TEST(Dump, GateContract) {
  // A gate of zeros (no decay: inside the contract), so that each change below sets one decay.
  HostInputs base = make_inputs(shape_of(kPacked), 1);
  std::fill(base.gate.begin(), base.gate.end(), 0.0f);
  auto violation = [&](int64_t t, int64_t h, int64_t c, float value) {
    HostInputs in = base;
    in.gate[static_cast<size_t>((t * in.heads + h) * in.key_dim + c)] = value;
    try {
      check_gate_contract(in, "gate.npy");
    } catch (const DumpError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // A decay of -20 per token (the case) inside a chunk.
  EXPECT_EQ(violation(1, 1, 2, -20.0f),
            "gate.npy: element [0,1,1,2] (token 1 of its sequence): per-token log2 decay -20 (G[t] "
            "= -20 after G[t-1] = 0) is outside [-128/15, 0] = [-8.5333, 0], the bounded-gate "
            "contract (kda-forward.md §3: cumulative log2 gate, chunks of 64 tokens from each "
            "sequence start)");
  // A positive decay, and a positive G at a chunk start (token 64 of the first sequence).
  EXPECT_CONTAINS(violation(5, 0, 0, 0.25f), "per-token log2 decay 0.25 (G[t] = 0.25 after G[t-1] = 0)");
  EXPECT_CONTAINS(violation(64, 0, 3, 0.125f),
                  "element [0,64,0,3] (token 64 of its sequence): per-token log2 decay 0.125 (G = "
                  "0.125 at the first token of a chunk)");
  // The first token of the third sequence (token 70) is a chunk start too: its G is its decay.
  EXPECT_CONTAINS(violation(70, 0, 0, -9.0f), "element [0,70,0,0] (token 0 of its sequence)");
  EXPECT_CONTAINS(violation(3, 0, 0, std::nanf("")), "per-token log2 decay nan");
  // The bound itself is inside (at the last token of a sequence, so the next decay is not the
  // reverse step); the inactive suffix (tokens 75..79) is not read.
  EXPECT_EQ(violation(74, 1, 1, static_cast<float>(-128.0 / 15.0)), "");
  EXPECT_EQ(violation(77, 0, 0, 5.0f), "");
  // The fp32 rounding of a cumulative sum that spends the whole budget on every token passes.
  HostInputs steep = base;
  for (int64_t t = 0; t < 70; ++t) {
    for (int64_t i = 0; i < steep.heads * steep.key_dim; ++i) {
      const size_t e = static_cast<size_t>(t * steep.heads * steep.key_dim + i);
      const size_t prev = e - static_cast<size_t>(steep.heads * steep.key_dim);
      steep.gate[e] = (t % 64 == 0 ? 0.0f : steep.gate[prev]) + static_cast<float>(-128.0 / 15.0);
    }
  }
  EXPECT_NO_THROW(check_gate_contract(steep, "gate.npy"));
}

TEST(Dump, GateChunksCountFromEachSequenceStartWhenDense) {
  HostInputs in = make_inputs(
      shape_of("shapes:\n  - {id: d, heads: 1, batch: 2, seq_len: 66, key_dim: 2, value_dim: 2}\n"),
      3);
  // Batch row 1, token 64: a chunk start of that row's sequence.
  in.gate[static_cast<size_t>(((1 * 66 + 64) * 1 + 0) * 2 + 1)] = 0.5f;
  try {
    check_gate_contract(in, "gate.npy");
    FAIL() << "expected DumpError";
  } catch (const DumpError& e) {
    EXPECT_CONTAINS(e.what(), "element [1,64,0,1] (token 64 of its sequence): per-token log2 "
                              "decay 0.5 (G = 0.5 at the first token of a chunk)");
  }
}

// ---------------------------------------------------------------------------------------------
// Item 5: the file set and meta.json against the arrays

TEST(Dump, FilesMustBeTheOnesMetaLists) {
  const auto files = dumped_files(make_inputs(shape_of(kPacked), 1), "file_set");
  auto without = [&](const std::string& name) {
    auto f = files;
    f.erase(name);
    return f;
  };
  EXPECT_EQ(refusal(without("cu_seqlens.npy")),
            "d/cu_seqlens.npy: missing, but d/meta.json lists it in 'inputs'");
  EXPECT_EQ(refusal(without("h0.npy")), "d/h0.npy: missing, but d/meta.json lists it in 'inputs'");
  EXPECT_EQ(refusal(without("beta.npy")), "d/beta.npy: missing (every problem needs q k v gate beta)");
  EXPECT_EQ(refusal(without("meta.json")),
            "d/meta.json: missing (every dumped problem has one; dump it again with kda-check "
            "--dump)");
  // An input meta.json does not list: a stale file of another problem.
  const ShapeSpec dense_shape = shape_of(
      "shapes:\n  - {id: p, heads: 2, batch: 1, seq_len: 80, key_dim: 4, value_dim: 3}\n");
  const auto dense = dumped_files(make_inputs(dense_shape, 1), "file_set_dense");
  auto extra = dense;
  extra["h0.npy"] = npy_bytes(std::vector<float>(24, 0.0f), {1, 2, 4, 3});
  EXPECT_EQ(refusal(extra), "d/h0.npy: not one of the inputs d/meta.json lists (a stale file of "
                            "another problem?); remove it, or dump the problem again");
  extra = dense;
  extra["cu_seqlens.npy"] = npy_bytes(std::vector<int32_t>{0, 80}, {2});
  EXPECT_CONTAINS(refusal(extra), "d/cu_seqlens.npy: not one of the inputs d/meta.json lists");
}

TEST(Dump, CuSeqlensMayNotBeEmptyOrMalformed) {
  const auto files = dumped_files(make_inputs(shape_of(kPacked), 1), "cu");
  auto with_cu = [&](const std::vector<int32_t>& cu) {
    auto f = files;
    f["cu_seqlens.npy"] = npy_bytes(cu, {static_cast<int64_t>(cu.size())});
    return refusal(f);
  };
  EXPECT_EQ(with_cu({}),
            "d/cu_seqlens.npy: shape [0], expected [4] (sequences + 1, sequences 3 in d/meta.json)");
  EXPECT_CONTAINS(with_cu({0, 70}), "d/cu_seqlens.npy: shape [2], expected [4]");
  EXPECT_CONTAINS(with_cu({1, 70, 70, 75}), "inconsistent problem: Problem::cu_seqlens: must start at 0");
  EXPECT_CONTAINS(with_cu({0, 70, 60, 75}), "must be non-decreasing");
  EXPECT_CONTAINS(with_cu({0, 70, 70, 81}), "last entry must be <= tokens = 80, got 81");
  EXPECT_EQ(with_cu({0, 70, 70, 75}), "");
}

TEST(Dump, MetaMustAgreeWithTheArraysAndNameTheRightFile) {
  const auto files = dumped_files(make_inputs(shape_of(kPacked), 1), "meta_vs_arrays");
  auto with_meta = [&](const std::string& key, const nlohmann::json& value) {
    auto f = files;
    f["meta.json"] = edited_meta(files.at("meta.json"), key, value);
    return refusal(f);
  };
  EXPECT_EQ(with_meta("heads", 3),
            "d/q.npy: shape [1,80,2,4], expected [1,80,3,4] (batch 1, tokens 80, heads 3, key_dim 4 "
            "in d/meta.json)");
  EXPECT_CONTAINS(with_meta("value_dim", 4), "d/v.npy: shape [1,80,2,3], expected [1,80,2,4]");
  EXPECT_CONTAINS(with_meta("sequences", 2), "d/cu_seqlens.npy: shape [4], expected [3]");
  EXPECT_CONTAINS(with_meta("batch", 2), "d/q.npy: shape [1,80,2,4], expected [2,80,2,4]");
  EXPECT_EQ(with_meta("want_final_state", "yes"),
            "d/meta.json: 'want_final_state' must be true or false, got \"yes\"");
  EXPECT_EQ(with_meta("seed", -1), "d/meta.json: 'seed' must be an unsigned 64-bit integer, got -1");
  EXPECT_EQ(with_meta("heads", 2.0),
            "d/meta.json: 'heads' must be an integer in [1, 2147483647], got 2.0");
  EXPECT_EQ(with_meta("tokens", 0), "d/meta.json: 'tokens' must be an integer in [1, 2147483647], got 0");
  EXPECT_EQ(with_meta("inputs", nlohmann::json::value_t::discarded),
            "d/meta.json: no 'inputs' (written by an older kda-check, or edited?); dump the problem "
            "again with kda-check --dump");
  EXPECT_EQ(with_meta("inputs", {"q.npy", "k.npy", "v.npy", "gate.npy"}),
            "d/meta.json: 'inputs' does not list beta.npy; every problem has q k v gate beta");
  EXPECT_EQ(with_meta("inputs", {"q.npy", "q.npy"}), "d/meta.json: 'inputs' lists \"q.npy\" twice");
  EXPECT_EQ(with_meta("inputs", {"q.npy", "../x.npy"}),
            "d/meta.json: 'inputs' lists \"../x.npy\"; an input is one of q.npy, k.npy, v.npy, "
            "gate.npy, beta.npy, cu_seqlens.npy, h0.npy, k_raw.npy, gate_raw.npy, "
            "beta_logits.npy, a_log.npy, dt_bias.npy");
  EXPECT_EQ(with_meta("gate", "natural log"),
            "d/meta.json: 'gate' is \"natural log\"; this reader takes 'cumulative log2, "
            "chunk-local (64)' only");
  // q's own shape wrong: q.npy is named (it was k.npy, whose shape was compared with q's).
  auto f = files;
  f["q.npy"] = npy_bytes(std::vector<float>(80 * 1 * 4, 0.0f), {1, 80, 1, 4});
  EXPECT_EQ(refusal(f), "d/q.npy: shape [1,80,1,4], expected [1,80,2,4] (batch 1, tokens 80, "
                        "heads 2, key_dim 4 in d/meta.json)");
  f = files;
  f["meta.json"] = "{\"id\": ";
  EXPECT_CONTAINS(refusal(f), "d/meta.json: not valid JSON: ");
  f["meta.json"] = "[1, 2]";
  EXPECT_EQ(refusal(f), "d/meta.json: expected a JSON object, got [1,2]");
}

// ---------------------------------------------------------------------------------------------
// Issue 16: the raw inputs

TEST(Dump, RawFilesAreRefusedWhenMalformed) {
  const HostInputs in = make_inputs(shape_of(kPacked), 1);
  const auto files = dumped_files(in, "raw_refusals");
  auto with = [&](const std::string& name, const std::string& bytes) {
    auto f = files;
    f[name] = bytes;
    return refusal(f);
  };
  auto widened = [](const std::vector<uint16_t>& bits) {
    std::vector<float> out(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_float(bits[i]);
    return out;
  };
  // Shapes against meta.json, dtypes, bf16 values.
  EXPECT_EQ(with("k_raw.npy", npy_bytes(std::vector<float>(80 * 4, 0.0f), {1, 80, 1, 4})),
            "d/k_raw.npy: shape [1,80,1,4], expected [1,80,2,4] (batch 1, tokens 80, heads 2, "
            "key_dim 4 in d/meta.json)");
  EXPECT_EQ(with("beta_logits.npy", npy_bytes(std::vector<int32_t>(160, 0), {1, 80, 2})),
            "d/beta_logits.npy: wrong dtype int32 (expected float32)");
  std::vector<float> raw_gate = widened(in.raw_gate);
  raw_gate[3] = 1.0f + 0x1p-20f;
  EXPECT_EQ(with("gate_raw.npy", npy_bytes(raw_gate, {1, 80, 2, 4})),
            "d/gate_raw.npy: element 3 (1.00000095) is not a bf16 value; k_raw, gate_raw and "
            "beta_logits must hold bf16 numbers widened to float32");
  EXPECT_EQ(with("a_log.npy", npy_bytes(std::vector<float>(3, 0.5f), {3})),
            "d/a_log.npy: shape [3], expected [2] (heads 2 in d/meta.json)");
  EXPECT_EQ(with("dt_bias.npy", npy_bytes(std::vector<float>(8, 0.5f), {8})),
            "d/dt_bias.npy: shape [8], expected [2,4] (heads 2, key_dim 4 in d/meta.json)");
  // Non-finite gate parameters, and an A_log whose exp overflows fp32.
  EXPECT_EQ(with("a_log.npy", npy_bytes(std::vector<float>{0.5f, std::nanf("")}, {2})),
            "d/a_log.npy: element 1 is nan; expected finite values <= 88 (exp(A_log) must be "
            "finite in fp32)");
  EXPECT_EQ(with("a_log.npy", npy_bytes(std::vector<float>{100.0f, 0.5f}, {2})),
            "d/a_log.npy: element 0 is 100; expected finite values <= 88 (exp(A_log) must be "
            "finite in fp32)");
  std::vector<float> dt_bias = in.dt_bias;
  dt_bias[5] = INFINITY;
  EXPECT_EQ(with("dt_bias.npy", npy_bytes(dt_bias, {2, 4})),
            "d/dt_bias.npy: element 5 is inf; expected finite values");
}

TEST(Dump, TheRawGateMustReproduceTheGate) {
  const HostInputs in = make_inputs(shape_of(kPacked), 1);
  const auto files = dumped_files(in, "raw_gate");
  auto widened = [](const std::vector<uint16_t>& bits) {
    std::vector<float> out(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_float(bits[i]);
    return out;
  };
  // One raw gate value one bf16 step off, at token 3, head 1, channel 2.
  std::vector<uint16_t> bits = in.raw_gate;
  bits[(3 * 2 + 1) * 4 + 2] += 1;
  auto f = files;
  f["gate_raw.npy"] = npy_bytes(widened(bits), {1, 80, 2, 4});
  EXPECT_CONTAINS(refusal(f), "d/gate_raw.npy: element [0,3,1,2]: the raw gate (with A_log, "
                              "dt_bias and lower_bound -5) gives the cumulative log2 gate ");
  EXPECT_CONTAINS(refusal(f), ", but d/gate.npy holds ");
  EXPECT_CONTAINS(refusal(f), "the raw inputs are not the ones the gate was made from; dump the "
                              "problem again (or edit both files)");
  // Another A_log moves every gate of its head; another bound every gate.
  f = files;
  f["a_log.npy"] = npy_bytes(std::vector<float>{in.a_log[0], in.a_log[1] + 0.25f}, {2});
  EXPECT_CONTAINS(refusal(f), "d/gate_raw.npy: element [0,0,1,0]: ");
  f = files;
  f["meta.json"] = edited_meta(files.at("meta.json"), "lower_bound", -4.0);
  EXPECT_CONTAINS(refusal(f), "d/gate_raw.npy: element [0,0,0,0]: the raw gate (with A_log, "
                              "dt_bias and lower_bound -4)");
  // Raw values of the inactive suffix (tokens 75..79) are not read: changing them is fine.
  bits = in.raw_gate;
  bits[(77 * 2) * 4] += 1;
  f = files;
  f["gate_raw.npy"] = npy_bytes(widened(bits), {1, 80, 2, 4});
  EXPECT_EQ(refusal(f), "");
}

TEST(Dump, RawInputsComeTogetherWithTheirBound) {
  const auto files = dumped_files(make_inputs(shape_of(kPacked), 1), "raw_set");
  auto with_meta = [&](const std::string& key, const nlohmann::json& value) {
    auto f = files;
    f["meta.json"] = edited_meta(files.at("meta.json"), key, value);
    return refusal(f);
  };
  const nlohmann::json contract_inputs = {"q.npy", "k.npy", "v.npy", "gate.npy", "beta.npy",
                                          "cu_seqlens.npy", "h0.npy"};
  nlohmann::json some = contract_inputs;
  some.push_back("k_raw.npy");
  some.push_back("a_log.npy");
  EXPECT_EQ(with_meta("inputs", some),
            "d/meta.json: 'inputs' lists k_raw.npy but not gate_raw.npy; the raw inputs come "
            "together (k_raw.npy, gate_raw.npy, beta_logits.npy, a_log.npy, dt_bias.npy): dump "
            "the problem again");
  EXPECT_EQ(with_meta("lower_bound", nlohmann::json::value_t::discarded),
            "d/meta.json: no 'lower_bound' (the raw gate's bound, written with the raw inputs "
            "k_raw.npy, gate_raw.npy, beta_logits.npy, a_log.npy, dt_bias.npy); dump the "
            "problem again with kda-check --dump");
  for (const nlohmann::json& bad : {nlohmann::json(-6.0), nlohmann::json(0.5),
                                    nlohmann::json("-5")}) {
    EXPECT_EQ(with_meta("lower_bound", bad),
              "d/meta.json: 'lower_bound' must be a number in [-5.9148559407783, 0] (the "
              "bounded-gate contract, kda-forward.md §3.1), got " +
                  bad.dump());
  }
  // A bound without raw files, raw files meta.json does not list, a listed one missing.
  auto f = files;
  for (const char* raw : {"k_raw.npy", "gate_raw.npy", "beta_logits.npy", "a_log.npy",
                          "dt_bias.npy"}) {
    f.erase(raw);
  }
  f["meta.json"] = edited_meta(files.at("meta.json"), "inputs", contract_inputs);
  EXPECT_EQ(refusal(f),
            "d/meta.json: 'lower_bound' is given but 'inputs' lists no raw input (k_raw.npy, "
            "gate_raw.npy, beta_logits.npy, a_log.npy, dt_bias.npy): it is the raw gate's bound; "
            "remove it, or dump the problem again");
  f = files;
  nlohmann::json meta = nlohmann::json::parse(files.at("meta.json"));
  meta.erase("lower_bound");
  meta["inputs"] = contract_inputs;
  f["meta.json"] = meta.dump();
  EXPECT_EQ(refusal(f), "d/k_raw.npy: not one of the inputs d/meta.json lists (a stale file of "
                        "another problem?); remove it, or dump the problem again");
  f = files;
  f.erase("dt_bias.npy");
  EXPECT_EQ(refusal(f), "d/dt_bias.npy: missing, but d/meta.json lists it in 'inputs'");
}

TEST(Dump, RedumpRemovesStaleRawFiles) {
  // A problem dumped with raw inputs, then again from inputs without them: no raw file stays.
  const fs::path dir = scratch_dir("redump_raw");
  HostInputs in = make_inputs(shape_of(kPacked), 1);
  dump_inputs(dir.string(), "p", 1, in);
  EXPECT_TRUE(fs::exists(dir / "p" / "gate_raw.npy"));
  in.raw_k.clear();
  in.raw_gate.clear();
  in.beta_logits.clear();
  in.a_log.clear();
  in.dt_bias.clear();
  dump_inputs(dir.string(), "p", 1, in);
  for (const char* raw : {"k_raw.npy", "gate_raw.npy", "beta_logits.npy", "a_log.npy",
                          "dt_bias.npy"}) {
    EXPECT_FALSE(fs::exists(dir / "p" / raw)) << raw;
  }
  const std::vector<DumpedProblem> loaded = load_problems(dir.string());
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_FALSE(loaded[0].inputs.has_raw_inputs());
}

// ---------------------------------------------------------------------------------------------
// Items 2 and 8: ids

TEST(Dump, MetaIdsFollowTheShapeIdRule) {
  const auto files = dumped_files(make_inputs(shape_of(kPacked), 1), "meta_ids");
  auto with_id = [&](const nlohmann::json& id) {
    auto f = files;
    f["meta.json"] = edited_meta(files.at("meta.json"), "id", id);
    return refusal(f);
  };
  const std::string rule =
      "d/meta.json: 'id' must be an id of letters, digits, '.', '_' or '-' (not '.' or '..'), got ";
  EXPECT_EQ(with_id("../../x"), rule + "\"../../x\"");
  EXPECT_EQ(with_id(".."), rule + "\"..\"");
  EXPECT_EQ(with_id("a/b"), rule + "\"a/b\"");
  EXPECT_EQ(with_id("a\x1b[31mb"), rule + "\"a\\u001b[31mb\"");  // no raw escape in the message
  EXPECT_EQ(with_id(5), rule + "5");
  EXPECT_EQ(with_id("fine-id"), "");
}

TEST(Dump, WriterRefusesIdsThatAreNotOnePathComponent) {
  const fs::path dir = scratch_dir("writer_ids");
  const HostInputs in = make_inputs(shape_of(kPacked), 1);
  for (const char* id : {"..", ".", "../x", "a/b", ""}) {
    EXPECT_THROW(dump_inputs((dir / "d").string(), id, 1, in), DumpError) << id;
    EXPECT_THROW(dump_tensor((dir / "d").string(), id, "out_x", std::vector<float>{1.0f}, {1}),
                 DumpError)
        << id;
  }
  EXPECT_FALSE(fs::exists(dir / "x"));
  EXPECT_FALSE(fs::exists(dir / "d" / "q.npy"));
  EXPECT_THROW(dump_tensor((dir / "d").string(), "p", "../evil", std::vector<float>{1.0f}, {1}),
               std::logic_error);
}

TEST(Dump, LoadRefusesTwoProblemsWithOneId) {
  const fs::path dir = scratch_dir("two_ids");
  const HostInputs in = make_inputs(shape_of(kPacked), 1);
  dump_inputs(dir.string(), "a", 1, in);
  dump_inputs(dir.string(), "b", 1, in);
  put(dir / "b" / "meta.json", edited_meta(slurp(dir / "b" / "meta.json"), "id", "a"));
  try {
    load_problems(dir.string());
    FAIL() << "expected DumpError";
  } catch (const DumpError& e) {
    EXPECT_CONTAINS(e.what(), "both hold problem 'a' (meta.json 'id')");
  }
}

// ---------------------------------------------------------------------------------------------
// Item 3: non-empty dump directories, stale files

TEST(Dump, NonEmptyDirectoryNeedsForce) {
  const fs::path dir = scratch_dir("dump_dir");
  EXPECT_NO_THROW(check_dump_dir((dir / "new").string(), false));  // created
  EXPECT_TRUE(fs::is_directory(dir / "new"));
  EXPECT_NO_THROW(check_dump_dir((dir / "new").string(), false));  // empty: fine
  put(dir / "new" / "notes.txt", "mine");
  try {
    check_dump_dir((dir / "new").string(), false);
    FAIL() << "expected DumpError";
  } catch (const DumpError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--dump " + (dir / "new").string() +
                  ": the directory is not empty (it holds 'notes.txt'); pass --force to write the "
                  "problems into it anyway (each problem directory written is first emptied of "
                  "the files a dump writes; nothing else is removed)");
  }
  EXPECT_NO_THROW(check_dump_dir((dir / "new").string(), true));
  put(dir / "file", "x");
  EXPECT_THROW(check_dump_dir((dir / "file").string(), true), DumpError);
}

TEST(Dump, RedumpRemovesStaleDumpFilesOnly) {
  const fs::path dir = scratch_dir("redump");
  dump_inputs(dir.string(), "p", 1, make_inputs(shape_of(kPacked), 1));
  dump_tensor(dir.string(), "p", "out_fused_v2_mma", std::vector<float>{1.0f}, {1});
  put(dir / "p" / "notes.txt", "mine");
  put(dir / "p" / "q.npy.bak", "mine");
  fs::create_directory(dir / "p" / "sub");
  put(dir / "p" / "sub" / "q.npy", "mine");
  const ShapeSpec dense = shape_of(
      "shapes:\n  - {id: p, heads: 1, batch: 1, seq_len: 9, key_dim: 2, value_dim: 2}\n");
  // A FIFO under a name the dump writes is not removed (only regular files are) and not written
  // through: the writer refuses it.
  fs::remove(dir / "p" / "k.npy");
  ASSERT_EQ(::mkfifo((dir / "p" / "k.npy").c_str(), 0600), 0);
  EXPECT_THROW(dump_inputs(dir.string(), "p", 2, make_inputs(dense, 2)), NpyError);
  fs::remove(dir / "p" / "k.npy");
  // The same id again, now dense and without a state: no h0.npy, cu_seqlens.npy or old output
  // may survive to be mixed into the new problem.
  dump_inputs(dir.string(), "p", 2, make_inputs(dense, 2));
  EXPECT_FALSE(fs::exists(dir / "p" / "h0.npy"));
  EXPECT_FALSE(fs::exists(dir / "p" / "cu_seqlens.npy"));
  EXPECT_FALSE(fs::exists(dir / "p" / "out_fused_v2_mma.npy"));
  EXPECT_TRUE(fs::exists(dir / "p" / "notes.txt"));
  EXPECT_TRUE(fs::exists(dir / "p" / "q.npy.bak"));
  EXPECT_TRUE(fs::exists(dir / "p" / "sub" / "q.npy"));
  const std::vector<DumpedProblem> loaded = load_problems((dir / "p").string());
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0].seed, 2u);
  EXPECT_TRUE(loaded[0].inputs.cu_seqlens.empty());
  EXPECT_TRUE(loaded[0].inputs.initial_state.empty());
}

// Item 6: a FIFO among the files is refused, not read (which would block).
TEST(Dump, LoadRefusesAFifo) {
  const fs::path dir = scratch_dir("load_fifo");
  dump_inputs(dir.string(), "p", 1, make_inputs(shape_of(kPacked), 1));
  fs::remove(dir / "p" / "meta.json");
  ASSERT_EQ(::mkfifo((dir / "p" / "meta.json").c_str(), 0600), 0);
  try {
    load_problems(dir.string());
    FAIL() << "expected DumpError";
  } catch (const DumpError& e) {
    EXPECT_EQ(std::string(e.what()), (dir / "p" / "meta.json").string() +
                                         ": cannot read: it is a FIFO (named pipe), not a "
                                         "regular file");
  }
}

}  // namespace
}  // namespace kda::harness
