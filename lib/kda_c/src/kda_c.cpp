// The C ABI of include/kda/kda_c.h: converts the plain struct to kda::ForwardParams (checking the
// enum values, which C cannot), calls lib/kda, and turns every exception into a status code and a
// thread-local message, so nothing crosses the C boundary.
#include "kda/kda_c.h"

#include <exception>
#include <limits>
#include <string>

#include "kda/kda.h"

namespace {

thread_local std::string g_last_error;

int32_t fail(int32_t code, const std::string& message) {
  g_last_error = message;
  return code;
}

int32_t status_of(kda::ErrorCode code) {
  switch (code) {
    case kda::ErrorCode::invalid_argument:
      return KDA_C_INVALID_ARGUMENT;
    case kda::ErrorCode::unsupported:
      return KDA_C_UNSUPPORTED;
    case kda::ErrorCode::cuda:
      return KDA_C_CUDA;
  }
  return KDA_C_INTERNAL;
}

// Thrown for a field C could fill with any integer; caught below like kda::Error.
kda::Error bad_enum(const char* field, int32_t value, const char* allowed) {
  return kda::Error(kda::ErrorCode::invalid_argument,
                    std::string("kda_c: ") + field + " = " + std::to_string(value) +
                        " is not a valid value: use " + allowed + " (kda/kda_c.h)");
}

kda::DType dtype_of(const char* field, int32_t value) {
  if (value == KDA_C_BF16) return kda::DType::bf16;
  if (value == KDA_C_F32) return kda::DType::f32;
  throw bad_enum(field, value, "KDA_C_BF16 or KDA_C_F32");
}

bool flag_of(const char* field, int32_t value) {
  if (value == 0 || value == 1) return value == 1;
  throw bad_enum(field, value, "0 or 1");
}

kda::ForwardParams to_params(const kda_c_forward_params* c) {
  if (c == nullptr) {
    throw kda::Error(kda::ErrorCode::invalid_argument,
                     "kda_c: params is null: pass a filled struct kda_c_forward_params");
  }
  if (c->workspace_bytes < 0) {
    throw kda::Error(kda::ErrorCode::invalid_argument,
                     "kda_c: workspace_bytes = " + std::to_string(c->workspace_bytes) +
                         " is negative: pass the size of the workspace buffer in bytes");
  }
  kda::ForwardParams p;
  p.q = c->q;
  p.q_dtype = dtype_of("q_dtype", c->q_dtype);
  p.k = c->k;
  p.v = c->v;
  p.gate = c->gate;
  if (c->gate_input == KDA_C_GATE_CHUNK_LOG2) {
    p.gate_input = kda::GateInput::chunk_log2;
  } else if (c->gate_input == KDA_C_GATE_RAW) {
    p.gate_input = kda::GateInput::raw;
  } else {
    throw bad_enum("gate_input", c->gate_input, "KDA_C_GATE_CHUNK_LOG2 or KDA_C_GATE_RAW");
  }
  p.gate_dtype = dtype_of("gate_dtype", c->gate_dtype);
  p.a_log = c->a_log;
  p.dt_bias = c->dt_bias;
  p.lower_bound = c->lower_bound;
  p.beta = c->beta;
  if (c->beta_input == KDA_C_BETA_PROBABILITY) {
    p.beta_input = kda::BetaInput::probability;
  } else if (c->beta_input == KDA_C_BETA_LOGITS) {
    p.beta_input = kda::BetaInput::logits;
  } else {
    throw bad_enum("beta_input", c->beta_input, "KDA_C_BETA_PROBABILITY or KDA_C_BETA_LOGITS");
  }
  p.beta_dtype = dtype_of("beta_dtype", c->beta_dtype);
  p.initial_state = c->initial_state;
  p.out = c->out;
  p.final_state = c->final_state;
  p.batch = c->batch;
  p.tokens = c->tokens;
  p.heads = c->heads;
  p.key_dim = c->key_dim;
  p.value_dim = c->value_dim;
  p.q_token_stride = c->q_token_stride;
  p.k_token_stride = c->k_token_stride;
  p.v_token_stride = c->v_token_stride;
  p.out_token_stride = c->out_token_stride;
  p.cu_seqlens = c->cu_seqlens;
  p.cu_seqlens_host = c->cu_seqlens_host;
  p.num_seqs = c->num_seqs;
  p.fuse_q_l2norm = flag_of("fuse_q_l2norm", c->fuse_q_l2norm);
  p.fuse_k_l2norm = flag_of("fuse_k_l2norm", c->fuse_k_l2norm);
  p.workspace = c->workspace;
  p.workspace_bytes = static_cast<size_t>(c->workspace_bytes);
  return p;
}

// Runs `body`, mapping whatever it throws to a status code and g_last_error.
template <typename Body>
int32_t guarded(Body&& body) noexcept {
  try {
    body();
    g_last_error.clear();
    return KDA_C_OK;
  } catch (const kda::Error& e) {
    return fail(status_of(e.code()), e.what());
  } catch (const std::exception& e) {
    return fail(KDA_C_INTERNAL, std::string("kda_c: unexpected error: ") + e.what());
  } catch (...) {
    return fail(KDA_C_INTERNAL, "kda_c: unexpected error of unknown type");
  }
}

}  // namespace

extern "C" {

int32_t kda_c_abi_version(void) { return KDA_C_ABI_VERSION; }

const char* kda_c_last_error(void) { return g_last_error.c_str(); }

int32_t kda_c_validate(const kda_c_forward_params* params) {
  return guarded([&] { kda::validate(to_params(params)); });
}

int32_t kda_c_workspace_bytes(const kda_c_forward_params* params, int64_t* bytes) {
  return guarded([&] {
    if (bytes == nullptr) {
      throw kda::Error(kda::ErrorCode::invalid_argument,
                       "kda_c_workspace_bytes: bytes is null: pass a pointer to an int64_t");
    }
    const size_t size = kda::forward_workspace_bytes(to_params(params));
    if (size > static_cast<size_t>(std::numeric_limits<int64_t>::max())) {
      throw kda::Error(kda::ErrorCode::unsupported,
                       "kda_c_workspace_bytes: the workspace exceeds 2^63 bytes: split the problem");
    }
    *bytes = static_cast<int64_t>(size);
  });
}

int32_t kda_c_forward(const kda_c_forward_params* params, void* stream) {
  return guarded([&] { kda::chunk_forward(to_params(params), static_cast<cudaStream_t>(stream)); });
}

}  // extern "C"
