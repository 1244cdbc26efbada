// .npy interchange for kda-check: --dump DIR writes each problem's inputs and outputs under
// DIR/<id>/, --load DIR runs on such inputs instead of generating them. The format
// (docs/checking.md): q k v gate beta [cu_seqlens] [h0] .npy (bf16 values widened exactly to
// float32; int32 offsets), the raw inputs k_raw gate_raw beta_logits (bf16 widened) a_log dt_bias
// (fp32) .npy, meta.json (id, seed, dims, sequences, want_final_state, the raw gate's
// lower_bound and the list of input files), and the outputs a run computed (out_*, ht_*,
// q_hat_* .npy). A dump written before the raw inputs existed loads without them.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kda/harness/inputs.h"
#include "kda/harness/npy.h"

namespace kda::harness {

// A --dump target or a --load problem is refused; the message names the file and what is wrong.
class DumpError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// --dump DIR, before the run: creates DIR when it is missing. An existing DIR must be empty
// unless overwrite is true: then every problem directory a dump writes is first emptied of the
// files a dump writes (never anything else), so no problem keeps another's stale files.
void check_dump_dir(const std::string& dir, bool overwrite);

// Writes q k v gate beta [cu_seqlens] [h0], the raw inputs (when the inputs have them) and
// meta.json under dir/<id>/, after removing the files a dump writes from that directory. `id` must satisfy the shape-id rule (one plain path
// component).
void dump_inputs(const std::string& dir, const std::string& id, uint64_t seed,
                 const HostInputs& inputs);

// Writes one computed tensor as dir/<id>/<name>.npy. `name` is out_*, ht_* or q_hat_* (letters,
// digits, '_'): the names check_dump_dir and dump_inputs know to remove.
void dump_tensor(const std::string& dir, const std::string& id, const std::string& name,
                 const std::vector<float>& values, const std::vector<int64_t>& shape);
void dump_tensor(const std::string& dir, const std::string& id, const std::string& name,
                 const std::vector<double>& values, const std::vector<int64_t>& shape);

struct DumpedProblem {
  std::string id;
  uint64_t seed = 0;
  HostInputs inputs;
};

// Where one problem's files come from: a directory, or memory (tests, the fuzz target). `dir`
// names them in messages.
class ProblemFiles {
 public:
  explicit ProblemFiles(std::string dir) : dir_(std::move(dir)) {}
  virtual ~ProblemFiles() = default;
  std::string name(std::string_view file) const;  // "<dir>/q.npy"
  virtual bool has(std::string_view file) const = 0;
  // Throws DumpError, or NpyError for read_npy, naming the file.
  virtual std::string read_text(std::string_view file, uint64_t max_bytes) = 0;
  virtual NpyArray read_npy(std::string_view file) = 0;

 private:
  std::string dir_;
};

// The files of dir/ (regular files only, as read_npy and RegularFile read them).
class DirectoryFiles final : public ProblemFiles {
 public:
  using ProblemFiles::ProblemFiles;
  bool has(std::string_view file) const override;
  std::string read_text(std::string_view file, uint64_t max_bytes) override;
  NpyArray read_npy(std::string_view file) override;
};

// Files held in memory, by name.
class MemoryFiles final : public ProblemFiles {
 public:
  MemoryFiles(std::string dir, std::map<std::string, std::string, std::less<>> files)
      : ProblemFiles(std::move(dir)), files_(std::move(files)) {}
  bool has(std::string_view file) const override;
  std::string read_text(std::string_view file, uint64_t max_bytes) override;
  NpyArray read_npy(std::string_view file) override;

 private:
  std::map<std::string, std::string, std::less<>> files_;
};

// One problem. Throws DumpError (or NpyError) naming the file: meta.json missing, malformed, or
// contradicting the arrays (dims, sequences, the files it lists: an input file missing or one it
// does not list; raw inputs listed only in part or without lower_bound); an array of the wrong
// dtype or shape; q/k/v or raw k/gate/logits values that are not bf16 numbers; non-finite A_log
// or dt_bias (or A_log > 88); bad offsets; a gate outside the bounded-gate contract
// (check_gate_contract); a raw gate that does not reproduce the gate (check_raw_gate).
DumpedProblem parse_problem(ProblemFiles& files);

// Every sub-directory of dir holding meta.json or q.npy is one problem (or dir itself if it holds
// them), in name order; ids must be unique.
std::vector<DumpedProblem> load_problems(const std::string& dir);

// The bounded-gate contract (kda-forward.md §3, §9.1) on the cumulative log2 gate: inside each
// sequence, in chunks of 64 tokens counted from the sequence's first token, the per-token decay
// (G[t] - G[t-1], or G[t] at a chunk's first token) must lie in [-128/15, 0] (up to the rounding
// of the fp32 cumulative sum: two units in the last place). Tokens after cu_seqlens[N] are not
// read by the kernels and not checked. Throws DumpError naming `file`, the element and the value.
void check_gate_contract(const HostInputs& inputs, const std::string& file);

// The raw gate must be what the gate was made from: kda::ref::gate_cumsum<double> of raw_gate
// with a_log, dt_bias and lower_bound equals gate on every token before cu_seqlens[N], up to
// 2^-21 relative (the raw path's golden takes the gate as it is: compute_raw_golden). Throws
// DumpError naming both files, the element and the values.
void check_raw_gate(const HostInputs& inputs, const std::string& raw_file,
                    const std::string& gate_file);

}  // namespace kda::harness
