// Shape files: the three real files, the schema's accepted variations, and every refusal with
// its message (file, line, shape, field, expected, got).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "kda/harness/npy.h"
#include "kda/harness/shapes.h"
#include "scratch.h"

namespace kda::harness {
namespace {

const std::string kShapesDir = std::string(KDA_SOURCE_DIR) + "/shapes/";

int64_t sum(const std::vector<int64_t>& values) {
  return std::accumulate(values.begin(), values.end(), int64_t{0});
}

// Parses `text` as t.yaml and returns the error message ("" when it parsed).
std::string parse_error(const std::string& text) {
  try {
    parse_shape_file(text, "t.yaml");
  } catch (const ShapeFileError& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_REFUSED(text, fragment)                                        \
  do {                                                                        \
    const std::string message_ = parse_error(text);                           \
    EXPECT_NE(message_.find(fragment), std::string::npos)                     \
        << "expected the message to contain: " << (fragment) << "\n"         \
        << "message: " << (message_.empty() ? "(parsed fine)" : message_);    \
  } while (0)

// ---------------------------------------------------------------------------------------------
// The real files

TEST(ShapeFiles, ContractHasExactlyTheSixFrozenShapes) {
  const ShapeFile file = load_shape_file(kShapesDir + "contract.yaml");
  const std::vector<int64_t> ragged6 = {1300, 547, 2048, 963, 271, 3063};
  const std::vector<int64_t> uniform8(8, 1024);
  struct Expected {
    const char* id;
    int64_t heads;
    std::vector<int64_t> lens;
  };
  const std::vector<Expected> expected = {
      {"h96-fixed", 96, {8192}}, {"h96-ragged6", 96, ragged6}, {"h96-uniform8", 96, uniform8},
      {"h64-fixed", 64, {8192}}, {"h64-ragged6", 64, ragged6}, {"h64-uniform8", 64, uniform8},
  };
  ASSERT_EQ(file.shapes.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const ShapeSpec& s = file.shapes[i];
    SCOPED_TRACE(s.id);
    EXPECT_EQ(s.id, expected[i].id);
    EXPECT_EQ(s.heads, expected[i].heads);
    EXPECT_EQ(s.seq_lens, expected[i].lens);
    EXPECT_EQ(sum(s.seq_lens), 8192);
    EXPECT_EQ(s.tokens(), 8192);
    EXPECT_EQ(s.active_tokens(), 8192);
    EXPECT_FALSE(s.dense());
    EXPECT_EQ(s.batch_rows(), 1);
    EXPECT_EQ(s.key_dim, 128);
    EXPECT_EQ(s.value_dim, 128);
    EXPECT_TRUE(s.gpu_supported());
    EXPECT_FALSE(s.initial_state);
    EXPECT_FALSE(s.final_state);
    EXPECT_FALSE(s.q_rows.enabled);
    EXPECT_FALSE(s.seed.has_value());
    EXPECT_EQ(s.cu_seqlens().back(), 8192);
  }
}

TEST(ShapeFiles, SmokeIsSmallAndCoversPackedDenseAndState) {
  const ShapeFile file = load_shape_file(kShapesDir + "smoke.yaml");
  ASSERT_FALSE(file.shapes.empty());
  bool packed = false, dense = false, state = false;
  for (const ShapeSpec& s : file.shapes) {
    SCOPED_TRACE(s.id);
    EXPECT_TRUE(s.gpu_supported());
    EXPECT_LE(s.heads, 4);
    EXPECT_LE(s.batch_rows() * s.tokens(), 512);
    packed = packed || !s.dense();
    dense = dense || (s.dense() && s.batch > 1);
    state = state || (s.initial_state && s.final_state);
  }
  EXPECT_TRUE(packed);
  EXPECT_TRUE(dense);
  EXPECT_TRUE(state);
}

TEST(ShapeFiles, EdgeCoversTheListedCasesAndStaysSmall) {
  const ShapeFile file = load_shape_file(kShapesDir + "edge.yaml");
  std::set<std::vector<int64_t>> lists;
  bool ends_early = false, dense_tail = false, state_with_empty = false, all_empty = false;
  bool rowscale_packed = false, rowscale_dense = false;
  bool krows_with_states = false;
  for (const ShapeSpec& s : file.shapes) {
    SCOPED_TRACE(s.id);
    EXPECT_TRUE(s.gpu_supported());
    EXPECT_LE(s.heads, 4);
    EXPECT_LE(s.batch_rows() * s.tokens(), 1200);
    lists.insert(s.seq_lens);
    ends_early = ends_early || (!s.dense() && s.tokens() > sum(s.seq_lens) && sum(s.seq_lens) > 0);
    dense_tail = dense_tail || (s.dense() && s.batch > 1 && s.seq_len % 64 != 0);
    const bool has_empty = std::count(s.seq_lens.begin(), s.seq_lens.end(), 0) > 0;
    state_with_empty = state_with_empty || (s.initial_state && s.final_state && has_empty);
    all_empty = all_empty || (!s.dense() && sum(s.seq_lens) == 0 && s.tokens() >= 1);
    rowscale_packed = rowscale_packed || (s.q_rows.enabled && !s.dense());
    rowscale_dense = rowscale_dense || (s.q_rows.enabled && s.dense());
    krows_with_states = krows_with_states || (s.k_rows.enabled && s.initial_state && s.final_state);
  }
  EXPECT_TRUE(krows_with_states) << "edge.yaml needs a k row-scale shape with states";
  for (const std::vector<int64_t>& wanted :
       std::vector<std::vector<int64_t>>{{65, 0, 63}, {0, 1, 64, 0, 65}, {1}, {1, 1, 1},
                                         {17, 33, 100}, {0, 0}, {321, 0, 63, 128, 488}}) {
    EXPECT_TRUE(lists.count(wanted)) << "missing seq_lens list of size " << wanted.size();
  }
  std::vector<int64_t> two_zero_x10;
  for (int i = 0; i < 10; ++i) two_zero_x10.insert(two_zero_x10.end(), {2, 0});
  EXPECT_TRUE(lists.count(two_zero_x10)) << "missing [2, 0] x 10";
  EXPECT_TRUE(ends_early);
  EXPECT_TRUE(dense_tail);
  EXPECT_TRUE(state_with_empty);
  EXPECT_TRUE(all_empty);
  EXPECT_TRUE(rowscale_packed);
  EXPECT_TRUE(rowscale_dense);
}

// ---------------------------------------------------------------------------------------------
// Accepted variations

TEST(ShapeParse, PackedDefaults) {
  const ShapeFile file = parse_shape_file("shapes:\n  - id: a\n    heads: 3\n    seq_lens: [5, 0, 7]\n",
                                          "t.yaml");
  ASSERT_EQ(file.shapes.size(), 1u);
  const ShapeSpec& s = file.shapes[0];
  EXPECT_EQ(s.id, "a");
  EXPECT_EQ(s.line, 2);
  EXPECT_EQ(s.heads, 3);
  EXPECT_EQ(s.tokens(), 12);
  EXPECT_EQ(s.num_sequences(), 3);
  EXPECT_EQ(s.cu_seqlens(), (std::vector<int32_t>{0, 5, 5, 12}));
  EXPECT_EQ(s.head_dim, 128);
  EXPECT_EQ(s.total_tokens, 0);
  EXPECT_EQ(file.path, "t.yaml");
  EXPECT_TRUE(file.description.empty());
}

TEST(ShapeParse, DenseShape) {
  const ShapeSpec s =
      parse_shape_file("shapes:\n- {id: d, heads: 2, batch: 3, seq_len: 70}\n", "t.yaml").shapes[0];
  EXPECT_TRUE(s.dense());
  EXPECT_EQ(s.batch_rows(), 3);
  EXPECT_EQ(s.tokens(), 70);
  EXPECT_EQ(s.num_sequences(), 3);
  EXPECT_EQ(s.active_tokens(), 210);
  EXPECT_TRUE(s.cu_seqlens().empty());
  EXPECT_TRUE(s.seq_lens.empty());
}

TEST(ShapeParse, AllOptionalFields) {
  const std::string text = R"(description: everything
shapes:
  - id: x.y_z-1
    heads: 1
    seq_lens: [3, 4]
    total_tokens: 10
    head_dim: 64
    initial_state: true
    final_state: True
    seed: 18446744073709551615
    q_rows: {min_scale: 0.5, max_scale: 2, huge_values: [1e10], zero_rows: 2}
    k_rows: {max_scale: 4, zero_rows: 0}
  - id: kv
    heads: 2
    seq_lens: [0, 0]
    total_tokens: 1
    key_dim: 32
    value_dim: 48
    q_rows: row-scale
)";
  const ShapeFile file = parse_shape_file(text, "t.yaml");
  EXPECT_EQ(file.description, "everything");
  ASSERT_EQ(file.shapes.size(), 2u);
  const ShapeSpec& a = file.shapes[0];
  EXPECT_EQ(a.tokens(), 10);
  EXPECT_EQ(a.active_tokens(), 7);
  EXPECT_EQ(a.key_dim, 64);
  EXPECT_EQ(a.value_dim, 64);
  EXPECT_FALSE(a.gpu_supported());
  EXPECT_TRUE(a.initial_state);
  EXPECT_TRUE(a.final_state);
  ASSERT_TRUE(a.seed.has_value());
  EXPECT_EQ(*a.seed, 18446744073709551615ull);
  EXPECT_TRUE(a.q_rows.enabled);
  EXPECT_EQ(a.q_rows.min_scale, 0.5);
  EXPECT_EQ(a.q_rows.max_scale, 2.0);
  EXPECT_EQ(a.q_rows.huge_values, std::vector<double>{1e10});
  EXPECT_EQ(a.q_rows.zero_rows, 2);
  EXPECT_TRUE(a.k_rows.enabled);
  EXPECT_EQ(a.k_rows.min_scale, 1e-3);
  EXPECT_EQ(a.k_rows.max_scale, 4.0);
  EXPECT_EQ(a.k_rows.zero_rows, 0);
  const ShapeSpec& b = file.shapes[1];
  EXPECT_FALSE(b.k_rows.enabled);
  EXPECT_EQ(b.tokens(), 1);
  EXPECT_EQ(b.active_tokens(), 0);
  EXPECT_EQ(b.key_dim, 32);
  EXPECT_EQ(b.value_dim, 48);
  EXPECT_TRUE(b.q_rows.enabled);
  EXPECT_EQ(b.q_rows.min_scale, 1e-3);
  EXPECT_EQ(b.q_rows.max_scale, 1e3);
  EXPECT_EQ(b.q_rows.huge_values, (std::vector<double>{1e20, 3e38}));
  EXPECT_EQ(b.q_rows.zero_rows, 1);
}

// ---------------------------------------------------------------------------------------------
// Refusals (each names file:line, the shape, the field, what was expected and what was found)

TEST(ShapeRefusals, WrongType) {
  EXPECT_REFUSED("shapes:\n  - id: a\n    heads: four\n    seq_lens: [4]\n",
                 "t.yaml:3: shape 'a': field 'heads': expected an integer >= 1, got 'four'");
  // A quoted number is a string in YAML.
  EXPECT_REFUSED("shapes:\n  - id: a\n    heads: \"4\"\n    seq_lens: [4]\n",
                 "t.yaml:3: shape 'a': field 'heads': expected an integer >= 1, got the string \"4\"");
  EXPECT_REFUSED("shapes:\n  - id: a\n    heads: 4\n    seq_lens: 4\n",
                 "t.yaml:4: shape 'a': field 'seq_lens': expected a non-empty list");
  EXPECT_REFUSED("shapes:\n  - id: a\n    heads: 4\n    seq_lens: [4, x]\n",
                 "t.yaml:4: shape 'a': field 'seq_lens': expected a sequence length >= 0, got 'x'");
  EXPECT_REFUSED("shapes:\n  - id: a\n    heads: 4\n    seq_lens: [4]\n    final_state: yes please\n",
                 "t.yaml:5: shape 'a': field 'final_state': expected true or false, got 'yes please'");
  EXPECT_REFUSED("shapes:\n  - id: a\n    heads: 4\n    seq_lens: [4]\n    seed: -1\n",
                 "t.yaml:5: shape 'a': field 'seed': expected an unsigned 64-bit integer, got '-1'");
  EXPECT_REFUSED("shapes:\n  - id: a\n    heads: [4]\n    seq_lens: [4]\n",
                 "field 'heads': expected an integer >= 1, got a list");
  EXPECT_REFUSED("shapes:\n  - just a string\n", "t.yaml:2: shape '#1': field 'id': expected a map");
}

TEST(ShapeRefusals, MissingFields) {
  EXPECT_REFUSED("shapes:\n  - id: a\n    seq_lens: [4]\n",
                 "t.yaml:2: shape 'a': field 'heads': expected an integer >= 1, got nothing");
  EXPECT_REFUSED("shapes:\n  - heads: 2\n    seq_lens: [4]\n",
                 "t.yaml:2: shape '#1': field 'id': expected a shape id, got nothing");
  EXPECT_REFUSED("shapes:\n  - id: a\n    heads: 2\n",
                 "t.yaml:2: shape 'a': field 'seq_lens': expected a list of sequence lengths (or "
                 "batch + seq_len), got nothing");
  EXPECT_REFUSED("shapes:\n  - id: a\n    heads: 2\n    batch: 2\n",
                 "t.yaml:2: shape 'a': field 'seq_len': expected an integer >= 1");
  EXPECT_REFUSED("shapes:\n  - id: a\n    heads:\n    seq_lens: [4]\n",
                 "shape 'a': field 'heads': expected an integer >= 1, got nothing");
  EXPECT_REFUSED("description: x\n", "t.yaml:1: field 'shapes': expected a list of shapes, got nothing");
}

TEST(ShapeRefusals, DuplicateIdNamesBothLines) {
  EXPECT_REFUSED("shapes:\n  - {id: a, heads: 1, seq_lens: [1]}\n  - {id: a, heads: 2, seq_lens: [2]}\n",
                 "t.yaml:3: shape 'a': field 'id': expected a unique id, got a duplicate of the "
                 "shape on line 2");
}

TEST(ShapeRefusals, DuplicateKey) {
  EXPECT_REFUSED("shapes:\n  - id: a\n    heads: 1\n    heads: 2\n    seq_lens: [1]\n",
                 "t.yaml:4: shape 'a': field 'heads': expected each key once, got a second 'heads' "
                 "(first on line 3)");
}

TEST(ShapeRefusals, BadSizes) {
  EXPECT_REFUSED("shapes:\n  - {id: a, heads: 0, seq_lens: [1]}\n",
                 "t.yaml:2: shape 'a': field 'heads': expected an integer >= 1, got '0'");
  EXPECT_REFUSED("shapes:\n  - {id: a, heads: -3, seq_lens: [1]}\n",
                 "field 'heads': expected an integer >= 1, got '-3'");
  EXPECT_REFUSED("shapes:\n  - id: a\n    heads: 1\n    seq_lens:\n      - 4\n      - -1\n",
                 "t.yaml:6: shape 'a': field 'seq_lens': expected a sequence length >= 0, got '-1'");
  EXPECT_REFUSED("shapes:\n  - {id: a, heads: 1, batch: 0, seq_len: 4}\n",
                 "field 'batch': expected an integer >= 1, got '0'");
  EXPECT_REFUSED("shapes:\n  - {id: a, heads: 1, batch: 2, seq_len: -4}\n",
                 "field 'seq_len': expected an integer >= 1, got '-4'");
  EXPECT_REFUSED("shapes:\n  - {id: a, heads: 1, seq_lens: [1], key_dim: 0}\n",
                 "field 'key_dim': expected an integer >= 1, got '0'");
  EXPECT_REFUSED("shapes:\n  - {id: a, heads: 1, seq_lens: []}\n",
                 "field 'seq_lens': expected a non-empty list of sequence lengths (integers >= 0), "
                 "got an empty list");
  EXPECT_REFUSED("shapes:\n  - {id: a, heads: 1, seq_lens: [2000000000, 2000000000]}\n",
                 "cu_seqlens are int32");
  EXPECT_REFUSED("shapes:\n  - {id: a, heads: 1048576, seq_lens: [2000000000]}\n",
                 "field 'heads': expected at most 2^40 elements per tensor");
}

TEST(ShapeRefusals, TotalTokens) {
  EXPECT_REFUSED("shapes:\n  - id: a\n    heads: 1\n    seq_lens: [100, 30]\n    total_tokens: 129\n",
                 "t.yaml:5: shape 'a': field 'total_tokens': expected an integer >= 130 (the sum of "
                 "seq_lens), got '129'");
  // All sequences empty: T must come from total_tokens.
  EXPECT_REFUSED("shapes:\n  - id: a\n    heads: 1\n    seq_lens: [0, 0]\n",
                 "t.yaml:2: shape 'a': field 'total_tokens': expected an integer >= 1 when every "
                 "sequence is empty");
  EXPECT_REFUSED("shapes:\n  - {id: a, heads: 1, seq_lens: [0, 0], total_tokens: 0}\n",
                 "field 'total_tokens': expected an integer >= 1 (T of the buffers), got '0'");
  EXPECT_REFUSED("shapes:\n  - {id: a, heads: 1, batch: 1, seq_len: 4, total_tokens: 8}\n",
                 "field 'total_tokens': expected no total_tokens in a dense");
}

TEST(ShapeRefusals, UnknownKeyIsNamed) {
  EXPECT_REFUSED("shapes:\n  - id: a\n    heads: 1\n    sequence_lens: [4]\n",
                 "t.yaml:4: shape 'a': field 'sequence_lens': expected one of id, heads, seq_lens");
  EXPECT_REFUSED("shapes:\n  - id: a\n    heads: 1\n    sequence_lens: [4]\n", "got an unknown key");
  EXPECT_REFUSED("shape:\n  - {id: a, heads: 1, seq_lens: [1]}\n",
                 "t.yaml:1: field 'shape': expected one of shapes, description, got an unknown key");
  EXPECT_REFUSED("shapes:\n  - {id: a, heads: 1, seq_lens: [1], q_rows: {min_scale: 1, bogus: 2}}\n",
                 "field 'q_rows.bogus': expected one of min_scale, max_scale, huge_values, zero_rows");
}

TEST(ShapeRefusals, BothPackedAndDense) {
  EXPECT_REFUSED("shapes:\n  - id: a\n    heads: 1\n    seq_lens: [4]\n    batch: 2\n    seq_len: 3\n",
                 "t.yaml:5: shape 'a': field 'batch': expected either seq_lens or batch + seq_len, "
                 "got both");
  EXPECT_REFUSED("shapes:\n  - {id: a, heads: 1, seq_lens: [4], head_dim: 64, key_dim: 32}\n",
                 "field 'key_dim': expected either head_dim or key_dim/value_dim, got both");
}

TEST(ShapeRefusals, BadIdAndQRows) {
  EXPECT_REFUSED("shapes:\n  - {id: 'a b', heads: 1, seq_lens: [1]}\n",
                 "shape '#1': field 'id': expected an id of letters, digits");
  EXPECT_REFUSED("shapes:\n  - {id: a, heads: 1, seq_lens: [1], q_rows: rowscale}\n",
                 "field 'q_rows': expected 'row-scale' or a map");
  EXPECT_REFUSED("shapes:\n  - {id: a, heads: 1, seq_lens: [1], k_rows: 3}\n",
                 "field 'k_rows': expected 'row-scale' or a map");
  EXPECT_REFUSED("shapes:\n  - {id: a, heads: 1, seq_lens: [1], k_rows: {zero_rows: -1}}\n",
                 "field 'k_rows.zero_rows': expected an integer in [0, 1000000]");
  EXPECT_REFUSED("shapes:\n  - {id: a, heads: 1, seq_lens: [1], q_rows: {min_scale: 0}}\n",
                 "field 'q_rows.min_scale': expected a finite number > 0, got '0'");
  EXPECT_REFUSED("shapes:\n  - {id: a, heads: 1, seq_lens: [1], q_rows: {min_scale: 5, max_scale: 2}}\n",
                 "field 'q_rows.max_scale': expected a number >= min_scale (5), got '2'");
  // min_scale alone must not pass the default max_scale (found by tests/fuzz/fuzz_shapes).
  EXPECT_REFUSED("shapes:\n  - {id: a, heads: 1, seq_lens: [1], q_rows: {min_scale: 1e63}}\n",
                 "t.yaml:2: shape 'a': field 'q_rows.min_scale': expected a number <= max_scale "
                 "(1000, the default; set max_scale too), got '1e63'");
  EXPECT_REFUSED("shapes:\n  - {id: a, heads: 1, seq_lens: [1], q_rows: {huge_values: [1e20, inf]}}\n",
                 "field 'q_rows.huge_values': expected a finite number > 0, got 'inf'");
}

// Issue 18: an id names a directory of a --dump (DIR/<id>/), so it is one plain path component,
// and it reaches terminals and reports, so it holds no control character.
TEST(ShapeRefusals, IdsThatWouldNameAnotherDirectoryOrCarryControls) {
  for (const char* id : {"'.'", "'..'", "../x", "a/b", "'a\x1b[31mb'", "'tab\there'"}) {
    EXPECT_REFUSED(std::string("shapes:\n  - id: ") + id + "\n    heads: 1\n    seq_lens: [1]\n",
                   "t.yaml:2: shape '#1': field 'id': expected an id of letters, digits, '.', '_' "
                   "or '-' (not '.' or '..'), got ");
  }
  EXPECT_EQ(parse_error("shapes:\n  - {id: ..., heads: 1, seq_lens: [1]}\n"), "");  // not '..'
  EXPECT_EQ(parse_error("shapes:\n  - {id: .a, heads: 1, seq_lens: [1]}\n"), "");
  EXPECT_TRUE(is_valid_shape_id("h96-fixed.v2_a"));
  EXPECT_FALSE(is_valid_shape_id(".."));
  EXPECT_FALSE(is_valid_shape_id("."));
  EXPECT_FALSE(is_valid_shape_id(""));
  EXPECT_FALSE(is_valid_shape_id("a\nb"));
}

// Issue 18: YAML::Load read the first document of a stream and dropped the others silently.
TEST(ShapeRefusals, MoreThanOneDocument) {
  const std::string one = "shapes:\n  - {id: a, heads: 1, seq_lens: [1]}\n";
  EXPECT_EQ(parse_error(one), "");
  EXPECT_EQ(parse_error("---\n" + one), "");      // an explicit start of the one document
  EXPECT_EQ(parse_error(one + "...\n"), "");      // and an explicit end
  EXPECT_REFUSED(one + "---\n" + one,
                 "t.yaml:3: expected one YAML document, got a second one (or more text after the "
                 "first) starting here (a shape file is one map with one 'shapes:' list; merge the "
                 "lists)");
  EXPECT_REFUSED("---\n" + one + "---\n" + one, "t.yaml:4: expected one YAML document");
  EXPECT_REFUSED(one + "--- # the rest\n\n" + one, "t.yaml:3: expected one YAML document");
  EXPECT_REFUSED(one + "---\n", "t.yaml:3: expected one YAML document");  // an empty second one
  // Text after a top-level flow map: YAML::Load ignored it (the second map too), YAML::LoadAll
  // never returns (found by tests/fuzz/fuzz_shapes).
  const std::string flow = "{shapes: [{id: a, heads: 1, seq_lens: [1]}]}";
  EXPECT_EQ(parse_error(flow), "");
  EXPECT_REFUSED(flow + ",", "t.yaml:1: expected one YAML document");
  EXPECT_REFUSED(flow + ", {shapes: []}", "t.yaml:1: expected one YAML document");
}

TEST(ShapeRefusals, FileLevel) {
  EXPECT_REFUSED("shapes: []\n",
                 "t.yaml:1: field 'shapes': expected a non-empty list of shapes, got an empty list");
  EXPECT_REFUSED("shapes:\n  - {id: a, heads: 1\n", "t.yaml:");
  EXPECT_REFUSED("shapes:\n  - {id: a, heads: 1\n", "not valid YAML");
  EXPECT_REFUSED("just some words\n",
                 "t.yaml:1: field 'shapes': expected a top-level map with a 'shapes:' list, got "
                 "'just some words'");
  EXPECT_REFUSED("", "field 'shapes': expected a top-level map with a 'shapes:' list, got nothing");
  EXPECT_REFUSED("\t- [oops\n", "not valid YAML");
  // Nesting deep enough to exhaust a recursive parser is refused (yaml-cpp stops at 500 levels).
  EXPECT_REFUSED("shapes: " + std::string(100000, '['),
                 "t.yaml:1: not valid YAML: nested more than 500 levels deep");
  EXPECT_REFUSED(std::string("\x00\x01\xff\xfe binary", 11), "t.yaml:1: not valid YAML: the file contains NUL bytes");
}

// A file cut off mid-write: wherever the cut falls, the message says what is missing or broken.
TEST(ShapeRefusals, TruncatedFiles) {
  const std::string whole = "shapes:\n  - id: a\n    heads: 2\n    seq_lens: [100, 37]\n";
  EXPECT_EQ(parse_error(whole), "");
  EXPECT_REFUSED(whole.substr(0, whole.size() - 3), "t.yaml:4: not valid YAML");  // in the list
  EXPECT_REFUSED(whole.substr(0, whole.find("seq_lens") + 6),
                 "t.yaml:4: shape 'a': field 'seq_le': expected one of id, heads, seq_lens");
  EXPECT_REFUSED(whole.substr(0, whole.find("seq_lens")),
                 "t.yaml:2: shape 'a': field 'seq_lens': expected a list of sequence lengths (or "
                 "batch + seq_len), got nothing");
  EXPECT_REFUSED(whole.substr(0, whole.find("heads") + 6),
                 "shape 'a': field 'heads': expected an integer >= 1, got nothing");
  EXPECT_REFUSED(whole.substr(0, 9), "t.yaml:2: field 'shapes': expected a non-empty list of shapes");
}

TEST(ShapeRefusals, MissingFileNamesPathAndReason) {
  try {
    load_shape_file("/nonexistent/dir/shapes.yaml");
    FAIL() << "expected ShapeFileError";
  } catch (const ShapeFileError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("/nonexistent/dir/shapes.yaml"), std::string::npos) << message;
    EXPECT_NE(message.find("No such file or directory"), std::string::npos) << message;
  }
  EXPECT_THROW(load_shape_file(kShapesDir), ShapeFileError);  // a directory
}

// ---------------------------------------------------------------------------------------------
// Gate recipes (`gate:`)

TEST(ShapeGate, DefaultIsTheContractGenerator) {
  const ShapeSpec s = parse_shape_file("shapes:\n- {id: a, heads: 1, seq_lens: [3]}\n", "t.yaml").shapes[0];
  EXPECT_EQ(s.gate.preset, "contract");
  EXPECT_FALSE(s.gate.customized());
  EXPECT_EQ(s.gate.label(), "contract");
  EXPECT_EQ(s.gate.a_log, (GateRecipe::Range{0.0, 1.0}));
  EXPECT_EQ(s.gate.dt_bias, (GateRecipe::Range{0.0, 1.0}));
  EXPECT_EQ(s.gate.lower_bound, -5.0);
  EXPECT_EQ(s.gate.raw_mean, 0.0);
  EXPECT_EQ(s.gate.raw_std, 1.0);
  EXPECT_EQ(s.gate.describe(), "A_log ~ U(0, 1), dt_bias ~ U(0, 1), lb -5, raw ~ N(0, 1^2)");
}

TEST(ShapeGate, Presets) {
  for (const std::string& name : gate_preset_names()) {
    const ShapeSpec s = parse_shape_file(
        "shapes:\n- {id: a, heads: 1, seq_lens: [3], gate: " + name + "}\n", "t.yaml").shapes[0];
    EXPECT_EQ(s.gate.label(), name);
    EXPECT_FALSE(s.gate.customized());
  }
  EXPECT_EQ(gate_preset("mixed")->dt_bias, (GateRecipe::Range{-12.0, 1.0}));
  EXPECT_EQ(gate_preset("long")->dt_bias, (GateRecipe::Range{-12.0, -7.0}));
  EXPECT_EQ(gate_preset("zero")->lower_bound, 0.0);
  EXPECT_FALSE(gate_preset("Mixed").has_value());
}

TEST(ShapeGate, MapStartsFromItsPresetAndSaysItIsCustom) {
  const std::string text = R"(shapes:
  - id: a
    heads: 2
    seq_lens: [3]
    gate:
      preset: mixed
      a_log: 0.5
      lower_bound: -2.5
      raw_mean: -1
      raw_std: 0.25
  - id: b
    heads: 2
    seq_lens: [3]
    gate: {preset: long}
  - id: c
    heads: 2
    seq_lens: [3]
    gate: {dt_bias: [-3, -3]}
)";
  const ShapeFile file = parse_shape_file(text, "t.yaml");
  const GateRecipe& a = file.shapes[0].gate;
  EXPECT_TRUE(a.customized());
  EXPECT_EQ(a.label(), "custom(mixed)");
  EXPECT_EQ(a.a_log, (GateRecipe::Range{0.5, 0.5}));
  EXPECT_EQ(a.dt_bias, (GateRecipe::Range{-12.0, 1.0}));  // from the preset
  EXPECT_EQ(a.lower_bound, -2.5);
  EXPECT_EQ(a.raw_mean, -1.0);
  EXPECT_EQ(a.raw_std, 0.25);
  EXPECT_EQ(a.describe(), "A_log ~ 0.5, dt_bias ~ U(-12, 1), lb -2.5, raw ~ N(-1, 0.25^2)");
  EXPECT_EQ(file.shapes[1].gate.label(), "long");  // a map that changes nothing
  EXPECT_EQ(file.shapes[2].gate.label(), "custom(contract)");
  EXPECT_EQ(file.shapes[2].gate.dt_bias, (GateRecipe::Range{-3.0, -3.0}));
}

TEST(ShapeGate, Refusals) {
  const std::string head = "shapes:\n  - id: a\n    heads: 1\n    seq_lens: [3]\n    gate: ";
  EXPECT_REFUSED(head + "slow\n",
                 "t.yaml:5: shape 'a': field 'gate': expected a gate preset (contract, mixed, long, "
                 "zero), got 'slow'");
  EXPECT_REFUSED(head + "[1, 2]\n", "field 'gate': expected a preset (contract, mixed, long, zero) or a map");
  EXPECT_REFUSED(head + "{preset: fast}\n", "field 'gate.preset': expected a gate preset");
  EXPECT_REFUSED(head + "{bias: 1}\n", "field 'gate.bias': expected one of preset, a_log, dt_bias");
  EXPECT_REFUSED(head + "{lower_bound: 0.5}\n",
                 "field 'gate.lower_bound': expected a number in [-5.914855940778, 0] (the "
                 "bounded-gate contract), got '0.5'");
  EXPECT_REFUSED(head + "{lower_bound: -6}\n", "field 'gate.lower_bound': expected a number in");
  EXPECT_REFUSED(head + "{lower_bound: .nan}\n", "field 'gate.lower_bound'");
  EXPECT_REFUSED(head + "{lower_bound: nan}\n", "field 'gate.lower_bound'");
  EXPECT_REFUSED(head + "{lower_bound: \"-1\"}\n", "field 'gate.lower_bound'");
  EXPECT_REFUSED(head + "{raw_std: -1}\n", "field 'gate.raw_std': expected a finite number >= 0");
  EXPECT_REFUSED(head + "{raw_mean: inf}\n", "field 'gate.raw_mean': expected a finite number");
  EXPECT_REFUSED(head + "{dt_bias: [1, 0]}\n",
                 "field 'gate.dt_bias': expected a number, a [lo, hi] list of numbers with lo <= "
                 "hi, or a .npy file, got [1, 0]");
  EXPECT_REFUSED(head + "{dt_bias: [1, 2, 3]}\n", "field 'gate.dt_bias': expected a number, a [lo, hi]");
  EXPECT_REFUSED(head + "{dt_bias: [1, x]}\n", "field 'gate.dt_bias'");
  EXPECT_REFUSED(head + "{dt_bias: inf}\n", "field 'gate.dt_bias'");
  EXPECT_REFUSED(head + "{dt_bias: bias.txt}\n", "field 'gate.dt_bias': expected a number, a [lo, hi]");
  EXPECT_REFUSED(head + "{dt_bias: {lo: 1}}\n", "field 'gate.dt_bias'");
  EXPECT_REFUSED(head + "{a_log: [0, 89]}\n",
                 "field 'gate.a_log': expected values <= 88 (exp(A_log) must be finite in fp32)");
  EXPECT_REFUSED(head + "{preset: zero, preset: long}\n", "field 'gate.preset': expected each key once");
}

// .npy parameters, as a real checkpoint's A_log and dt_bias would be given.
class ShapeGateFiles : public ::testing::Test {
 protected:
  // One directory per test (scratch.h): ctest runs this fixture's tests as parallel processes,
  // and a shared one let one test's SetUp delete the other's files (a CI flake).
  void SetUp() override { dir_ = test::scratch_dir("gate_files"); }
  std::string write_yaml(const std::string& gate) {
    const std::string path = (dir_ / "s.yaml").string();
    std::ofstream(path) << "shapes:\n  - id: a\n    heads: 2\n    key_dim: 4\n    value_dim: 4\n"
                           "    seq_lens: [3]\n    gate: " << gate << "\n";
    return path;
  }
  std::string load_error(const std::string& path) {
    try {
      load_shape_file(path);
    } catch (const ShapeFileError& e) {
      return e.what();
    }
    return "";
  }
  std::filesystem::path dir_;
};

TEST_F(ShapeGateFiles, RelativePathsResolveAgainstTheShapeFileAndValuesAreRead) {
  write_npy((dir_ / "a_log.npy").string(), std::vector<float>{0.25f, 2.0f}, {2});
  std::vector<double> dt(8);
  for (size_t i = 0; i < dt.size(); ++i) dt[i] = -1.0 - static_cast<double>(i);
  write_npy((dir_ / "dt.npy").string(), dt, {2, 4});
  const ShapeFile file = load_shape_file(write_yaml("{preset: mixed, a_log: a_log.npy, dt_bias: dt.npy}"));
  const GateRecipe& g = file.shapes[0].gate;
  EXPECT_EQ(g.a_log_file, (dir_ / "a_log.npy").string());
  EXPECT_EQ(g.a_log_values, (std::vector<float>{0.25f, 2.0f}));
  ASSERT_EQ(g.dt_bias_values.size(), 8u);
  EXPECT_EQ(g.dt_bias_values[7], -8.0f);
  EXPECT_EQ(g.label(), "custom(mixed)");
  // Flat [H * K] is accepted for dt_bias (FLA keeps it that way).
  write_npy((dir_ / "dt.npy").string(), dt, {8});
  EXPECT_EQ(load_shape_file(write_yaml("{dt_bias: dt.npy}")).shapes[0].gate.dt_bias_values.size(), 8u);
}

TEST_F(ShapeGateFiles, BadFilesAreRefusedNamingFileAndField) {
  const std::string path = write_yaml("{a_log: missing.npy}");
  std::string message = load_error(path);
  EXPECT_NE(message.find("missing.npy"), std::string::npos) << message;
  EXPECT_NE(message.find("shape 'a': field 'gate.a_log'"), std::string::npos) << message;

  write_npy((dir_ / "a3.npy").string(), std::vector<float>{0.f, 1.f, 2.f}, {3});
  message = load_error(write_yaml("{a_log: a3.npy}"));
  EXPECT_NE(message.find("expected shape [2] (H = 2), got [3]"), std::string::npos) << message;

  write_npy((dir_ / "dt.npy").string(), std::vector<float>(6, 0.f), {2, 3});
  message = load_error(write_yaml("{dt_bias: dt.npy}"));
  EXPECT_NE(message.find("expected shape [2, 4] (H = 2, K = 4), got [2, 3]"), std::string::npos)
      << message;

  write_npy((dir_ / "big.npy").string(), std::vector<float>{0.f, 100.f}, {2});
  message = load_error(write_yaml("{a_log: big.npy}"));
  EXPECT_NE(message.find("element 1 is 100; expected finite values <= 88"), std::string::npos)
      << message;

  write_npy((dir_ / "nan.npy").string(), std::vector<float>{0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, NAN}, {2, 4});
  message = load_error(write_yaml("{dt_bias: nan.npy}"));
  EXPECT_NE(message.find("element 7 is nan"), std::string::npos) << message;

  write_npy((dir_ / "int.npy").string(), std::vector<int32_t>{0, 1}, {2});
  message = load_error(write_yaml("{a_log: int.npy}"));
  EXPECT_NE(message.find("expected float32 or float64 values, got int32"), std::string::npos) << message;
}

}  // namespace
}  // namespace kda::harness
