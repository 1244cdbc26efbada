// DeviceProblem: one problem's inputs, outputs and workspace on the GPU, owned RAII, plus the
// paths the tools run on it. Shared by kda-check and kda-bench so both run exactly the same calls.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "device_memory.h"
#include "kda/harness/inputs.h"
#include "kda/kda.h"

namespace kda::app {

// Throws kda::Error(ErrorCode::cuda, "<what>: <cudaGetErrorString>") when status != cudaSuccess.
void check_cuda(cudaError_t status, const char* what);

// The paths the tools know. explicit = l2norm(q) then the forward on q_hat.
enum class Path { fused, explicit_, l2norm };
const char* path_name(Path path);            // "fused", "explicit", "l2norm"
bool parse_path(const std::string& name, Path* path);

// Every kernel variant, and the variants by name ("v0_fp32", "v1_mma", "v2_mma", "v2t_mma", "v2w_mma") for
// the command lines.
inline constexpr kda::ForwardVariant kAllVariants[] = {
    kda::ForwardVariant::v0_fp32, kda::ForwardVariant::v1_mma, kda::ForwardVariant::v2_mma,
    kda::ForwardVariant::v2t_mma, kda::ForwardVariant::v2w_mma};
bool parse_variant(const std::string& name, kda::ForwardVariant* variant);
std::vector<std::string> variant_names();

// Owning device allocation (cudaMalloc/cudaFree); copy deleted: it owns device memory.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  template <class T> T* as() const { return static_cast<T*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class DeviceProblem {
 public:
  // Uploads the inputs (synchronously). Throws kda::Error on CUDA failures.
  explicit DeviceProblem(const kda::harness::HostInputs& inputs);

  // Enqueue one path on `stream` (no sync). fused: chunk_forward(fuse_q_l2norm) on raw q.
  // explicit_: l2norm(q) -> q_hat, then chunk_forward on q_hat. l2norm: the l2norm pass alone.
  void enqueue(Path path, cudaStream_t stream);
  // One stage of the forward (kda::forward_stage_*) for the given path's params.
  void enqueue_stage(Path path, int stage, cudaStream_t stream);

  // Fill out, final state and q_hat with NaN (0xFFFF bf16 / 0x7FC00000 fp32) on `stream`.
  void poison(cudaStream_t stream);

  // Synchronous downloads (widened to float).
  std::vector<float> download_out() const;          // [B, T, H, V]
  std::vector<float> download_final_state() const;  // [N, H, K, V] (empty unless requested)
  std::vector<float> download_q_hat() const;        // [B, T, H, K]

  // Which kernel variant the forward paths run (kda::ForwardVariant); the workspace fits all.
  void set_variant(kda::ForwardVariant variant) { variant_ = variant; }
  kda::ForwardVariant variant() const { return variant_; }

  kda::ForwardParams forward_params(Path path) const;
  kda::L2NormParams l2norm_params() const;
  // Workspace the current variant's forward needs (the allocation fits every variant).
  size_t workspace_bytes() const;
  const kda::harness::HostInputs& inputs() const { return *inputs_; }

 private:
  const kda::harness::HostInputs* inputs_;
  kda::ForwardVariant variant_ = kda::kDefaultForwardVariant;
  DeviceBuffer q_, k_, v_, gate_, beta_, h0_, cu_, q_hat_, out_, ht_, workspace_;
};

struct DeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0, sm_count = 0;
  int64_t l2_bytes = 0, global_mem_bytes = 0;
  int default_sm_clock_khz = 0, mem_clock_khz = 0, mem_bus_width_bits = 0;
  double peak_mem_bw_Bps = 0.0;
  int driver_version = 0, runtime_version = 0;
  bool ecc = false;
};

// Number of usable devices; 0 (not an error) when there is no GPU or no driver.
int device_count();
// Selects the device and fills its info; throws kda::Error with a clear message for a bad index
// or a device that is not sm_90.
DeviceInfo select_device(int index);

// Throws DeviceMemoryError (device_memory.h) when `need` exceeds the free memory of the selected
// device (cudaMemGetInfo); call it before allocating the problem.
void require_device_memory(const std::string& shape_id, const DeviceFootprint& need,
                           const DeviceInfo& device);

}  // namespace kda::app
