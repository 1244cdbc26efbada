// gate_cumsum (kda-forward.md §3.1): one CTA per (64-token chunk of a sequence, head), one thread
// per channel walking the chunk's tokens. The arithmetic and the summation order are
// gate_activation.cuh's, shared with PREP's raw-gate load, so chunk_forward(GateInput::raw) sees
// exactly this kernel's output.
#include "common.cuh"
#include "gate_activation.cuh"

namespace kda {
namespace {

template <class Raw>
__global__ void __launch_bounds__(kHeadDim)
    gate_cumsum_kernel(const Raw* __restrict__ raw, const float* __restrict__ a_log,
                       const float* __restrict__ dt_bias, float* __restrict__ out,
                       detail::Sequences seqs, int heads, float lower_bound) {
  detail::ChunkRef chunk;
  if (!detail::find_chunk(seqs, blockIdx.x, chunk)) return;
  const int h = blockIdx.y;
  const int d = threadIdx.x;
  const detail::GateChannel channel =
      detail::gate_channel(a_log[h], dt_bias[static_cast<int64_t>(h) * kHeadDim + d]);
  const float scale = detail::gate_scale(lower_bound);
  // Sums of sigmoids in gate_activation.cuh's order: tokens 0 .. kGateHalf - 1 from 0, the rest
  // from 0 again on the first half's base.
  float running = 0.0f;
  float base = -0.0f;
  for (int i = 0; i < chunk.rows; ++i) {
    if (i == detail::kGateHalf) {
      base = detail::gate_second_half_base(scale, running);
      running = 0.0f;
    }
    const int64_t index = ((chunk.first_token + i) * heads + h) * kHeadDim + d;
    running = __fadd_rn(running, detail::gate_sigmoid(detail::load_as_float(raw + index), channel));
    out[index] = detail::gate_log2(running, scale, base);
  }
}

}  // namespace

void gate_cumsum(const GateCumsumParams& params, cudaStream_t stream) {
  validate(params);
  detail::current_device("gate_cumsum");
  const bool packed = params.cu_seqlens != nullptr;
  const int64_t total_tokens = params.batch * params.tokens;
  detail::Sequences seqs;
  seqs.cu = params.cu_seqlens;
  seqs.seq_len = params.tokens;
  seqs.num_seqs = packed ? params.num_seqs : static_cast<int>(params.batch);
  const int64_t capacity = detail::chunk_capacity(total_tokens, seqs.num_seqs);
  const dim3 grid(static_cast<unsigned>(capacity), static_cast<unsigned>(params.heads));
  if (params.raw_gate_dtype == DType::bf16) {
    gate_cumsum_kernel<<<grid, kHeadDim, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(params.raw_gate), params.a_log, params.dt_bias,
        params.out, seqs, params.heads, params.lower_bound);
  } else {
    gate_cumsum_kernel<<<grid, kHeadDim, 0, stream>>>(
        static_cast<const float*>(params.raw_gate), params.a_log, params.dt_bias, params.out,
        seqs, params.heads, params.lower_bound);
  }
  detail::check_launch("gate_cumsum");
  if (packed) {
    const int64_t row = int64_t{params.heads} * kHeadDim;  // fp32 elements per token
    detail::launch_zero_tail(params.out, row * 4, row * 4 / 16, params.tokens, params.cu_seqlens,
                             params.num_seqs, stream, "gate_cumsum: zero_tail");
  }
}

}  // namespace kda
