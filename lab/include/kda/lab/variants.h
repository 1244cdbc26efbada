// kda_lab: the forward variants by name. The library (kda.h) ships one chunk_forward; the lab
// keeps the ladder of kernels that led to it (lab/README.md: v0_fp32, v1_mma, v2_mma, v2t_mma),
// each a complete forward with kda.h's contract and semantics (host validation first, kda::Error,
// the same stages), plus the library's own under the name v2w_mma. kda-check, kda-bench,
// kda-gbench (--variant) and the GPU tests run variants through this registry; the library does
// not depend on it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kda/kda.h"

namespace kda::lab {

struct Variant {
  const char* name;     // the --variant name: "v0_fp32" ... "v2w_mma"
  const char* summary;  // one line: what this step of the ladder changed
  bool ships;           // the library's kda::chunk_forward itself
  // Reads the raw inputs (GateInput::raw, BetaInput::logits, bf16 beta, fuse_k_l2norm); a variant
  // without refuses them in validate with ErrorCode::unsupported.
  bool raw_inputs;
  // fuse_q_l2norm normalizes q with the l2norm kernel's own row function, so the fused path is
  // bitwise the explicit one (l2norm, then chunk_forward); otherwise the norm's factor is folded
  // into q' and A_qk in fp32 and the two paths differ by roundings.
  bool fused_q_norm_exact;
  // kda.h's entry points, for this variant's kernels and record size.
  size_t (*workspace_bytes)(const ForwardParams& params);
  void (*validate)(const ForwardParams& params);
  void (*forward)(const ForwardParams& params, cudaStream_t stream);
  void (*forward_stage)(const ForwardParams& params, int stage, cudaStream_t stream);
};

// Every variant in the order the ladder was built, the shipping one last. Without the ladder's
// kernels (CMake KDA_BUILD_LAB=OFF) only the shipping one.
std::span<const Variant> variants();
// By name, or null.
const Variant* find_variant(std::string_view name);
// The one kda::chunk_forward runs.
const Variant& shipping_variant();
// The names of variants(), for command lines.
std::vector<std::string> variant_names();

}  // namespace kda::lab
