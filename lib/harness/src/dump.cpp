// --dump writer and --load reader (dump.h).
#include "kda/harness/dump.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "kda/harness/files.h"
#include "kda/harness/report.h"
#include "kda/harness/shapes.h"
#include "kda/ref/reference.h"

namespace fs = std::filesystem;

namespace kda::harness {

namespace {

constexpr const char* kMeta = "meta.json";
// What meta.json says about the gate and the scale; a dump that says otherwise holds numbers in
// another convention, which this reader would misread.
constexpr const char* kGateConvention = "cumulative log2, chunk-local (64)";
constexpr const char* kScaleConvention = "1/sqrt(key_dim)";
constexpr uint64_t kMaxMetaBytes = uint64_t{1} << 20;  // ours are ~400 bytes
constexpr int kGateChunk = 64;                         // the kernels' chunk size
constexpr double kMaxLog2Decay = 128.0 / 15.0;         // kda-forward.md §3.2

// The input files of a problem, in the order they are read.
constexpr std::string_view kRequiredInputs[] = {"q.npy", "k.npy", "v.npy", "gate.npy", "beta.npy"};
constexpr std::string_view kOptionalInputs[] = {"cu_seqlens.npy", "h0.npy"};
// The raw inputs of Path::raw (HostInputs::raw_*), all five or none (a dump written before them
// has none), with meta.json's "lower_bound".
constexpr std::string_view kRawInputs[] = {"k_raw.npy", "gate_raw.npy", "beta_logits.npy",
                                           "a_log.npy", "dt_bias.npy"};
constexpr const char* kRawInputList =
    "k_raw.npy, gate_raw.npy, beta_logits.npy, a_log.npy, dt_bias.npy";
// exp(A_log) must stay finite in fp32 (the kernels compute it there): A_log < 88.72.
constexpr double kMaxALog = 88.0;

template <size_t N>
bool is_one_of(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

bool is_input_file(std::string_view name) {
  return is_one_of(kRequiredInputs, name) || is_one_of(kOptionalInputs, name) ||
         is_one_of(kRawInputs, name);
}

// out_*, ht_*, q_hat_* with letters, digits and '_' after the prefix: every output name kda-check
// writes, and nothing a user is likely to keep beside them.
bool is_output_name(std::string_view name) {
  std::string_view rest;
  for (std::string_view prefix : {"out_", "ht_", "q_hat_"}) {
    if (name.substr(0, prefix.size()) == prefix) rest = name.substr(prefix.size());
  }
  if (rest.empty()) return false;
  return std::all_of(rest.begin(), rest.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

bool is_dump_file(std::string_view name) {
  if (name == kMeta || is_input_file(name)) return true;
  return name.size() > 4 && name.substr(name.size() - 4) == ".npy" &&
         is_output_name(name.substr(0, name.size() - 4));
}

// dir/<id>, refusing an id that is not one plain path component (the shape-id rule: no '/', not
// "." or ".."), so no id can name a path outside the dump.
fs::path problem_path(const std::string& dir, const std::string& id) {
  if (!is_valid_shape_id(id)) {
    throw DumpError(fmt::format("--dump: shape id '{}' is not {} and cannot name a directory",
                                escape_controls(id), kShapeIdRule));
  }
  return fs::path(dir) / id;
}

fs::path make_problem_dir(const std::string& dir, const std::string& id) {
  const fs::path path = problem_path(dir, id);
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) {
    throw DumpError(fmt::format("--dump: cannot create directory {}: {}", path.string(),
                                ec.message()));
  }
  return path;
}

// Removes the regular files a dump writes from `path` (the problem is about to be written again):
// nothing else, and nothing recursively.
void remove_dump_files(const fs::path& path) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    const std::string name = entry.path().filename().string();
    struct stat info {};
    if (!is_dump_file(name) || ::lstat(entry.path().c_str(), &info) != 0 ||
        !S_ISREG(info.st_mode)) {
      continue;  // not ours; a FIFO or link under our name is refused by the writer
    }
    if (::unlink(entry.path().c_str()) != 0) {
      throw DumpError(fmt::format("--dump: cannot remove the stale {}: {}", entry.path().string(),
                                  std::strerror(errno)));
    }
  }
  if (ec) throw DumpError(fmt::format("--dump: cannot read {}: {}", path.string(), ec.message()));
}

std::vector<float> widen_bf16(const std::vector<uint16_t>& bits) {
  std::vector<float> out(bits.size());
  std::transform(bits.begin(), bits.end(), out.begin(), bf16_to_float);
  return out;
}

// `rule`: what the file must hold, for the message.
std::vector<uint16_t> narrow_bf16(const std::vector<float>& values, const std::string& file,
                                  const char* rule) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    bits[i] = float_to_bf16(values[i]);
    const float back = bf16_to_float(bits[i]);
    const bool same = std::memcmp(&back, &values[i], sizeof(float)) == 0 ||
                      (back != back && values[i] != values[i]);
    if (!same) {
      throw DumpError(fmt::format("{}: element {} ({:.9g}) is not a bf16 value; {}", file, i,
                                  values[i], rule));
    }
  }
  return bits;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ","));
}

// --- meta.json --------------------------------------------------------------------------------

struct Meta {
  std::string id;
  uint64_t seed = 0;
  int64_t batch = 0, tokens = 0, heads = 0, key_dim = 0, value_dim = 0, sequences = 0;
  bool want_final_state = false;
  std::set<std::string, std::less<>> inputs;
  std::string gate_recipe = "loaded";  // the generator's recipe, when the dump recorded it
  bool raw_inputs = false;             // 'inputs' lists the raw files (then lower_bound is set)
  double lower_bound = 0.0;
};

class MetaReader {
 public:
  MetaReader(const nlohmann::json& doc, std::string file) : doc_(doc), file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw DumpError(fmt::format("{}: {}", file_, what));
  }

  const nlohmann::json& field(const char* key) const {
    const auto it = doc_.find(key);
    if (it == doc_.end()) {
      fail(fmt::format("no '{}' (written by an older kda-check, or edited?); dump the problem "
                       "again with kda-check --dump",
                       key));
    }
    return *it;
  }

  std::string got(const nlohmann::json& value) const {
    std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (text.size() > 60) text = text.substr(0, 57) + "...";
    return escape_controls(text);
  }

  int64_t size(const char* key, int64_t min_value) const {
    const nlohmann::json& value = field(key);
    constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
    if (!value.is_number_integer() || value.get<int64_t>() < min_value ||
        (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(kMax)) ||
        value.get<int64_t>() > kMax) {
      fail(fmt::format("'{}' must be an integer in [{}, {}], got {}", key, min_value, kMax,
                       got(value)));
    }
    return value.get<int64_t>();
  }

  // The raw inputs come together: all five files with the gate's lower bound, or none of them
  // (a dump written before they existed).
  void read_raw_inputs(Meta& meta) const {
    std::vector<std::string_view> listed, unlisted;
    for (std::string_view file : kRawInputs) {
      (meta.inputs.count(file) ? listed : unlisted).push_back(file);
    }
    const auto bound = doc_.find("lower_bound");
    if (listed.empty()) {
      if (bound != doc_.end()) {
        fail("'lower_bound' is given but 'inputs' lists no raw input (" +
             std::string(kRawInputList) + "): it is the raw gate's bound; remove it, or dump the "
             "problem again");
      }
      return;
    }
    if (!unlisted.empty()) {
      fail(fmt::format("'inputs' lists {} but not {}; the raw inputs come together ({}): dump "
                       "the problem again",
                       listed.front(), unlisted.front(), kRawInputList));
    }
    if (bound == doc_.end()) {
      fail("no 'lower_bound' (the raw gate's bound, written with the raw inputs " +
           std::string(kRawInputList) + "); dump the problem again with kda-check --dump");
    }
    // Written so that NaN fails too; JSON has no inf.
    if (!bound->is_number() ||
        !(bound->get<double>() >= kda::ref::kMinGateLowerBound && bound->get<double>() <= 0.0)) {
      fail("'lower_bound' must be a number in [-5.9148559407783, 0] (the bounded-gate contract, "
           "kda-forward.md §3.1), got " + got(*bound));
    }
    meta.raw_inputs = true;
    meta.lower_bound = bound->get<double>();
  }

  Meta read() const {
    if (!doc_.is_object()) fail("expected a JSON object, got " + got(doc_));
    Meta meta;
    const nlohmann::json& id = field("id");
    if (!id.is_string() || !is_valid_shape_id(id.get<std::string>())) {
      fail(fmt::format("'id' must be {}, got {}", kShapeIdRule, got(id)));
    }
    meta.id = id.get<std::string>();
    const nlohmann::json& seed = field("seed");
    if (!seed.is_number_unsigned()) {
      fail("'seed' must be an unsigned 64-bit integer, got " + got(seed));
    }
    meta.seed = seed.get<uint64_t>();
    meta.batch = size("batch", 1);
    meta.tokens = size("tokens", 1);
    meta.heads = size("heads", 1);
    meta.key_dim = size("key_dim", 1);
    meta.value_dim = size("value_dim", 1);
    meta.sequences = size("sequences", 1);
    const nlohmann::json& final_state = field("want_final_state");
    if (!final_state.is_boolean()) {
      fail("'want_final_state' must be true or false, got " + got(final_state));
    }
    meta.want_final_state = final_state.get<bool>();
    // Optional (reports only): the gate recipe the inputs were generated with.
    if (const auto recipe = doc_.find("gate_recipe"); recipe != doc_.end()) {
      const std::string text = recipe->is_string() ? recipe->get<std::string>() : std::string();
      const bool printable = recipe->is_string() && !text.empty() && text.size() <= 64 &&
                             std::all_of(text.begin(), text.end(),
                                         [](char c) { return c >= 0x20 && c < 0x7f; });
      if (!printable) fail("'gate_recipe' must be a short printable string, got " + got(*recipe));
      meta.gate_recipe = text;
    }
    const nlohmann::json& inputs = field("inputs");
    if (!inputs.is_array()) fail("'inputs' must be a list of file names, got " + got(inputs));
    for (const nlohmann::json& name : inputs) {
      if (!name.is_string() || !is_input_file(name.get<std::string>())) {
        fail(fmt::format("'inputs' lists {}; an input is one of q.npy, k.npy, v.npy, gate.npy, "
                         "beta.npy, cu_seqlens.npy, h0.npy, {}",
                         got(name), kRawInputList));
      }
      if (!meta.inputs.insert(name.get<std::string>()).second) {
        fail(fmt::format("'inputs' lists {} twice", got(name)));
      }
    }
    for (std::string_view required : kRequiredInputs) {
      if (!meta.inputs.count(required)) {
        fail(fmt::format("'inputs' does not list {}; every problem has q k v gate beta", required));
      }
    }
    read_raw_inputs(meta);
    const std::array<std::pair<const char*, const char*>, 2> conventions = {
        {{"gate", kGateConvention}, {"scale", kScaleConvention}}};
    for (const auto& [key, expected] : conventions) {
      const auto it = doc_.find(key);
      if (it != doc_.end() && (!it->is_string() || it->get<std::string>() != expected)) {
        fail(fmt::format("'{}' is {}; this reader takes '{}' only", key, got(*it), expected));
      }
    }
    return meta;
  }

 private:
  const nlohmann::json& doc_;
  std::string file_;
};

Meta read_meta(ProblemFiles& files) {
  const std::string file = files.name(kMeta);
  if (!files.has(kMeta)) {
    throw DumpError(fmt::format("{}: missing (every dumped problem has one; dump it again with "
                                "kda-check --dump)",
                                file));
  }
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(files.read_text(kMeta, kMaxMetaBytes));
  } catch (const nlohmann::json::exception& e) {
    throw DumpError(fmt::format("{}: not valid JSON: {}", file, escape_controls(e.what())));
  }
  return MetaReader(doc, file).read();
}

// --- arrays ------------------------------------------------------------------------------------

class ArrayReader {
 public:
  explicit ArrayReader(ProblemFiles& files) : files_(files) {}

  // Reads `file` and checks its dtype and shape against what meta.json says (`what`: the meta
  // fields the shape comes from, with their values).
  NpyArray read(std::string_view file, NpyType type, const std::vector<int64_t>& shape,
                const std::string& what) {
    const std::string name = files_.name(file);
    NpyArray array = files_.read_npy(file);
    if (array.type != type) {
      throw DumpError(fmt::format("{}: wrong dtype {} (expected {})", name, to_string(array.type),
                                  to_string(type)));
    }
    if (array.shape != shape) {
      throw DumpError(fmt::format("{}: shape {}, expected {} ({} in {})", name,
                                  shape_text(array.shape), shape_text(shape), what,
                                  files_.name(kMeta)));
    }
    return array;
  }

 private:
  ProblemFiles& files_;
};

// The file set must be the one meta.json lists: a missing optional file would silently turn
// the problem into another (dense instead of packed, zero state instead of h0), an unlisted one
// is most likely a stale file of another problem.
void check_file_set(ProblemFiles& files, const Meta& meta) {
  for (std::string_view file : kRequiredInputs) {
    if (!files.has(file)) {
      throw DumpError(fmt::format("{}: missing (every problem needs q k v gate beta)",
                                  files.name(file)));
    }
  }
  std::vector<std::string_view> optional(std::begin(kOptionalInputs), std::end(kOptionalInputs));
  optional.insert(optional.end(), std::begin(kRawInputs), std::end(kRawInputs));
  for (std::string_view file : optional) {
    const bool listed = meta.inputs.count(file) > 0;
    if (listed && !files.has(file)) {
      throw DumpError(fmt::format("{}: missing, but {} lists it in 'inputs'", files.name(file),
                                  files.name(kMeta)));
    }
    if (!listed && files.has(file)) {
      throw DumpError(fmt::format("{}: not one of the inputs {} lists (a stale file of another "
                                  "problem?); remove it, or dump the problem again",
                                  files.name(file), files.name(kMeta)));
    }
  }
}

}  // namespace

// --- writer ------------------------------------------------------------------------------------

void check_dump_dir(const std::string& dir, bool overwrite) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir, ec)) {
    throw DumpError(fmt::format("--dump {}: cannot create the directory{}", dir,
                                ec ? ": " + ec.message() : std::string(": a file is in the way")));
  }
  if (overwrite) return;
  std::vector<std::string> entries;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    entries.push_back(entry.path().filename().string());
  }
  if (ec) {
    throw DumpError(fmt::format("--dump {}: cannot read the directory: {}", dir, ec.message()));
  }
  if (entries.empty()) return;
  std::sort(entries.begin(), entries.end());
  if (entries.size() > 3) entries.resize(3);
  throw DumpError(fmt::format(
      "--dump {}: the directory is not empty (it holds {}{}); pass --force to write the problems "
      "into it anyway (each problem directory written is first emptied of the files a dump "
      "writes; nothing else is removed)",
      dir, escape_controls(fmt::format("'{}'", fmt::join(entries, "', '"))),
      entries.size() == 3 ? ", ..." : ""));
}

void dump_inputs(const std::string& dir, const std::string& id, uint64_t seed,
                 const HostInputs& in) {
  const fs::path out = make_problem_dir(dir, id);
  remove_dump_files(out);
  const std::vector<int64_t> qk_shape = {in.batch, in.tokens, in.heads, in.key_dim};
  const std::vector<int64_t> v_shape = {in.batch, in.tokens, in.heads, in.value_dim};
  nlohmann::json inputs = {"q.npy", "k.npy", "v.npy", "gate.npy", "beta.npy"};
  write_npy((out / "q.npy").string(), widen_bf16(in.q), qk_shape);
  write_npy((out / "k.npy").string(), widen_bf16(in.k), qk_shape);
  write_npy((out / "v.npy").string(), widen_bf16(in.v), v_shape);
  write_npy((out / "gate.npy").string(), in.gate, qk_shape);
  write_npy((out / "beta.npy").string(), in.beta, {in.batch, in.tokens, in.heads});
  if (!in.cu_seqlens.empty()) {
    write_npy((out / "cu_seqlens.npy").string(), in.cu_seqlens,
              {static_cast<int64_t>(in.cu_seqlens.size())});
    inputs.push_back("cu_seqlens.npy");
  }
  if (!in.initial_state.empty()) {
    write_npy((out / "h0.npy").string(), in.initial_state,
              {in.num_states(), in.heads, in.key_dim, in.value_dim});
    inputs.push_back("h0.npy");
  }
  if (in.has_raw_inputs()) {
    write_npy((out / "k_raw.npy").string(), widen_bf16(in.raw_k), qk_shape);
    write_npy((out / "gate_raw.npy").string(), widen_bf16(in.raw_gate), qk_shape);
    write_npy((out / "beta_logits.npy").string(), widen_bf16(in.beta_logits),
              {in.batch, in.tokens, in.heads});
    write_npy((out / "a_log.npy").string(), in.a_log, {in.heads});
    write_npy((out / "dt_bias.npy").string(), in.dt_bias, {in.heads, in.key_dim});
    for (std::string_view file : kRawInputs) inputs.push_back(std::string(file));
  }
  nlohmann::json meta = {{"id", id},
                               {"seed", seed},
                               {"batch", in.batch},
                               {"tokens", in.tokens},
                               {"heads", in.heads},
                               {"key_dim", in.key_dim},
                               {"value_dim", in.value_dim},
                               {"sequences", in.num_states()},
                               {"want_final_state", in.want_final_state},
                               {"inputs", inputs},
                               {"gate", kGateConvention},
                               {"gate_recipe", in.gate_recipe},
                               {"scale", kScaleConvention}};
  // The fp32 bound the raw path passes (a double holds it exactly).
  if (in.has_raw_inputs()) meta["lower_bound"] = static_cast<double>(in.lower_bound);
  write_text_file_atomic((out / kMeta).string(), meta.dump(2) + "\n", true);
}

namespace {

template <class T>
void dump_tensor_as(const std::string& dir, const std::string& id, const std::string& name,
                    const std::vector<T>& values, const std::vector<int64_t>& shape) {
  if (!is_output_name(name)) {
    // A programming error: remove_dump_files would not know to remove it on the next dump.
    throw std::logic_error("dump_tensor: '" + name + "' is not an out_*, ht_* or q_hat_* name");
  }
  write_npy((make_problem_dir(dir, id) / (name + ".npy")).string(), values, shape);
}

}  // namespace

void dump_tensor(const std::string& dir, const std::string& id, const std::string& name,
                 const std::vector<float>& values, const std::vector<int64_t>& shape) {
  dump_tensor_as(dir, id, name, values, shape);
}

void dump_tensor(const std::string& dir, const std::string& id, const std::string& name,
                 const std::vector<double>& values, const std::vector<int64_t>& shape) {
  dump_tensor_as(dir, id, name, values, shape);
}

// --- reader ------------------------------------------------------------------------------------

std::string ProblemFiles::name(std::string_view file) const {
  return (fs::path(dir_) / file).string();
}

bool DirectoryFiles::has(std::string_view file) const {
  struct stat info {};
  return ::lstat(name(file).c_str(), &info) == 0;  // whatever it is: the readers refuse non-files
}

std::string DirectoryFiles::read_text(std::string_view file, uint64_t max_bytes) {
  return read_regular_file<DumpError>(name(file), max_bytes, "cannot read");
}

NpyArray DirectoryFiles::read_npy(std::string_view file) {
  return kda::harness::read_npy(name(file));
}

bool MemoryFiles::has(std::string_view file) const { return files_.find(file) != files_.end(); }

std::string MemoryFiles::read_text(std::string_view file, uint64_t max_bytes) {
  const auto it = files_.find(file);
  if (it == files_.end()) throw DumpError(name(file) + ": cannot read: No such file or directory");
  if (it->second.size() > max_bytes) {
    throw DumpError(fmt::format("{}: cannot read: {} bytes, more than the {} this reader accepts",
                                name(file), it->second.size(), max_bytes));
  }
  return it->second;
}

NpyArray MemoryFiles::read_npy(std::string_view file) {
  const auto it = files_.find(file);
  if (it == files_.end()) throw NpyError(name(file) + ": cannot open: No such file or directory");
  return parse_npy(it->second, name(file));
}

void check_gate_contract(const HostInputs& in, const std::string& file) {
  const int64_t T = in.tokens, H = in.heads, K = in.key_dim;
  // (batch row, first token, end token) of every sequence: batch rows when dense.
  std::vector<std::array<int64_t, 3>> spans;
  if (in.cu_seqlens.empty()) {
    for (int64_t b = 0; b < in.batch; ++b) spans.push_back({b, 0, T});
  } else {
    for (size_t s = 0; s + 1 < in.cu_seqlens.size(); ++s) {
      spans.push_back({0, in.cu_seqlens[s], in.cu_seqlens[s + 1]});
    }
  }
  for (const auto& [b, start, end] : spans) {
    for (int64_t t = start; t < end; ++t) {
      const bool chunk_start = (t - start) % kGateChunk == 0;
      for (int64_t h = 0; h < H; ++h) {
        const size_t row = static_cast<size_t>(((b * T + t) * H + h) * K);
        for (int64_t c = 0; c < K; ++c) {
          const double g = in.gate[row + static_cast<size_t>(c)];
          const size_t above = row - static_cast<size_t>(H * K) + static_cast<size_t>(c);
          const double prev = chunk_start ? 0.0 : in.gate[above];
          const double decay = g - prev;
          // The cumulative sum is rounded to fp32 at every token: allow two ulps of it.
          const double slack = std::ldexp(std::max(std::abs(g), std::abs(prev)), -22);
          if (decay <= 0.0 && decay >= -kMaxLog2Decay - slack) continue;
          const std::string values =
              chunk_start ? fmt::format("G = {:.9g} at the first token of a chunk", g)
                          : fmt::format("G[t] = {:.9g} after G[t-1] = {:.9g}", g, prev);
          throw DumpError(fmt::format(
              "{}: element [{},{},{},{}] (token {} of its sequence): per-token log2 decay {:.9g} "
              "({}) is outside [-128/15, 0] = [-8.5333, 0], the bounded-gate contract "
              "(kda-forward.md §3: cumulative log2 gate, chunks of 64 tokens from each sequence "
              "start)",
              file, b, t, h, c, t - start, decay, values));
        }
      }
    }
  }
}

void check_raw_gate(const HostInputs& in, const std::string& raw_file,
                    const std::string& gate_file) {
  std::vector<float> raw(in.raw_gate.size());
  std::transform(in.raw_gate.begin(), in.raw_gate.end(), raw.begin(), bf16_to_float);
  const std::vector<float> produced = kda::ref::gate_cumsum<double>(
      raw, in.a_log, in.dt_bias, in.batch, in.tokens, in.heads, in.key_dim, in.lower_bound,
      in.cu_seqlens, kGateChunk);
  const int64_t T = in.tokens, H = in.heads, K = in.key_dim;
  const int64_t active_end = in.cu_seqlens.empty() ? T : in.cu_seqlens.back();
  for (int64_t b = 0; b < in.batch; ++b) {
    for (int64_t t = 0; t < active_end; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t c = 0; c < K; ++c) {
          const size_t i = static_cast<size_t>(((b * T + t) * H + h) * K + c);
          const double want = produced[i], have = in.gate[i];
          // The bound in fp32 (the dump's) instead of the recipe's fp64 one moves G by <= 2^-24
          // relative, and G is rounded to fp32: allow 2^-21 relative (and the smallest normal
          // floats, where a relative slack means nothing).
          const double slack =
              0x1p-21 * std::max(std::abs(want), std::abs(have)) + 0x1p-124;
          if (std::abs(want - have) <= slack) continue;
          throw DumpError(fmt::format(
              "{}: element [{},{},{},{}]: the raw gate (with A_log, dt_bias and lower_bound {:.9g}) "
              "gives the cumulative log2 gate {:.9g}, but {} holds {:.9g}: the raw inputs are not "
              "the ones the gate was made from; dump the problem again (or edit both files)",
              raw_file, b, t, h, c, in.lower_bound, want, gate_file, have));
        }
      }
    }
  }
}

DumpedProblem parse_problem(ProblemFiles& files) {
  const Meta meta = read_meta(files);
  check_file_set(files, meta);

  DumpedProblem loaded;
  loaded.id = meta.id;
  loaded.seed = meta.seed;
  HostInputs& in = loaded.inputs;
  in.batch = meta.batch;
  in.tokens = meta.tokens;
  in.heads = meta.heads;
  in.key_dim = meta.key_dim;
  in.value_dim = meta.value_dim;
  in.want_final_state = meta.want_final_state;
  in.gate_recipe = meta.gate_recipe;

  ArrayReader arrays(files);
  const std::vector<int64_t> qk = {meta.batch, meta.tokens, meta.heads, meta.key_dim};
  const std::string bth =
      fmt::format("batch {}, tokens {}, heads {}", meta.batch, meta.tokens, meta.heads);
  const std::string qk_what = fmt::format("{}, key_dim {}", bth, meta.key_dim);
  auto bf16_input = [&](const char* file, const std::vector<int64_t>& shape,
                        const std::string& what,
                        const char* rule = "q, k and v must hold bf16 numbers widened to float32") {
    return narrow_bf16(arrays.read(file, NpyType::f32, shape, what).as_f32(), files.name(file),
                       rule);
  };
  in.q = bf16_input("q.npy", qk, qk_what);
  in.k = bf16_input("k.npy", qk, qk_what);
  in.v = bf16_input("v.npy", {meta.batch, meta.tokens, meta.heads, meta.value_dim},
                    fmt::format("{}, value_dim {}", bth, meta.value_dim));
  in.gate = arrays.read("gate.npy", NpyType::f32, qk, qk_what).as_f32();
  in.beta = arrays.read("beta.npy", NpyType::f32, {meta.batch, meta.tokens, meta.heads}, bth)
                .as_f32();
  if (meta.inputs.count("cu_seqlens.npy")) {
    if (meta.batch != 1) {
      throw DumpError(fmt::format("{}: packed sequences (cu_seqlens.npy) need batch 1, {} has "
                                  "batch {}",
                                  files.name("cu_seqlens.npy"), files.name(kMeta), meta.batch));
    }
    in.cu_seqlens = arrays
                        .read("cu_seqlens.npy", NpyType::i32, {meta.sequences + 1},
                              fmt::format("sequences + 1, sequences {}", meta.sequences))
                        .as_i32();
  } else if (meta.sequences != meta.batch) {
    throw DumpError(fmt::format("{}: 'sequences' is {} but there is no cu_seqlens.npy: a dense "
                                "problem has one sequence per batch row ({})",
                                files.name(kMeta), meta.sequences, meta.batch));
  }
  if (meta.inputs.count("h0.npy")) {
    const std::vector<int64_t> shape = {meta.sequences, meta.heads, meta.key_dim, meta.value_dim};
    in.initial_state = arrays
                           .read("h0.npy", NpyType::f32, shape,
                                 fmt::format("sequences {}, heads {}, key_dim {}, value_dim {}",
                                             meta.sequences, meta.heads, meta.key_dim,
                                             meta.value_dim))
                           .as_f32();
  }
  if (meta.raw_inputs) {
    constexpr const char* kRawRule =
        "k_raw, gate_raw and beta_logits must hold bf16 numbers widened to float32";
    in.raw_k = bf16_input("k_raw.npy", qk, qk_what, kRawRule);
    in.raw_gate = bf16_input("gate_raw.npy", qk, qk_what, kRawRule);
    in.beta_logits = bf16_input("beta_logits.npy", {meta.batch, meta.tokens, meta.heads}, bth,
                                kRawRule);
    // A_log and dt_bias as the shape files' .npy are checked: finite, exp(A_log) finite in fp32.
    auto parameters = [&](const char* file, const std::vector<int64_t>& shape,
                          const std::string& what, bool a_log) {
      std::vector<float> values = arrays.read(file, NpyType::f32, shape, what).as_f32();
      for (size_t i = 0; i < values.size(); ++i) {
        if (!std::isfinite(values[i]) || (a_log && values[i] > kMaxALog)) {
          throw DumpError(fmt::format("{}: element {} is {}; expected finite values{}",
                                      files.name(file), i, values[i],
                                      a_log ? " <= 88 (exp(A_log) must be finite in fp32)" : ""));
        }
      }
      return values;
    };
    in.a_log = parameters("a_log.npy", {meta.heads}, fmt::format("heads {}", meta.heads), true);
    in.dt_bias = parameters("dt_bias.npy", {meta.heads, meta.key_dim},
                            fmt::format("heads {}, key_dim {}", meta.heads, meta.key_dim), false);
    in.lower_bound = kernel_lower_bound(meta.lower_bound);
  }
  try {
    in.to_reference().check();
  } catch (const std::exception& e) {
    throw DumpError(fmt::format("{}: inconsistent problem: {}", files.name(""), e.what()));
  }
  check_gate_contract(in, files.name("gate.npy"));
  if (in.has_raw_inputs()) {
    check_raw_gate(in, files.name("gate_raw.npy"), files.name("gate.npy"));
  }
  return loaded;
}

std::vector<DumpedProblem> load_problems(const std::string& dir) {
  const fs::path root(dir);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) throw DumpError("--load " + dir + ": not a directory");
  auto holds_problem = [](const fs::path& path) {
    struct stat info {};
    return ::lstat((path / kMeta).c_str(), &info) == 0 ||
           ::lstat((path / "q.npy").c_str(), &info) == 0;
  };
  std::vector<fs::path> dirs;
  if (holds_problem(root)) {
    dirs.push_back(root);
  } else {
    for (const auto& entry : fs::directory_iterator(root, ec)) {
      if (entry.is_directory() && holds_problem(entry.path())) dirs.push_back(entry.path());
    }
    if (ec) throw DumpError(fmt::format("--load {}: cannot read: {}", dir, ec.message()));
    std::sort(dirs.begin(), dirs.end());
  }
  std::vector<DumpedProblem> problems;
  std::map<std::string, fs::path> seen;
  for (const fs::path& path : dirs) {
    DirectoryFiles files(path.string());
    problems.push_back(parse_problem(files));
    const auto [it, fresh] = seen.emplace(problems.back().id, path);
    if (!fresh) {
      throw DumpError(fmt::format("--load {}: {} and {} both hold problem '{}' (meta.json 'id')",
                                  dir, it->second.string(), path.string(), it->first));
    }
  }
  if (problems.empty()) {
    throw DumpError("--load " + dir + ": no problem found (expected DIR/meta.json or "
                    "DIR/<id>/meta.json, with q.npy ...)");
  }
  return problems;
}

}  // namespace kda::harness
