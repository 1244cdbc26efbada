// .npy interchange for kda-check: --dump DIR writes each shape's inputs and outputs under
// DIR/<id>/, --load DIR runs on such inputs instead of generating them.
#pragma once

#include <string>
#include <vector>

#include "kda/harness/inputs.h"

namespace kda::app {

// Writes q k v gate beta [cu_seqlens] [h0] (bf16 values widened exactly to float32) and
// meta.json (id, seed, dims, want_final_state) under dir/<id>/.
void dump_inputs(const std::string& dir, const std::string& id, uint64_t seed,
                 const kda::harness::HostInputs& inputs);

// Writes one computed tensor as dir/<id>/<name>.npy with the given shape.
void dump_tensor(const std::string& dir, const std::string& id, const std::string& name,
                 const std::vector<float>& values, const std::vector<int64_t>& shape);
void dump_tensor(const std::string& dir, const std::string& id, const std::string& name,
                 const std::vector<double>& values, const std::vector<int64_t>& shape);

struct LoadedProblem {
  std::string id;
  uint64_t seed = 0;
  kda::harness::HostInputs inputs;
};

// Every sub-directory of dir holding q.npy is one problem (or dir itself if it holds q.npy).
// Throws std::runtime_error naming the file and what is wrong (missing tensor, wrong dtype or
// shape, a q/k/v value that is not exactly a bf16 number, bad offsets).
std::vector<LoadedProblem> load_problems(const std::string& dir);

}  // namespace kda::app
