// Host helpers (CUDA errors, per-device kernel attributes) and the tail-zeroing kernel.
#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

#include "common.cuh"

namespace kda::detail {

void throw_cuda(const std::string& where, cudaError_t status) {
  throw Error(ErrorCode::cuda,
              where + ": " + cudaGetErrorName(status) + ": " + cudaGetErrorString(status));
}

void check_launch(const char* where) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) throw_cuda(std::string(where) + " (kernel launch)", status);
}

int current_device(const char* where) {
  int device = -1;
  const cudaError_t status = cudaGetDevice(&device);
  if (status != cudaSuccess) throw_cuda(std::string(where) + " (no usable CUDA device)", status);
  return device;
}

namespace {
// A device attribute of the current device, queried once per device, then cached; `what` names it
// in the error.
int device_attribute(cudaDeviceAttr attribute, const char* where, const char* what) {
  static std::mutex mutex;
  static std::vector<std::pair<std::pair<int, cudaDeviceAttr>, int>> known;
  const int device = current_device(where);
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(device, attribute);
  for (const auto& [k, value] : known) {
    if (k == key) return value;
  }
  int value = 0;
  const cudaError_t status = cudaDeviceGetAttribute(&value, attribute, device);
  if (status != cudaSuccess) {
    throw_cuda(std::string(where) + " (querying the " + what + ")", status);
  }
  known.emplace_back(key, value);
  return value;
}
}  // namespace

int multiprocessor_count(const char* where) {
  return device_attribute(cudaDevAttrMultiProcessorCount, where, "multiprocessor count");
}

double dram_bandwidth(const char* where) {
  const int clock_khz = device_attribute(cudaDevAttrMemoryClockRate, where, "memory clock");
  const int bus_bits = device_attribute(cudaDevAttrGlobalMemoryBusWidth, where, "memory bus width");
  return 2.0 * 1e3 * clock_khz * (bus_bits / 8.0);
}

void set_dynamic_smem(const void* kernel, int bytes, const char* where, bool max_carveout) {
  // The attribute is per (function, device); remember where it is set so repeated calls (the
  // benchmark loop) cost no driver call.
  static std::mutex mutex;
  static std::vector<std::pair<const void*, int>> done;
  const int device = current_device(where);
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(kernel, device);
  if (std::find(done.begin(), done.end(), key) != done.end()) return;
  const cudaError_t status =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (status != cudaSuccess) {
    throw_cuda(std::string(where) + " (setting " + std::to_string(bytes) +
                   " bytes of dynamic shared memory; the kernels need an sm_90 device)",
               status);
  }
  if (max_carveout) {
    const cudaError_t carveout = cudaFuncSetAttribute(
        kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
    if (carveout != cudaSuccess) {
      throw_cuda(std::string(where) + " (setting the maximum shared-memory carveout)", carveout);
    }
  }
  done.push_back(key);
}

__global__ void __launch_bounds__(256)
    zero_tail_kernel(char* base, int64_t row_pitch, int64_t row_vec16, int64_t tokens,
                     const int32_t* cu, int num_seqs) {
  const int64_t first = cu[num_seqs];
  for (int64_t t = first + blockIdx.x; t < tokens; t += gridDim.x) {
    uint4* row = reinterpret_cast<uint4*>(base + t * row_pitch);
    for (int64_t j = threadIdx.x; j < row_vec16; j += blockDim.x) row[j] = make_uint4(0, 0, 0, 0);
  }
}

void launch_zero_tail(void* base, int64_t row_pitch, int64_t row_vec16, int64_t tokens,
                      const int32_t* cu, int num_seqs, cudaStream_t stream, const char* where) {
  // Enough CTAs to stream a long tail; when there is none (cu[N] == tokens) they exit at once.
  const int64_t blocks = std::min<int64_t>(tokens, 1024);
  zero_tail_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
      static_cast<char*>(base), row_pitch, row_vec16, tokens, cu, num_seqs);
  check_launch(where);
}

}  // namespace kda::detail
