#include "device_problem.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

namespace kda::app {

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw kda::Error(kda::ErrorCode::cuda,
                     std::string(what) + ": " + cudaGetErrorString(status));
  }
}

const Variant& variant_named(const std::string& name) {
  if (name.empty()) return kda::lab::shipping_variant();
  if (const Variant* v = kda::lab::find_variant(name)) return *v;
  std::string known;
  for (const std::string& n : kda::lab::variant_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown variant '" + name + "' (" + known + ")");
}

// ---------------------------------------------------------------------------------------------
DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  check_cuda(cudaMalloc(&ptr_, bytes), "cudaMalloc");
}

void DeviceBuffer::upload_bytes(const void* host) {
  check_cuda(cudaMemcpy(ptr_, host, bytes_, cudaMemcpyHostToDevice), "cudaMemcpy (upload)");
}

void DeviceBuffer::download_bytes(void* host) const {
  check_cuda(cudaDeviceSynchronize(), "kernel execution");
  if (bytes_ > 0) {
    check_cuda(cudaMemcpy(host, ptr_, bytes_, cudaMemcpyDeviceToHost), "cudaMemcpy (download)");
  }
}

void DeviceBuffer::poison() const {
  if (bytes_ > 0) check_cuda(cudaMemset(ptr_, 0xFF, bytes_), "cudaMemset");
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

namespace {

template <class T>
DeviceBuffer upload(const std::vector<T>& host) {
  DeviceBuffer buffer(host.size() * sizeof(T));
  if (!host.empty()) {
    check_cuda(cudaMemcpy(buffer.get(), host.data(), buffer.bytes(), cudaMemcpyHostToDevice),
               "cudaMemcpy (upload)");
  }
  return buffer;
}

std::vector<float> download_bf16(const DeviceBuffer& buffer) {
  std::vector<uint16_t> bits(buffer.bytes() / sizeof(uint16_t));
  if (!bits.empty()) {
    check_cuda(cudaMemcpy(bits.data(), buffer.get(), buffer.bytes(), cudaMemcpyDeviceToHost),
               "cudaMemcpy (download)");
  }
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = kda::harness::bf16_to_float(bits[i]);
  return out;
}

std::vector<float> download_f32(const DeviceBuffer& buffer) {
  std::vector<float> out(buffer.bytes() / sizeof(float));
  if (!out.empty()) {
    check_cuda(cudaMemcpy(out.data(), buffer.get(), buffer.bytes(), cudaMemcpyDeviceToHost),
               "cudaMemcpy (download)");
  }
  return out;
}

size_t token_heads(const kda::harness::HostInputs& in) {
  return static_cast<size_t>(in.batch) * static_cast<size_t>(in.tokens) *
         static_cast<size_t>(in.heads);
}

// The options of each forward path (the pointers are the caller's): what makes the fused and the
// raw path what they are, in one place for DeviceProblem and unsupported_by_variant.
void set_path_options(Path path, kda::ForwardParams* p) {
  p->q_dtype = kda::DType::bf16;
  p->fuse_q_l2norm = path == Path::fused || path == Path::raw;
  if (path == Path::raw) {
    p->fuse_k_l2norm = true;
    p->gate_input = kda::GateInput::raw;
    p->gate_dtype = kda::DType::bf16;
    p->beta_input = kda::BetaInput::logits;
    p->beta_dtype = kda::DType::bf16;
  }
}

// Forward params with sizes only (pointers filled in by DeviceProblem), for the workspace query.
kda::ForwardParams sized_params(const kda::harness::HostInputs& in) {
  kda::ForwardParams p;
  p.batch = in.batch;
  p.tokens = in.tokens;
  p.heads = static_cast<int>(in.heads);
  p.key_dim = static_cast<int>(in.key_dim);
  p.value_dim = static_cast<int>(in.value_dim);
  p.num_seqs = in.cu_seqlens.empty() ? 0 : static_cast<int>(in.cu_seqlens.size() - 1);
  p.cu_seqlens_host = in.cu_seqlens.empty() ? nullptr : in.cu_seqlens.data();
  return p;
}

}  // namespace

DeviceProblem::DeviceProblem(const kda::harness::HostInputs& inputs) : inputs_(&inputs) {
  q_ = upload(inputs.q);
  k_ = upload(inputs.k);
  v_ = upload(inputs.v);
  gate_ = upload(inputs.gate);
  beta_ = upload(inputs.beta);
  h0_ = upload(inputs.initial_state);
  cu_ = upload(inputs.cu_seqlens);
  raw_k_ = upload(inputs.raw_k);
  raw_gate_ = upload(inputs.raw_gate);
  beta_logits_ = upload(inputs.beta_logits);
  a_log_ = upload(inputs.a_log);
  dt_bias_ = upload(inputs.dt_bias);
  const size_t th = token_heads(inputs);
  q_hat_ = DeviceBuffer(th * static_cast<size_t>(inputs.key_dim) * sizeof(uint16_t));
  out_ = DeviceBuffer(th * static_cast<size_t>(inputs.value_dim) * sizeof(uint16_t));
  if (inputs.want_final_state) {
    ht_ = DeviceBuffer(static_cast<size_t>(inputs.num_states()) * inputs.heads * inputs.key_dim *
                       inputs.value_dim * sizeof(float));
  }
  // Sized for the largest variant so one DeviceProblem can run them all.
  workspace_ = DeviceBuffer(device_footprint(kda::harness::ProblemSize::of(inputs)).workspace);
}

kda::ForwardParams DeviceProblem::forward_params(Path path) const {
  kda::ForwardParams p = sized_params(*inputs_);
  set_path_options(path, &p);
  p.q = p.fuse_q_l2norm ? q_.get() : q_hat_.get();
  p.v = v_.get();
  if (path == Path::raw) {
    if (!has_raw_inputs()) {
      throw std::logic_error("DeviceProblem: the raw path needs raw inputs, which these inputs "
                             "lack (check has_raw_inputs() first)");
    }
    p.k = raw_k_.get();
    p.gate = raw_gate_.get();
    p.a_log = a_log_.as<float>();
    p.dt_bias = dt_bias_.as<float>();
    p.lower_bound = inputs_->lower_bound;
    p.beta = beta_logits_.get();
  } else {
    p.k = k_.get();
    p.gate = gate_.get();
    p.beta = beta_.get();
  }
  p.initial_state = h0_.bytes() ? h0_.as<float>() : nullptr;
  p.out = out_.get();
  p.final_state = ht_.bytes() ? ht_.as<float>() : nullptr;
  p.cu_seqlens = cu_.bytes() ? cu_.as<int32_t>() : nullptr;
  p.workspace = workspace_.get();
  p.workspace_bytes = workspace_.bytes();
  return p;
}

size_t DeviceProblem::workspace_bytes() const {
  return variant_->workspace_bytes(forward_params(Path::fused));
}

kda::L2NormParams DeviceProblem::l2norm_params() const {
  kda::L2NormParams p;
  p.x = q_.get();
  p.x_dtype = kda::DType::bf16;
  p.y = q_hat_.get();
  p.rows = static_cast<int64_t>(token_heads(*inputs_));
  p.dim = static_cast<int>(inputs_->key_dim);
  return p;
}

void DeviceProblem::enqueue(Path path, cudaStream_t stream) {
  switch (path) {
    case Path::l2norm:
      kda::l2norm(l2norm_params(), stream);
      return;
    case Path::explicit_:
      kda::l2norm(l2norm_params(), stream);
      variant_->forward(forward_params(path), stream);
      return;
    case Path::fused:
    case Path::raw:
      variant_->forward(forward_params(path), stream);
      return;
  }
}

std::optional<std::string> unsupported_by_variant(Path path, const Variant& variant) {
  if (path == Path::l2norm) return std::nullopt;  // no forward: no variant
  kda::ForwardParams p;
  p.batch = 1;
  p.tokens = kda::kChunk;
  p.heads = 1;
  set_path_options(path, &p);
  // Placeholders: 256-byte aligned, never read (validate is host code only).
  void* const placeholder = reinterpret_cast<void*>(uintptr_t{256});
  p.q = p.k = p.v = p.gate = p.beta = placeholder;
  p.out = placeholder;
  if (path == Path::raw) {
    p.a_log = p.dt_bias = static_cast<const float*>(placeholder);
  }
  p.workspace = placeholder;
  p.workspace_bytes = variant.workspace_bytes(p);
  try {
    variant.validate(p);
  } catch (const kda::Error& e) {
    if (e.code() == kda::ErrorCode::unsupported) return std::string(e.what());
    throw;  // a placeholder the library refuses: a bug here, not a property of the variant
  }
  return std::nullopt;
}

void DeviceProblem::enqueue_stage(Path path, int stage, cudaStream_t stream) {
  variant_->forward_stage(forward_params(path), stage, stream);
}

void DeviceProblem::poison(cudaStream_t stream) {
  // 0xFF bytes are NaN both as bf16 (0xFFFF) and as fp32 (0xFFFFFFFF).
  for (const DeviceBuffer* b : {&out_, &ht_, &q_hat_}) {
    if (b->bytes()) check_cuda(cudaMemsetAsync(b->get(), 0xFF, b->bytes(), stream), "poison");
  }
}

std::vector<float> DeviceProblem::download_out() const { return download_bf16(out_); }
std::vector<float> DeviceProblem::download_final_state() const { return download_f32(ht_); }
std::vector<float> DeviceProblem::download_q_hat() const { return download_bf16(q_hat_); }

// ---------------------------------------------------------------------------------------------
int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver / no device" error
    return 0;
  }
  return count;
}

std::optional<std::string> missing_gpu() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaSuccess && count > 0) return std::nullopt;
  cudaGetLastError();  // clear the sticky "no driver / no device" error
  return std::string("needs an NVIDIA GPU (sm_90); none was found (") +
         (status != cudaSuccess ? cudaGetErrorString(status) : "0 devices") + ")";
}

DeviceInfo select_device(int index) {
  if (const std::optional<std::string> why = missing_gpu()) {
    throw kda::Error(kda::ErrorCode::cuda, "this " + *why);
  }
  const int count = device_count();
  if (index < 0 || index >= count) {
    throw kda::Error(kda::ErrorCode::invalid_argument,
                     "--device " + std::to_string(index) + " does not exist: this machine has " +
                         std::to_string(count) + " GPU(s), indices 0.." +
                         std::to_string(count - 1));
  }
  check_cuda(cudaSetDevice(index), "cudaSetDevice");
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
  DeviceInfo info;
  info.index = index;
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.sm_count = prop.multiProcessorCount;
  info.l2_bytes = prop.l2CacheSize;
  info.global_mem_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  info.ecc = prop.ECCEnabled != 0;
  auto attr = [&](cudaDeviceAttr a) {
    int value = 0;
    check_cuda(cudaDeviceGetAttribute(&value, a, index), "cudaDeviceGetAttribute");
    return value;
  };
  info.default_sm_clock_khz = attr(cudaDevAttrClockRate);
  info.mem_clock_khz = attr(cudaDevAttrMemoryClockRate);
  info.mem_bus_width_bits = attr(cudaDevAttrGlobalMemoryBusWidth);
  // DDR: two transfers per clock.
  info.peak_mem_bw_Bps = 2.0 * info.mem_clock_khz * 1e3 * (info.mem_bus_width_bits / 8.0);
  check_cuda(cudaDriverGetVersion(&info.driver_version), "cudaDriverGetVersion");
  check_cuda(cudaRuntimeGetVersion(&info.runtime_version), "cudaRuntimeGetVersion");
  if (info.cc_major != 9 || info.cc_minor != 0) {
    throw kda::Error(kda::ErrorCode::unsupported,
                     "device " + std::to_string(index) + " (" + info.name + ") is sm_" +
                         std::to_string(info.cc_major) + std::to_string(info.cc_minor) +
                         "; the kernels are built for sm_90a (Hopper H100/H200) only");
  }
  return info;
}

void require_device_memory(const std::string& shape_id, const DeviceFootprint& need,
                           const DeviceInfo& device) {
  size_t free_bytes = 0, total_bytes = 0;
  check_cuda(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  const std::string shortfall =
      device_memory_shortfall(shape_id, need, free_bytes, device.index, device.name);
  if (!shortfall.empty()) throw DeviceMemoryError(shortfall);
}

}  // namespace kda::app
