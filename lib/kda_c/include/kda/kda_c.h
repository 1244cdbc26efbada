/* kda_c: a C ABI over kda::chunk_forward (lib/kda/include/kda/kda.h) for callers that cannot link
 * C++: the Python package in python/ loads libkda_c.so with ctypes.
 *
 * Why a C ABI rather than a PyTorch C++ extension: nothing here depends on the torch version
 * (the package works with any torch, including Debian 12's CPU torch 1.13 for the host tests), and
 * the ABI is one struct and four functions.
 *
 * Rules: every function returns a status code (KDA_C_OK or an error) and never lets an exception
 * out; on error, kda_c_last_error() returns the message of the failed call on this thread (what
 * was wrong and what to do), valid until the next kda_c call on the same thread. Plain C types
 * only: enums are int32_t with the named constants below, sizes int64_t, flags int32_t 0/1.
 * struct kda_c_forward_params mirrors kda::ForwardParams field for field; see kda.h for the
 * meaning and contract of each field. The layout only changes together with KDA_C_ABI_VERSION.
 */
#ifndef KDA_KDA_C_H
#define KDA_KDA_C_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 2: struct kda_c_forward_params lost `variant`: the library runs its one forward (the other
 * kernel variants are the C++ tools' lab, lab/README.md). */
#define KDA_C_ABI_VERSION 2

/* libkda_c.so is built with hidden visibility: only these functions are exported. */
#if defined(KDA_C_BUILDING) && defined(__GNUC__)
#define KDA_C_API __attribute__((visibility("default")))
#else
#define KDA_C_API
#endif

/* Status codes; 1..3 are kda::ErrorCode. */
#define KDA_C_OK 0
#define KDA_C_INVALID_ARGUMENT 1 /* the caller broke the contract (null pointer, bad size ...) */
#define KDA_C_UNSUPPORTED 2      /* valid math, not supported by these kernels (K != 128 ...) */
#define KDA_C_CUDA 3             /* a CUDA call failed (no device, launch failure ...) */
#define KDA_C_INTERNAL 4         /* anything else thrown inside (out of host memory ...) */

/* kda::DType */
#define KDA_C_BF16 0
#define KDA_C_F32 1

/* kda::GateInput */
#define KDA_C_GATE_CHUNK_LOG2 0 /* fp32 cumulative log2 gate, restarting every 64-token chunk */
#define KDA_C_GATE_RAW 1        /* raw projection with a_log, dt_bias, lower_bound */

/* kda::BetaInput */
#define KDA_C_BETA_PROBABILITY 0 /* post-sigmoid */
#define KDA_C_BETA_LOGITS 1      /* sigmoid in the kernel */

struct kda_c_forward_params {
  /* Device pointers (host pointer for cu_seqlens_host). */
  const void* q;
  const void* k;
  const void* v;
  const void* gate;
  const float* a_log;
  const float* dt_bias;
  const void* beta;
  const float* initial_state;
  void* out;
  float* final_state;
  const int32_t* cu_seqlens;
  const int32_t* cu_seqlens_host;
  void* workspace;
  /* Sizes and strides (elements between consecutive tokens; 0 = compact). */
  int64_t batch;
  int64_t tokens;
  int64_t q_token_stride;
  int64_t k_token_stride;
  int64_t v_token_stride;
  int64_t out_token_stride;
  int64_t workspace_bytes;
  int32_t heads;
  int32_t key_dim;
  int32_t value_dim;
  int32_t num_seqs;
  /* Enums (constants above) and flags (0 or 1). */
  int32_t q_dtype;
  int32_t gate_input;
  int32_t gate_dtype;
  int32_t beta_input;
  int32_t beta_dtype;
  int32_t fuse_q_l2norm;
  int32_t fuse_k_l2norm;
  float lower_bound;
};

/* KDA_C_ABI_VERSION of the library (callers check it against the header they were written for). */
KDA_C_API int32_t kda_c_abi_version(void);

/* The message of the last failed kda_c call on this thread ("" if none). */
KDA_C_API const char* kda_c_last_error(void);

/* Host validation only (kda::validate), no CUDA call: what kda_c_forward checks first. */
KDA_C_API int32_t kda_c_validate(const struct kda_c_forward_params* params);

/* *bytes = kda::forward_workspace_bytes(params): the device scratch the forward needs. */
KDA_C_API int32_t kda_c_workspace_bytes(const struct kda_c_forward_params* params, int64_t* bytes);

/* kda::chunk_forward on `stream` (a cudaStream_t; NULL = the legacy default stream). Asynchronous:
 * no host synchronization, no allocation; capturable in a CUDA graph. */
KDA_C_API int32_t kda_c_forward(const struct kda_c_forward_params* params, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KDA_KDA_C_H */
