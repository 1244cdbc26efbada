// Shape-file parser. The schema is documented in shapes/README.md; every refusal names the file,
// the line, the shape, the field, what was expected and what was found.
#include "kda/harness/shapes.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>

#include <fmt/format.h>

#include "kda/harness/files.h"
#include "kda/harness/npy.h"

namespace kda::harness {

// ---------------------------------------------------------------------------------------------
// Gate recipes

namespace {

// -128 / (15 log2 e): the most negative lower bound of the bounded-gate contract (§3.1).
constexpr double kMinLowerBound = -5.914855940778;
// exp(A_log) must stay finite in fp32 (the GPU gate producer computes it there): A_log < 88.72.
constexpr double kMaxALog = 88.0;

std::string format_number(double x) { return fmt::format("{:g}", x); }

std::string format_range(const GateRecipe::Range& r) {
  return r.lo == r.hi ? format_number(r.lo)
                      : fmt::format("U({}, {})", format_number(r.lo), format_number(r.hi));
}

}  // namespace

std::vector<std::string> gate_preset_names() { return {"contract", "mixed", "long", "zero"}; }

std::optional<GateRecipe> gate_preset(const std::string& name) {
  GateRecipe recipe;  // the contract generator (§9.3)
  recipe.preset = name;
  if (name == "contract") return recipe;
  if (name == "mixed") {  // channel memories from one token to far beyond the sequence
    recipe.dt_bias = {-12.0, 1.0};
    return recipe;
  }
  if (name == "long") {  // every channel remembers for more than two chunks
    recipe.dt_bias = {-12.0, -7.0};
    return recipe;
  }
  if (name == "zero") {  // no decay at all: gamma = 0 * sigmoid(...) = 0
    recipe.lower_bound = 0.0;
    return recipe;
  }
  return std::nullopt;
}

bool GateRecipe::customized() const {
  const std::optional<GateRecipe> base = gate_preset(preset);
  return !base || !(a_log == base->a_log && dt_bias == base->dt_bias &&
                    lower_bound == base->lower_bound && raw_mean == base->raw_mean &&
                    raw_std == base->raw_std && a_log_file.empty() && dt_bias_file.empty() &&
                    a_log_values.empty() && dt_bias_values.empty());
}

std::string GateRecipe::label() const { return customized() ? "custom(" + preset + ")" : preset; }

std::string GateRecipe::describe() const {
  const std::string a = a_log_file.empty() ? format_range(a_log) : a_log_file;
  const std::string dt = dt_bias_file.empty() ? format_range(dt_bias) : dt_bias_file;
  return fmt::format("A_log ~ {}, dt_bias ~ {}, lb {}, raw ~ N({}, {}^2)", a, dt,
                     format_number(lower_bound), format_number(raw_mean), format_number(raw_std));
}

void load_gate_files(const std::string& shape_id, int64_t heads, int64_t key_dim, GateRecipe& gate) {
  auto read = [&](const std::string& file, const char* field, std::vector<int64_t> want_a,
                  std::vector<int64_t> want_b, bool a_log) {
    auto refuse = [&](const std::string& what) {
      throw ShapeFileError(fmt::format("{}: shape '{}': field 'gate.{}': {}", file, shape_id,
                                       field, what));
    };
    NpyArray array;
    try {
      array = read_npy(file);
    } catch (const NpyError& e) {
      refuse(e.what());
    }
    if (array.type == NpyType::i32) refuse("expected float32 or float64 values, got int32");
    if (array.shape != want_a && array.shape != want_b) {
      std::string got;
      for (int64_t d : array.shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
      std::string want;
      for (int64_t d : want_a) want += (want.empty() ? "" : ", ") + std::to_string(d);
      refuse(fmt::format("expected shape [{}] (H = {}{}), got [{}]", want, heads,
                         want_a.size() > 1 ? fmt::format(", K = {}", key_dim) : "", got));
    }
    std::vector<float> values;
    for (double x : array.as_f64()) {
      const float f = static_cast<float>(x);
      if (!std::isfinite(f) || (a_log && f > kMaxALog)) {
        refuse(fmt::format("element {} is {}; expected finite values{}", values.size(),
                           format_number(x), a_log ? " <= 88 (exp(A_log) must be finite in fp32)" : ""));
      }
      values.push_back(f);
    }
    return values;
  };
  if (!gate.a_log_file.empty() && gate.a_log_values.empty()) {
    gate.a_log_values = read(gate.a_log_file, "a_log", {heads}, {heads}, true);
  }
  if (!gate.dt_bias_file.empty() && gate.dt_bias_values.empty()) {
    gate.dt_bias_values =
        read(gate.dt_bias_file, "dt_bias", {heads, key_dim}, {heads * key_dim}, false);
  }
}

// ---------------------------------------------------------------------------------------------
// ShapeSpec

int64_t ShapeSpec::tokens() const {
  if (dense()) return seq_len;
  if (total_tokens > 0) return total_tokens;
  int64_t sum = 0;
  for (int64_t len : seq_lens) sum += len;
  return sum;
}

int64_t ShapeSpec::batch_rows() const { return dense() ? batch : 1; }

int64_t ShapeSpec::num_sequences() const {
  return dense() ? batch : static_cast<int64_t>(seq_lens.size());
}

int64_t ShapeSpec::active_tokens() const {
  if (dense()) return batch * seq_len;
  int64_t sum = 0;
  for (int64_t len : seq_lens) sum += len;
  return sum;
}

std::vector<int32_t> ShapeSpec::cu_seqlens() const {
  if (dense()) return {};
  std::vector<int32_t> cu(seq_lens.size() + 1, 0);
  for (size_t i = 0; i < seq_lens.size(); ++i) {
    cu[i + 1] = cu[i] + static_cast<int32_t>(seq_lens[i]);  // the parser bounds the sum by int32
  }
  return cu;
}

bool is_valid_shape_id(std::string_view id) {
  // An id names a directory of a --dump (DIR/<id>/): "." and ".." would name the dump itself or
  // its parent.
  if (id.empty() || id == "." || id == "..") return false;
  for (char c : id) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Parsing

namespace {

// cu_seqlens are int32, so no buffer may hold more tokens than this.
constexpr int64_t kMaxTokens = std::numeric_limits<int32_t>::max();
// A sanity bound on one tensor (tokens x heads x dim, or N x H x K x V): 2^40 elements.
constexpr int64_t kMaxElements = int64_t{1} << 40;

// What a message is about: the file, and the shape ("" at the top level, "#3" before the id is
// known).
struct Where {
  const std::string& path;
  std::string shape;
};

[[noreturn]] void fail(const Where& where, int line, std::string_view field,
                       std::string_view expected, std::string_view got) {
  std::string message = fmt::format("{}:{}: ", where.path, line);
  if (!where.shape.empty()) message += fmt::format("shape '{}': ", where.shape);
  message += fmt::format("field '{}': expected {}, got {}", field, expected, got);
  throw ShapeFileError(message);
}

int line_of(const YAML::Node& node, int fallback) {
  const YAML::Mark mark = node.Mark();
  return mark.line >= 0 ? mark.line + 1 : fallback;
}

// yaml-cpp tags quoted scalars "!" and plain ones "?": a quoted "4" is a string, not a number.
bool is_quoted(const YAML::Node& node) { return node.Tag() == "!"; }

bool is_plain_scalar(const YAML::Node& node) { return node.IsScalar() && !is_quoted(node); }

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar: {
      std::string text = node.Scalar();
      if (text.size() > 40) text = text.substr(0, 37) + "...";  // keep messages one line
      return is_quoted(node) ? fmt::format("the string \"{}\"", text) : fmt::format("'{}'", text);
    }
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    default:
      return "nothing";
  }
}

// One `key: value` of a map, remembered with the line of its key.
struct Field {
  YAML::Node value;
  int line = 0;
};
using FieldMap = std::map<std::string, Field>;

// Reads a map's entries, refusing keys outside `known` (naming the key) and repeated keys.
FieldMap read_fields(const Where& where, const YAML::Node& map, int map_line,
                     std::initializer_list<std::string_view> known, std::string_view field_prefix) {
  std::string known_list;
  for (std::string_view key : known) {
    known_list += known_list.empty() ? "" : ", ";
    known_list += key;
  }
  FieldMap fields;
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node key = it->first;
    const int line = line_of(key, map_line);
    if (!key.IsScalar()) {
      fail(where, line, fmt::format("{}?", field_prefix), fmt::format("a key ({})", known_list),
           describe(key));
    }
    const std::string name = key.Scalar();
    const std::string full_name = fmt::format("{}{}", field_prefix, name);
    bool is_known = false;
    for (std::string_view k : known) is_known = is_known || k == name;
    if (!is_known) fail(where, line, full_name, fmt::format("one of {}", known_list), "an unknown key");
    auto [entry, inserted] = fields.emplace(name, Field{it->second, line});
    if (!inserted) {
      fail(where, line, full_name, "each key once",
           fmt::format("a second '{}' (first on line {})", name, entry->second.line));
    }
  }
  return fields;
}

int value_line(const Field& field) { return line_of(field.value, field.line); }

// A plain (unquoted) scalar that is exactly one number of type T, with nothing after it.
template <class T>
bool scalar_number(const YAML::Node& node, T& value) {
  if (!is_plain_scalar(node)) return false;
  const std::string& text = node.Scalar();
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  return ec == std::errc() && ptr == end;
}

int64_t parse_int(const Where& where, std::string_view name, const YAML::Node& node, int line,
                  int64_t min_value, int64_t max_value, std::string_view what) {
  int64_t value = 0;
  if (!scalar_number(node, value) || value < min_value || value > max_value) {
    fail(where, line_of(node, line), name, what, describe(node));
  }
  return value;
}

uint64_t parse_uint64(const Where& where, std::string_view name, const YAML::Node& node, int line) {
  uint64_t value = 0;
  if (!scalar_number(node, value)) {
    fail(where, line_of(node, line), name, "an unsigned 64-bit integer", describe(node));
  }
  return value;
}

// A finite number in [min_value, max_value].
double parse_number(const Where& where, std::string_view name, const YAML::Node& node, int line,
                    double min_value, double max_value, std::string_view what) {
  double value = 0.0;
  if (!scalar_number(node, value) || !std::isfinite(value) || value < min_value ||
      value > max_value) {
    fail(where, line_of(node, line), name, what, describe(node));
  }
  return value;
}

double parse_positive_number(const Where& where, std::string_view name, const YAML::Node& node,
                             int line) {
  const double value = parse_number(where, name, node, line, 0.0, INFINITY, "a finite number > 0");
  if (value == 0.0) fail(where, line_of(node, line), name, "a finite number > 0", describe(node));
  return value;
}

bool parse_bool(const Where& where, std::string_view name, const YAML::Node& node, int line) {
  if (is_plain_scalar(node)) {
    const std::string& text = node.Scalar();
    if (text == "true" || text == "True" || text == "TRUE") return true;
    if (text == "false" || text == "False" || text == "FALSE") return false;
  }
  fail(where, line_of(node, line), name, "true or false", describe(node));
}

std::string parse_string(const Where& where, std::string_view name, const YAML::Node& node,
                         int line) {
  if (!node.IsScalar()) fail(where, line_of(node, line), name, "a string", describe(node));
  return node.Scalar();
}

// `q_rows:` or `k_rows:` (key names the field in messages).
QRowSuite parse_row_suite(const Where& where, const Field& field, const std::string& key) {
  const YAML::Node& node = field.value;
  const int line = value_line(field);
  QRowSuite suite;
  suite.enabled = true;
  if (is_plain_scalar(node) && node.Scalar() == "row-scale") return suite;
  if (!node.IsMap()) {
    fail(where, line, key,
         "'row-scale' or a map of min_scale, max_scale, huge_values, zero_rows", describe(node));
  }
  const FieldMap fields =
      read_fields(where, node, line, {"min_scale", "max_scale", "huge_values", "zero_rows"}, key + ".");
  if (auto it = fields.find("min_scale"); it != fields.end()) {
    suite.min_scale = parse_positive_number(where, key + ".min_scale", it->second.value, it->second.line);
  }
  if (auto it = fields.find("max_scale"); it != fields.end()) {
    suite.max_scale = parse_positive_number(where, key + ".max_scale", it->second.value, it->second.line);
    if (suite.max_scale < suite.min_scale) {
      fail(where, value_line(it->second), key + ".max_scale",
           fmt::format("a number >= min_scale ({})", suite.min_scale), describe(it->second.value));
    }
  } else if (suite.max_scale < suite.min_scale) {
    // min_scale alone, above the default max_scale (found by tests/fuzz/fuzz_shapes).
    const Field& min = fields.at("min_scale");
    fail(where, value_line(min), key + ".min_scale",
         fmt::format("a number <= max_scale ({}, the default; set max_scale too)", suite.max_scale),
         describe(min.value));
  }
  if (auto it = fields.find("huge_values"); it != fields.end()) {
    const YAML::Node& list = it->second.value;
    if (!list.IsSequence()) {
      fail(where, value_line(it->second), key + ".huge_values", "a list of numbers > 0",
           describe(list));
    }
    suite.huge_values.clear();
    for (const YAML::Node& item : list) {
      suite.huge_values.push_back(
          parse_positive_number(where, key + ".huge_values", item, value_line(it->second)));
    }
  }
  if (auto it = fields.find("zero_rows"); it != fields.end()) {
    suite.zero_rows = static_cast<int>(parse_int(where, key + ".zero_rows", it->second.value,
                                                 it->second.line, 0, 1'000'000,
                                                 "an integer in [0, 1000000]"));
  }
  return suite;
}

// `gate: <preset>` or a map starting from `preset` (default contract). a_log / dt_bias: a number
// (constant), [lo, hi] (uniform), or a .npy path resolved against the shape file's directory.
GateRecipe parse_gate(const Where& where, const Field& field) {
  const YAML::Node& node = field.value;
  const int line = value_line(field);
  std::string presets;
  for (const std::string& name : gate_preset_names()) presets += (presets.empty() ? "" : ", ") + name;
  auto preset = [&](const YAML::Node& name_node, int name_line, std::string_view name) {
    const std::optional<GateRecipe> recipe =
        is_plain_scalar(name_node) ? gate_preset(name_node.Scalar()) : std::nullopt;
    if (!recipe) {
      fail(where, line_of(name_node, name_line), name, fmt::format("a gate preset ({})", presets),
           describe(name_node));
    }
    return *recipe;
  };
  if (!node.IsMap()) {
    if (!is_plain_scalar(node)) {
      fail(where, line, "gate",
           fmt::format("a preset ({}) or a map of preset, a_log, dt_bias, lower_bound, raw_mean, "
                       "raw_std", presets),
           describe(node));
    }
    return preset(node, line, "gate");
  }
  const FieldMap fields = read_fields(
      where, node, line, {"preset", "a_log", "dt_bias", "lower_bound", "raw_mean", "raw_std"},
      "gate.");
  GateRecipe recipe = *gate_preset("contract");
  if (auto it = fields.find("preset"); it != fields.end()) {
    recipe = preset(it->second.value, it->second.line, "gate.preset");
  }
  const std::filesystem::path dir = std::filesystem::path(where.path).parent_path();
  // A number, [lo, hi], or a path to a .npy file.
  auto range_or_file = [&](const char* name, GateRecipe::Range& range, std::string& file) {
    auto it = fields.find(name);
    if (it == fields.end()) return;
    const std::string full = fmt::format("gate.{}", name);
    const YAML::Node& value = it->second.value;
    const int value_at = value_line(it->second);
    const std::string what = "a number, a [lo, hi] list of numbers with lo <= hi, or a .npy file";
    if (value.IsSequence()) {
      if (value.size() != 2) fail(where, value_at, full, what, fmt::format("a list of {}", value.size()));
      const double lo = parse_number(where, full, value[0], value_at, -1e30, 1e30, what);
      const double hi = parse_number(where, full, value[1], value_at, -1e30, 1e30, what);
      if (hi < lo) fail(where, value_at, full, what, fmt::format("[{}, {}]", lo, hi));
      range = {lo, hi};
      return;
    }
    if (!value.IsScalar()) fail(where, value_at, full, what, describe(value));
    const std::string& text = value.Scalar();
    if (double x = 0.0; scalar_number(value, x)) {
      if (!std::isfinite(x)) fail(where, value_at, full, what, describe(value));
      range = {x, x};
      return;
    }
    if (text.size() < 5 || text.substr(text.size() - 4) != ".npy") fail(where, value_at, full, what, describe(value));
    const std::filesystem::path given(text);
    file = (given.is_absolute() || dir.empty() ? given : dir / given).string();
  };
  range_or_file("a_log", recipe.a_log, recipe.a_log_file);
  if (recipe.a_log.hi > kMaxALog) {
    fail(where, value_line(fields.at("a_log")), "gate.a_log",
         "values <= 88 (exp(A_log) must be finite in fp32)", format_range(recipe.a_log));
  }
  range_or_file("dt_bias", recipe.dt_bias, recipe.dt_bias_file);
  if (auto it = fields.find("lower_bound"); it != fields.end()) {
    recipe.lower_bound = parse_number(where, "gate.lower_bound", it->second.value, it->second.line,
                                      kMinLowerBound, 0.0,
                                      "a number in [-5.914855940778, 0] (the bounded-gate contract)");
  }
  if (auto it = fields.find("raw_mean"); it != fields.end()) {
    recipe.raw_mean = parse_number(where, "gate.raw_mean", it->second.value, it->second.line, -1e30,
                                   1e30, "a finite number");
  }
  if (auto it = fields.find("raw_std"); it != fields.end()) {
    recipe.raw_std = parse_number(where, "gate.raw_std", it->second.value, it->second.line, 0.0,
                                  1e30, "a finite number >= 0");
  }
  return recipe;
}

// Packed form: seq_lens (+ optional total_tokens).
void parse_packed(const Where& where, const FieldMap& fields, int entry_line, ShapeSpec& shape) {
  const Field& lens_field = fields.at("seq_lens");
  const YAML::Node& list = lens_field.value;
  const int lens_line = value_line(lens_field);
  if (!list.IsSequence() || list.size() == 0) {
    fail(where, lens_line, "seq_lens", "a non-empty list of sequence lengths (integers >= 0)",
         list.IsSequence() ? "an empty list" : describe(list));
  }
  int64_t sum = 0;
  for (const YAML::Node& item : list) {
    const int64_t len =
        parse_int(where, "seq_lens", item, lens_line, 0, kMaxTokens, "a sequence length >= 0");
    sum += len;
    if (sum > kMaxTokens) {
      fail(where, lens_line, "seq_lens",
           fmt::format("at most {} tokens in total (cu_seqlens are int32)", kMaxTokens),
           fmt::format("a running sum of {}", sum));
    }
    shape.seq_lens.push_back(len);
  }
  if (auto it = fields.find("total_tokens"); it != fields.end()) {
    const int64_t min_total = std::max<int64_t>(sum, 1);
    shape.total_tokens = parse_int(
        where, "total_tokens", it->second.value, it->second.line, min_total, kMaxTokens,
        sum > 0 ? fmt::format("an integer >= {} (the sum of seq_lens)", sum)
                : std::string("an integer >= 1 (T of the buffers)"));
  } else if (sum == 0) {
    // Every sequence empty: the buffers still need T >= 1, and only total_tokens can say how many.
    fail(where, entry_line, "total_tokens",
         "an integer >= 1 when every sequence is empty (the buffers need T >= 1)", "nothing");
  }
}

// Dense form: batch + seq_len.
void parse_dense(const Where& where, const FieldMap& fields, int entry_line, ShapeSpec& shape) {
  for (const char* name : {"batch", "seq_len"}) {
    if (!fields.count(name)) {
      fail(where, entry_line, name, "an integer >= 1 (a dense shape needs batch and seq_len)",
           "nothing");
    }
  }
  const Field& batch = fields.at("batch");
  const Field& seq_len = fields.at("seq_len");
  shape.batch = parse_int(where, "batch", batch.value, batch.line, 1, kMaxTokens, "an integer >= 1");
  shape.seq_len =
      parse_int(where, "seq_len", seq_len.value, seq_len.line, 1, kMaxTokens, "an integer >= 1");
  if (shape.batch * shape.seq_len > kMaxTokens) {
    fail(where, value_line(seq_len), "seq_len",
         fmt::format("batch x seq_len <= {} (offsets are int32)", kMaxTokens),
         fmt::format("{} x {}", shape.batch, shape.seq_len));
  }
  if (auto it = fields.find("total_tokens"); it != fields.end()) {
    fail(where, it->second.line, "total_tokens", "no total_tokens in a dense (batch + seq_len) shape",
         describe(it->second.value));
  }
}

ShapeSpec parse_shape(const std::string& path, const YAML::Node& node, size_t index,
                      int list_line) {
  Where where{path, fmt::format("#{}", index + 1)};
  const int entry_line = line_of(node, list_line);
  if (!node.IsMap()) {
    fail(where, entry_line, "id", "a map (id, heads, seq_lens or batch + seq_len, ...)",
         describe(node));
  }
  // Name the shape by its id already in key errors (unknown or repeated keys) when it has one.
  if (const YAML::Node id = node["id"]; id && id.IsScalar() && is_valid_shape_id(id.Scalar())) {
    where.shape = id.Scalar();
  }
  const FieldMap fields = read_fields(
      where, node, entry_line,
      {"id", "heads", "seq_lens", "batch", "seq_len", "total_tokens", "head_dim", "key_dim",
       "value_dim", "initial_state", "final_state", "seed", "q_rows", "k_rows", "gate"},
      "");
  ShapeSpec shape;
  shape.line = entry_line;

  auto id = fields.find("id");
  if (id == fields.end()) fail(where, entry_line, "id", "a shape id", "nothing");
  shape.id = parse_string(where, "id", id->second.value, id->second.line);
  if (!is_valid_shape_id(shape.id)) {
    fail(where, value_line(id->second), "id", kShapeIdRule, describe(id->second.value));
  }
  where.shape = shape.id;

  auto heads = fields.find("heads");
  if (heads == fields.end()) fail(where, entry_line, "heads", "an integer >= 1", "nothing");
  shape.heads = parse_int(where, "heads", heads->second.value, heads->second.line, 1, 1 << 20,
                          "an integer >= 1");

  const bool packed = fields.count("seq_lens") > 0;
  const bool dense = fields.count("batch") > 0 || fields.count("seq_len") > 0;
  if (packed && dense) {
    const Field& extra = fields.count("batch") ? fields.at("batch") : fields.at("seq_len");
    fail(where, extra.line, fields.count("batch") ? "batch" : "seq_len",
         "either seq_lens or batch + seq_len", "both");
  }
  if (!packed && !dense) {
    fail(where, entry_line, "seq_lens", "a list of sequence lengths (or batch + seq_len)",
         "nothing");
  }
  if (packed) {
    parse_packed(where, fields, entry_line, shape);
  } else {
    parse_dense(where, fields, entry_line, shape);
  }

  // head_dim sets both K and V; key_dim / value_dim set one each. Mixing them is ambiguous.
  auto head_dim = fields.find("head_dim");
  if (head_dim != fields.end()) {
    for (const char* name : {"key_dim", "value_dim"}) {
      if (auto other = fields.find(name); other != fields.end()) {
        fail(where, other->second.line, name, "either head_dim or key_dim/value_dim",
             "both");
      }
    }
    shape.head_dim = parse_int(where, "head_dim", head_dim->second.value, head_dim->second.line, 1,
                               1 << 16, "an integer >= 1");
    shape.key_dim = shape.value_dim = shape.head_dim;
  }
  if (auto it = fields.find("key_dim"); it != fields.end()) {
    shape.key_dim =
        parse_int(where, "key_dim", it->second.value, it->second.line, 1, 1 << 16, "an integer >= 1");
    shape.head_dim = shape.key_dim;
  }
  if (auto it = fields.find("value_dim"); it != fields.end()) {
    shape.value_dim = parse_int(where, "value_dim", it->second.value, it->second.line, 1, 1 << 16,
                                "an integer >= 1");
  }

  if (auto it = fields.find("initial_state"); it != fields.end()) {
    shape.initial_state = parse_bool(where, "initial_state", it->second.value, it->second.line);
  }
  if (auto it = fields.find("final_state"); it != fields.end()) {
    shape.final_state = parse_bool(where, "final_state", it->second.value, it->second.line);
  }
  if (auto it = fields.find("seed"); it != fields.end()) {
    shape.seed = parse_uint64(where, "seed", it->second.value, it->second.line);
  }
  if (auto it = fields.find("q_rows"); it != fields.end()) {
    shape.q_rows = parse_row_suite(where, it->second, "q_rows");
  }
  if (auto it = fields.find("k_rows"); it != fields.end()) {
    shape.k_rows = parse_row_suite(where, it->second, "k_rows");
  }
  if (auto it = fields.find("gate"); it != fields.end()) {
    shape.gate = parse_gate(where, it->second);
  }

  // Bound the tensors so sizes never overflow (heads is the knob that multiplies everything).
  const int64_t max_dim = std::max(shape.key_dim, shape.value_dim);
  const double elements = static_cast<double>(shape.batch_rows()) *
                          static_cast<double>(shape.tokens()) * static_cast<double>(shape.heads) *
                          static_cast<double>(max_dim);
  const double state_elements = static_cast<double>(shape.num_sequences()) *
                                static_cast<double>(shape.heads) *
                                static_cast<double>(shape.key_dim) *
                                static_cast<double>(shape.value_dim);
  if (elements > static_cast<double>(kMaxElements) ||
      state_elements > static_cast<double>(kMaxElements)) {
    fail(where, value_line(heads->second), "heads",
         "at most 2^40 elements per tensor (tokens x heads x dim, sequences x heads x K x V)",
         fmt::format("{} heads", shape.heads));
  }
  return shape;
}

// Where a second document starts (or text after the first one's end), if the text has any.
// YAML::Load reads the first document and drops the rest without a word, and YAML::LoadAll loops
// forever on text after a top-level flow collection ("{a: 1},", yaml-cpp 0.7: the parser stays
// on the ',' and reports an empty document each time). So the parser itself is asked for two
// documents, never more, by a handler that only notes where each starts.
std::optional<YAML::Mark> second_document(const std::string& text) {
  struct DocumentStarts final : YAML::EventHandler {
    YAML::Mark last;
    void OnDocumentStart(const YAML::Mark& mark) override { last = mark; }
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
    void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
    void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  const std::string&) override {}
    void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                         YAML::EmitterStyle::value) override {}
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                    YAML::EmitterStyle::value) override {}
    void OnMapEnd() override {}
  };
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts starts;
  if (!parser.HandleNextDocument(starts) || !parser.HandleNextDocument(starts)) return std::nullopt;
  return starts.last;
}

}  // namespace

ShapeFile parse_shape_file(const std::string& text, const std::string& path_for_messages) {
  const std::string& path = path_for_messages;
  const Where top{path, ""};
  // yaml-cpp would read a binary file as UTF-16 text; say what it is instead.
  if (text.find('\0') != std::string::npos) {
    throw ShapeFileError(fmt::format("{}:1: not valid YAML: the file contains NUL bytes (binary?)", path));
  }
  YAML::Node document;
  try {
    document = YAML::Load(text);
    if (const std::optional<YAML::Mark> second = second_document(text)) {
      throw ShapeFileError(fmt::format(
          "{}:{}: expected one YAML document, got a second one (or more text after the first) "
          "starting here (a shape file is one map with one 'shapes:' list; merge the lists)",
          path, second->line >= 0 ? second->line + 1 : 1));
    }
  } catch (const YAML::DeepRecursion& e) {
    // yaml-cpp's own message for this is "bad file".
    throw ShapeFileError(fmt::format("{}:{}: not valid YAML: nested more than {} levels deep", path,
                                     e.mark.line >= 0 ? e.mark.line + 1 : 1, e.depth()));
  } catch (const YAML::Exception& e) {
    throw ShapeFileError(fmt::format("{}:{}: not valid YAML: {}", path,
                                     e.mark.line >= 0 ? e.mark.line + 1 : 1, e.msg));
  }
  if (!document.IsMap()) {
    fail(top, line_of(document, 1), "shapes", "a top-level map with a 'shapes:' list",
         describe(document));
  }
  const FieldMap fields = read_fields(top, document, 1, {"shapes", "description"}, "");

  ShapeFile file;
  file.path = path;
  if (auto it = fields.find("description"); it != fields.end()) {
    file.description = parse_string(top, "description", it->second.value, it->second.line);
  }
  auto shapes = fields.find("shapes");
  if (shapes == fields.end()) fail(top, 1, "shapes", "a list of shapes", "nothing");
  const YAML::Node& list = shapes->second.value;
  const int list_line = value_line(shapes->second);
  if (!list.IsSequence() || list.size() == 0) {
    fail(top, list_line, "shapes", "a non-empty list of shapes",
         list.IsSequence() ? "an empty list" : describe(list));
  }

  std::map<std::string, int> first_line_of_id;
  for (size_t i = 0; i < list.size(); ++i) {
    ShapeSpec shape = parse_shape(path, list[i], i, list_line);
    auto [seen, inserted] = first_line_of_id.emplace(shape.id, shape.line);
    if (!inserted) {
      fail(Where{path, shape.id}, shape.line, "id", "a unique id",
           fmt::format("a duplicate of the shape on line {}", seen->second));
    }
    file.shapes.push_back(std::move(shape));
  }
  return file;
}

ShapeFile load_shape_file(const std::string& path) {
  // Shape files are a few KiB; anything near this bound is not one.
  constexpr uint64_t kMaxShapeFileBytes = uint64_t{64} << 20;
  ShapeFile file = parse_shape_file(
      read_regular_file<ShapeFileError>(path, kMaxShapeFileBytes, "cannot read shape file"), path);
  for (ShapeSpec& shape : file.shapes) {
    load_gate_files(shape.id, shape.heads, shape.key_dim, shape.gate);
  }
  return file;
}

}  // namespace kda::harness
