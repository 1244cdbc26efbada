// l2norm: one warp per 128-element row (4 elements per lane), y in bf16.
#include <algorithm>

#include "common.cuh"
#include "l2norm_row.cuh"

namespace kda {
namespace {

constexpr int kWarps = 8;  // rows per CTA per step

template <class In>
__global__ void __launch_bounds__(kWarps * 32)
    l2norm_kernel(const In* __restrict__ x, __nv_bfloat16* __restrict__ y, int64_t rows,
                  int64_t x_stride, int64_t y_stride) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  // Warp-uniform loop: the row function shuffles across the whole warp.
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + warp; r < rows;
       r += static_cast<int64_t>(gridDim.x) * kWarps) {
    float v[4];
    detail::load4(x + r * x_stride + 4 * lane, v);
    __nv_bfloat16 out[4];
    detail::l2norm_row_bf16(v, out);
    detail::store4(y + r * y_stride + 4 * lane, out);
  }
}

}  // namespace

void l2norm(const L2NormParams& params, cudaStream_t stream) {
  validate(params);
  if (params.rows == 0) return;
  detail::current_device("l2norm");
  const int64_t x_stride = params.x_row_stride == 0 ? params.dim : params.x_row_stride;
  const int64_t y_stride = params.y_row_stride == 0 ? params.dim : params.y_row_stride;
  // Grid-stride over rows; 2^20 CTAs of 8 warps is far more than the GPU holds at once.
  const int64_t blocks = std::min<int64_t>((params.rows + kWarps - 1) / kWarps, int64_t{1} << 20);
  auto* y = static_cast<__nv_bfloat16*>(params.y);
  if (params.x_dtype == DType::bf16) {
    l2norm_kernel<<<static_cast<unsigned>(blocks), kWarps * 32, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(params.x), y, params.rows, x_stride, y_stride);
  } else {
    l2norm_kernel<<<static_cast<unsigned>(blocks), kWarps * 32, 0, stream>>>(
        static_cast<const float*>(params.x), y, params.rows, x_stride, y_stride);
  }
  detail::check_launch("l2norm");
}

}  // namespace kda
