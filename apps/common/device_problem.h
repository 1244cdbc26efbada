// DeviceProblem: one problem's inputs, outputs and workspace on the GPU, owned RAII, plus the
// paths the tools run on it. Shared by kda-check and kda-bench so both run exactly the same calls.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "device_memory.h"
#include "kda/harness/device_info.h"
#include "kda/harness/inputs.h"
#include "kda/harness/problem.h"
#include "kda/kda.h"
#include "kda/lab/variants.h"

namespace kda::app {

// Throws kda::Error(ErrorCode::cuda, "<what>: <cudaGetErrorString>") when status != cudaSuccess.
void check_cuda(cudaError_t status, const char* what);

// The harness's path and device types (kda/harness/problem.h, device_info.h): one of each for
// every tool and report.
using kda::harness::DeviceInfo;
using kda::harness::Path;

// The forward's kernel variants by name ("v0_fp32" ... "v2w_mma", the library's): the lab's
// registry (lab/include/kda/lab/variants.h).
using kda::lab::Variant;
// The variant of that name, or the library's for "" (the tools' default); throws
// std::invalid_argument, naming the known ones, for any other name.
const Variant& variant_named(const std::string& name);

// Owning device allocation (cudaMalloc/cudaFree); copy deleted: it owns device memory. Shared by
// the apps and the GPU tests (tests/kda/test_gpu.cpp).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  // A copy of `host` (synchronous upload).
  template <class T>
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size() * sizeof(T)) {
    if (bytes_ > 0) upload_bytes(host.data());
  }
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  // 0xFF bytes: NaN in fp32 and bf16, so a partial write shows up (synchronous).
  void poison() const;
  // The whole buffer as T (synchronous). Waits for the device first, so a kernel's error surfaces
  // here, named, and work on non-blocking streams is finished.
  template <class T>
  std::vector<T> download() const {
    std::vector<T> host(bytes_ / sizeof(T));
    download_bytes(host.data());
    return host;
  }

 private:
  void upload_bytes(const void* host);
  void download_bytes(void* host) const;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class DeviceProblem {
 public:
  // Uploads the inputs (synchronously). Throws kda::Error on CUDA failures.
  explicit DeviceProblem(const kda::harness::HostInputs& inputs);

  // Enqueue one path on `stream` (no sync). fused: chunk_forward(fuse_q_l2norm) on raw q.
  // explicit_: l2norm(q) -> q_hat, then chunk_forward on q_hat. l2norm: the l2norm pass alone.
  // raw: chunk_forward on the raw inputs (fuse_q_l2norm and fuse_k_l2norm, GateInput::raw with
  // the bf16 raw gate, BetaInput::logits with bf16 logits); the inputs must have them
  // (has_raw_inputs(), else std::logic_error).
  void enqueue(Path path, cudaStream_t stream);
  // One stage of the forward (kda::forward_stage_*) for the given path's params.
  void enqueue_stage(Path path, int stage, cudaStream_t stream);

  // Fill out, final state and q_hat with NaN (0xFFFF bf16 / 0x7FC00000 fp32) on `stream`.
  void poison(cudaStream_t stream);

  // Synchronous downloads (widened to float).
  std::vector<float> download_out() const;          // [B, T, H, V]
  std::vector<float> download_final_state() const;  // [N, H, K, V] (empty unless requested)
  std::vector<float> download_q_hat() const;        // [B, T, H, K]

  // Which kernel variant the forward paths run (the library's by default); the workspace fits
  // all.
  void set_variant(const Variant& variant) { variant_ = &variant; }
  const Variant& variant() const { return *variant_; }

  kda::ForwardParams forward_params(Path path) const;
  bool has_raw_inputs() const { return inputs_->has_raw_inputs(); }
  kda::L2NormParams l2norm_params() const;
  // Workspace the current variant's forward needs (the allocation fits every variant).
  size_t workspace_bytes() const;
  const kda::harness::HostInputs& inputs() const { return *inputs_; }

 private:
  const kda::harness::HostInputs* inputs_;
  const Variant* variant_ = &kda::lab::shipping_variant();
  DeviceBuffer q_, k_, v_, gate_, beta_, h0_, cu_, q_hat_, out_, ht_, workspace_;
  DeviceBuffer raw_k_, raw_gate_, beta_logits_, a_log_, dt_bias_;  // empty without raw inputs
};

// Why `variant` cannot run `path` (the library's kda::ErrorCode::unsupported message), or
// nothing when it can: v0_fp32 and v1_mma refuse the raw inputs of Path::raw. Asked of the
// variant's validate on a one-chunk problem before anything is generated or allocated: validate
// is host code that never dereferences a device pointer, so aligned placeholders stand in for the
// buffers. Refusals that depend on a problem's sizes (K != 128 ...) concern every path alike and
// are not asked about here.
std::optional<std::string> unsupported_by_variant(Path path, const Variant& variant);

// Number of usable devices; 0 (not an error) when there is no GPU or no driver.
int device_count();
// The device-count check every tool makes first: empty when a device exists, else "needs an
// NVIDIA GPU (sm_90); none was found (<why>)", for "<tool> " to precede (the GPU tests skip on
// that text).
std::optional<std::string> missing_gpu();
// Selects the device and fills its info; throws kda::Error with a clear message for a bad index
// or a device that is not sm_90.
DeviceInfo select_device(int index);

// Throws DeviceMemoryError (device_memory.h) when `need` exceeds the free memory of the selected
// device (cudaMemGetInfo); call it before allocating the problem.
void require_device_memory(const std::string& shape_id, const DeviceFootprint& need,
                           const DeviceInfo& device);

}  // namespace kda::app
