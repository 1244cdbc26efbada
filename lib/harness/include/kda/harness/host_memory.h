// Host memory a problem needs, estimated before its inputs are generated, and the refusal when the
// machine does not have it (instead of growing until the kernel kills the process, or a bare
// std::bad_alloc). Pure CPU; the apps compare the estimate with available_host_memory().
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "kda/harness/problem.h"

namespace kda::harness {

// What a run does with the problem on the host.
enum class HostWork {
  inputs_only,  // generate (or load) and upload: kda-bench --no-verify, kda-gbench --no-verify
  gpu_check,    // + the fp64 golden and fp32 low references, GPU outputs downloaded and judged
  reference,    // kda-check --backend reference: four CPU references and their judgements
};

// Peak bytes: the inputs, and everything else alive at the peak. The model follows what the code
// allocates (HostInputs; the references' fp32 copy of the inputs and their fp64/fp32 outputs in
// kda/harness/verify.h compute_golden and check_references; the downloads and
// widened copies of check_path), per token-head and per state element: change it with that code
// (tests/harness/test_host_memory.cpp pins the numbers). A GPU check takes ~10.2 KB per
// token-head at K = V = 128 (h96-fixed: 8.1 GB), 12.8 KB with the raw path's references
// (10.1 GB).
struct HostFootprint {
  size_t inputs = 0;   // bf16 q k v, fp32 gate beta, cu_seqlens, initial state, raw inputs
  size_t working = 0;  // the references' copy and outputs, downloads and widened copies
  bool inputs_loaded = false;  // the inputs are in memory already (--load): not counted again
  size_t total() const { return (inputs_loaded ? 0 : inputs) + working; }
};
// raw_golden: gpu_check also runs Path::raw, whose references (compute_raw_golden) are computed
// after compute_golden's and kept beside them.
HostFootprint host_footprint(const ProblemSize& dims, HostWork work, bool raw_golden = false);

// Memory the process can still take: MemAvailable of /proc/meminfo (MemFree + Buffers + Cached
// on kernels without it), lowered to what a cgroup v2 memory.max leaves. Empty where none of it
// can be read: then nothing is refused.
struct AvailableMemory {
  uint64_t bytes = 0;
  std::string source;  // "MemAvailable", "MemFree + Buffers + Cached", "cgroup memory.max"
};
std::optional<AvailableMemory> available_host_memory();
// The /proc/meminfo part, on the file's text (for tests).
std::optional<AvailableMemory> parse_meminfo(std::string_view meminfo);

// "" when `need` fits; else e.g. "shape 'big' needs about 20.31 GiB of host memory (21807...
// bytes: inputs ..., references and judging ...), 18.02 GiB available (MemAvailable); use a
// smaller shape, check fewer shapes at a time (--only), or free memory".
std::string host_memory_shortfall(const std::string& shape_id, const HostFootprint& need,
                                  const AvailableMemory& available);

// Thrown before anything is generated; the apps exit 2 (bad input for this machine).
class HostMemoryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// Throws HostMemoryError with host_memory_shortfall's message when `need` does not fit in what
// is available now.
void require_host_memory(const std::string& shape_id, const HostFootprint& need);

// The message for a std::bad_alloc that escaped anyway (the estimate is a model, and other
// processes take memory too): names what was being done and what to try.
std::string out_of_host_memory(const std::string& during);

}  // namespace kda::harness
