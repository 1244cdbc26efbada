// Shape files (shapes/*.yaml): the frozen problem sizes the tools run. Schema: shapes/README.md.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kda::harness {

// The q row-scale suite of kda-forward.md §9.3 (rows scaled log-spaced over [1e-3, 1e3], plus
// all-zero rows and huge rows); `k_rows` applies the same suite to k's draw (the raw k of the raw
// path, normalized exactly for the contract's k).
struct QRowSuite {
  bool enabled = false;
  double min_scale = 1e-3;
  double max_scale = 1e3;
  std::vector<double> huge_values = {1e20, 3e38};  // max |entry| of the huge rows
  int zero_rows = 1;
};

// The gate producer's parameters for the generated inputs (kda-forward.md §3.1, §9.3):
//   gamma = lower_bound * sigmoid(exp(A_log[h]) * (raw + dt_bias[h, d]))   (natural log)
// then the chunk-local cumulative sum in log2 units. A_log and dt_bias are drawn uniformly from
// their ranges (lo == hi: a constant) or read from .npy files; raw ~ raw_mean + raw_std * randn.
// Presets (shapes/README.md): contract (the default, §9.3), mixed, long, zero.
struct GateRecipe {
  struct Range {
    double lo = 0.0, hi = 1.0;
    bool operator==(const Range&) const = default;
  };
  std::string preset = "contract";  // the preset the recipe starts from
  Range a_log{0.0, 1.0};            // A_log[h] ~ U(lo, hi)
  Range dt_bias{0.0, 1.0};          // dt_bias[h, d] ~ U(lo, hi)
  double lower_bound = -5.0;        // in [-5.9148559..., 0]
  double raw_mean = 0.0, raw_std = 1.0;
  // .npy files (paths as resolved against the shape file's directory) that replace the draws:
  // A_log [H], dt_bias [H, K] (or [H * K]). Their values, once read (load_shape_file reads them;
  // make_inputs reads them itself when a recipe came from parse_shape_file).
  std::string a_log_file, dt_bias_file;
  std::vector<float> a_log_values, dt_bias_values;

  // Whether anything differs from the preset the recipe starts from (a range, the bound, the raw
  // gate's mean or std, or given A_log / dt_bias values).
  bool customized() const;
  // "contract", "mixed", ... for an unchanged preset; else "custom(<preset>)".
  std::string label() const;
  // One line: the distributions, e.g. "A_log ~ U(0, 1), dt_bias ~ U(-12, 1), lb -5, raw ~ N(0, 1)".
  std::string describe() const;
};

// The named presets, or nullopt for an unknown name.
std::optional<GateRecipe> gate_preset(const std::string& name);
// Their names, in documentation order.
std::vector<std::string> gate_preset_names();

struct ShapeSpec {
  std::string id;
  int64_t heads = 0;
  std::vector<int64_t> seq_lens;  // packed sequences (empty for dense batches)
  int64_t batch = 0;              // dense: batch rows of seq_len tokens (then seq_lens empty)
  int64_t seq_len = 0;
  int64_t head_dim = 128;
  int64_t key_dim = 128;          // reference only when != 128
  int64_t value_dim = 128;
  int64_t total_tokens = 0;       // T of the packed buffer (>= sum of seq_lens); 0 = the sum
  bool initial_state = false;
  bool final_state = false;
  std::optional<uint64_t> seed;   // overrides the run's seed for this shape
  QRowSuite q_rows;
  QRowSuite k_rows;               // `k_rows:`, the same schema on k's draw
  GateRecipe gate;                // `gate:`; the contract generator by default
  int line = 0;                   // line in the file where the entry starts (for messages)

  bool dense() const { return batch > 0; }
  int64_t tokens() const;          // T of the buffers
  int64_t batch_rows() const;      // B of the buffers (1 when packed)
  int64_t num_sequences() const;   // N
  int64_t active_tokens() const;   // tokens that belong to a sequence: cu[N] (packed) or B*T
  bool gpu_supported() const { return key_dim == 128 && value_dim == 128; }
  std::vector<int32_t> cu_seqlens() const;  // empty for dense
};

struct ShapeFile {
  std::string path;
  std::string description;        // the optional top-level `description:`
  std::vector<ShapeSpec> shapes;
};

// Errors name the file, the line, the field and what was expected.
class ShapeFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The id rule, for shape files and for the ids a --load directory's meta.json gives: letters,
// digits, '.', '_' and '-', and neither "." nor "..", so an id is always one plain path
// component (the dump writes DIR/<id>/) and never carries a control character to a terminal.
bool is_valid_shape_id(std::string_view id);
// What the rule expects, as the messages say it.
inline constexpr const char* kShapeIdRule =
    "an id of letters, digits, '.', '_' or '-' (not '.' or '..')";

// Reads a regular file only (a FIFO, a device or a directory is refused before it is read) and
// refuses a file of more than one YAML document. It also reads the gate recipes' .npy files
// (GateRecipe::a_log_values ...), so a missing or malformed file is refused before any run;
// parse_shape_file touches no file.
ShapeFile load_shape_file(const std::string& path);
ShapeFile parse_shape_file(const std::string& text, const std::string& path_for_messages);

// Reads a recipe's .npy files (if any, and not read yet) and checks them against H and K: A_log
// [H], dt_bias [H, K] or [H * K], float32 or float64, finite, exp(A_log) finite in fp32. Throws
// ShapeFileError naming the shape and the file.
void load_gate_files(const std::string& shape_id, int64_t heads, int64_t key_dim, GateRecipe& gate);

}  // namespace kda::harness
