// What one problem needs on the device, and the refusal when it does not fit. Pure host code (no
// CUDA calls), so the sizes and the message are unit-tested on machines without a GPU; the apps
// compare the total with cudaMemGetInfo before they allocate anything (device_problem.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kda/harness/problem.h"

namespace kda::app {

// The bytes DeviceProblem allocates, by kind. Zero workspace for shapes the kernels do not
// support (K or V != 128): the tools never run those on the GPU.
struct DeviceFootprint {
  size_t inputs = 0;     // q, k, v (bf16), gate (fp32), beta (fp32), cu_seqlens, initial state,
                         // the raw inputs (ProblemSize::raw_input_bytes)
  size_t outputs = 0;    // out and q_hat (bf16), final state (fp32)
  size_t workspace = 0;  // the forward's records, sized for every kernel variant
  size_t total() const { return inputs + outputs + workspace; }
};

// From the problem's size: ProblemSize::of(shape) before its inputs are generated, or
// ProblemSize::of(inputs) for inputs already in host memory (kda-check --load).
DeviceFootprint device_footprint(const kda::harness::ProblemSize& size);

// "" when `need` fits in `free_bytes`; else the refusal, e.g. "shape 'h96-fixed' needs 1.93 GiB
// of device memory (2071986184 bytes: inputs ..., outputs ..., workspace ...), 1.00 GiB free on
// device 0 (NVIDIA H200); use a smaller shape (--only) or free the device".
std::string device_memory_shortfall(const std::string& shape_id, const DeviceFootprint& need,
                                    size_t free_bytes, int device, const std::string& device_name);

// A problem that does not fit in the device's free memory (the apps exit 2: bad input for this
// device). Thrown before anything is allocated.
class DeviceMemoryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace kda::app
