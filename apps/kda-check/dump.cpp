#include "dump.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "kda/harness/npy.h"
#include "kda/harness/report.h"

namespace fs = std::filesystem;

namespace kda::app {
namespace {

std::string problem_dir(const std::string& dir, const std::string& id) {
  const fs::path path = fs::path(dir) / id;
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) {
    throw std::runtime_error("--dump: cannot create directory " + path.string() + ": " +
                             ec.message());
  }
  return path.string();
}

std::vector<float> widen_bf16(const std::vector<uint16_t>& bits) {
  std::vector<float> out(bits.size());
  std::transform(bits.begin(), bits.end(), out.begin(), kda::harness::bf16_to_float);
  return out;
}

std::vector<uint16_t> narrow_bf16(const std::vector<float>& values, const std::string& file) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    bits[i] = kda::harness::float_to_bf16(values[i]);
    const float back = kda::harness::bf16_to_float(bits[i]);
    const bool same = std::memcmp(&back, &values[i], sizeof(float)) == 0 ||
                      (back != back && values[i] != values[i]);
    if (!same) {
      throw std::runtime_error(file + ": element " + std::to_string(i) + " (" +
                               std::to_string(values[i]) +
                               ") is not a bf16 value; q, k and v must hold bf16 numbers "
                               "widened to float32");
    }
  }
  return bits;
}

kda::harness::NpyArray read_required(const fs::path& dir, const std::string& name,
                                     kda::harness::NpyType type, size_t rank) {
  const fs::path file = dir / (name + ".npy");
  if (!fs::exists(file)) {
    throw std::runtime_error(file.string() + ": missing (every problem needs q k v gate beta)");
  }
  kda::harness::NpyArray array = kda::harness::read_npy(file.string());
  if (array.type != type) {
    auto dtype_name = [](kda::harness::NpyType t) {
      switch (t) {
        case kda::harness::NpyType::f32: return "float32";
        case kda::harness::NpyType::f64: return "float64";
        case kda::harness::NpyType::i32: return "int32";
      }
      return "?";
    };
    throw std::runtime_error(file.string() + ": wrong dtype " + dtype_name(array.type) +
                             " (expected " + dtype_name(type) + ")");
  }
  if (array.shape.size() != rank) {
    throw std::runtime_error(file.string() + ": expected a " + std::to_string(rank) +
                             "-d array, got " + std::to_string(array.shape.size()) + "-d");
  }
  return array;
}

void expect_shape(const fs::path& file, const std::vector<int64_t>& got,
                  const std::vector<int64_t>& want) {
  if (got != want) {
    auto str = [](const std::vector<int64_t>& s) {
      std::string out = "[";
      for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
      return out + "]";
    };
    throw std::runtime_error(file.string() + ": shape " + str(got) + ", expected " + str(want));
  }
}

LoadedProblem load_one(const fs::path& dir) {
  using kda::harness::NpyType;
  LoadedProblem loaded;
  loaded.id = dir.filename().string();
  const fs::path meta_file = dir / "meta.json";
  bool want_final_state = false;
  if (fs::exists(meta_file)) {
    std::ifstream in(meta_file);
    try {
      const nlohmann::json meta = nlohmann::json::parse(in);
      loaded.id = meta.value("id", loaded.id);
      loaded.seed = meta.value("seed", uint64_t{0});
      want_final_state = meta.value("want_final_state", false);
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error(meta_file.string() + ": not valid JSON: " + e.what());
    }
  }
  auto& in = loaded.inputs;
  const auto q = read_required(dir, "q", NpyType::f32, 4);
  in.batch = q.shape[0];
  in.tokens = q.shape[1];
  in.heads = q.shape[2];
  in.key_dim = q.shape[3];
  const auto k = read_required(dir, "k", NpyType::f32, 4);
  expect_shape(dir / "k.npy", k.shape, q.shape);
  const auto v = read_required(dir, "v", NpyType::f32, 4);
  in.value_dim = v.shape[3];
  expect_shape(dir / "v.npy", v.shape, {in.batch, in.tokens, in.heads, in.value_dim});
  const auto gate = read_required(dir, "gate", NpyType::f32, 4);
  expect_shape(dir / "gate.npy", gate.shape, q.shape);
  const auto beta = read_required(dir, "beta", NpyType::f32, 3);
  expect_shape(dir / "beta.npy", beta.shape, {in.batch, in.tokens, in.heads});
  in.q = narrow_bf16(q.as_f32(), (dir / "q.npy").string());
  in.k = narrow_bf16(k.as_f32(), (dir / "k.npy").string());
  in.v = narrow_bf16(v.as_f32(), (dir / "v.npy").string());
  in.gate = gate.as_f32();
  in.beta = beta.as_f32();
  if (fs::exists(dir / "cu_seqlens.npy")) {
    const auto cu = read_required(dir, "cu_seqlens", NpyType::i32, 1);
    in.cu_seqlens = cu.as_i32();
  }
  if (fs::exists(dir / "h0.npy")) {
    const auto h0 = read_required(dir, "h0", NpyType::f32, 4);
    expect_shape(dir / "h0.npy", h0.shape,
                 {in.num_states(), in.heads, in.key_dim, in.value_dim});
    in.initial_state = h0.as_f32();
  }
  in.want_final_state = want_final_state;
  try {
    in.to_reference().check();
  } catch (const std::exception& e) {
    throw std::runtime_error(dir.string() + ": inconsistent problem: " + e.what());
  }
  return loaded;
}

}  // namespace

void dump_inputs(const std::string& dir, const std::string& id, uint64_t seed,
                 const kda::harness::HostInputs& in) {
  const std::string out = problem_dir(dir, id);
  const std::vector<int64_t> qk_shape = {in.batch, in.tokens, in.heads, in.key_dim};
  const std::vector<int64_t> v_shape = {in.batch, in.tokens, in.heads, in.value_dim};
  kda::harness::write_npy(out + "/q.npy", widen_bf16(in.q), qk_shape);
  kda::harness::write_npy(out + "/k.npy", widen_bf16(in.k), qk_shape);
  kda::harness::write_npy(out + "/v.npy", widen_bf16(in.v), v_shape);
  kda::harness::write_npy(out + "/gate.npy", in.gate, qk_shape);
  kda::harness::write_npy(out + "/beta.npy", in.beta, {in.batch, in.tokens, in.heads});
  if (!in.cu_seqlens.empty()) {
    kda::harness::write_npy(out + "/cu_seqlens.npy", in.cu_seqlens,
                            {static_cast<int64_t>(in.cu_seqlens.size())});
  }
  if (!in.initial_state.empty()) {
    kda::harness::write_npy(out + "/h0.npy", in.initial_state,
                            {in.num_states(), in.heads, in.key_dim, in.value_dim});
  }
  nlohmann::json meta = {{"id", id},
                         {"seed", seed},
                         {"batch", in.batch},
                         {"tokens", in.tokens},
                         {"heads", in.heads},
                         {"key_dim", in.key_dim},
                         {"value_dim", in.value_dim},
                         {"want_final_state", in.want_final_state},
                         {"gate", "cumulative log2, chunk-local (64)"},
                         {"scale", "1/sqrt(key_dim)"}};
  kda::harness::write_text_file_atomic(out + "/meta.json", meta.dump(2) + "\n", true);
}

void dump_tensor(const std::string& dir, const std::string& id, const std::string& name,
                 const std::vector<float>& values, const std::vector<int64_t>& shape) {
  kda::harness::write_npy(problem_dir(dir, id) + "/" + name + ".npy", values, shape);
}

void dump_tensor(const std::string& dir, const std::string& id, const std::string& name,
                 const std::vector<double>& values, const std::vector<int64_t>& shape) {
  kda::harness::write_npy(problem_dir(dir, id) + "/" + name + ".npy", values, shape);
}

std::vector<LoadedProblem> load_problems(const std::string& dir) {
  const fs::path root(dir);
  if (!fs::is_directory(root)) {
    throw std::runtime_error("--load " + dir + ": not a directory");
  }
  std::vector<LoadedProblem> problems;
  if (fs::exists(root / "q.npy")) {
    problems.push_back(load_one(root));
    return problems;
  }
  std::vector<fs::path> subdirs;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (entry.is_directory() && fs::exists(entry.path() / "q.npy")) subdirs.push_back(entry.path());
  }
  std::sort(subdirs.begin(), subdirs.end());
  for (const auto& sub : subdirs) problems.push_back(load_one(sub));
  if (problems.empty()) {
    throw std::runtime_error("--load " + dir +
                             ": no problem found (expected DIR/q.npy or DIR/<id>/q.npy)");
  }
  return problems;
}

}  // namespace kda::app
