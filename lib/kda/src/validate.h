// chunk_forward's validation and workspace size for a given set of kernels: the library's own
// (kda.h validate / forward_workspace_bytes use kLibraryKernels) or one of the lab's variants,
// whose records, SCAN grids and inputs differ (lab/src/registry.cu). No CUDA calls.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kda/kda.h"
#include "record.h"

namespace kda::detail {

// What validation needs to know about the kernels a forward runs.
struct ForwardKernels {
  int64_t record_bytes;     // one record per (head, chunk slot)
  int scan_ctas_per_chain;  // SCAN CTAs per (sequence, head): the grid's x is this times N
  // Null when PREP reads the raw inputs too (GateInput::raw, BetaInput::logits, bf16 beta,
  // fuse_k_l2norm); else it refuses them (ErrorCode::unsupported) and this ends the message
  // "chunk_forward: raw inputs (...) <contract_only>".
  const char* contract_only;
};
inline constexpr ForwardKernels kLibraryKernels{kRecordBytes, 1, nullptr};

size_t forward_workspace_bytes(const ForwardParams& params, const ForwardKernels& kernels);
void validate(const ForwardParams& params, const ForwardKernels& kernels);

}  // namespace kda::detail
