// l2norm: one quad of threads per 128-element row (32 elements per thread), y in bf16.
#include <algorithm>

#include "common.cuh"
#include "l2norm_row.cuh"

namespace kda {
namespace {

// A row is normalized by a quad of threads (32 consecutive elements each, 64-128 B of loads
// per thread), so a warp has 8 rows in flight: the memory-level parallelism a streaming pass
// needs (one row per warp with 8-byte loads measured 175 us for h96, 54% of the copy rate).
constexpr int kLanesPerRow = 4;
constexpr int kPerThread = kHeadDim / kLanesPerRow;
constexpr int kThreads = 256;
constexpr int kRowsPerCta = kThreads / kLanesPerRow;

template <class In>
__global__ void __launch_bounds__(kThreads)
    l2norm_kernel(const In* __restrict__ x, __nv_bfloat16* __restrict__ y, int64_t rows,
                  int64_t x_stride, int64_t y_stride) {
  const int group = threadIdx.x / kLanesPerRow;
  const int column = (threadIdx.x % kLanesPerRow) * kPerThread;
  // The loop trip count is the same for every thread of a warp only if rows is a multiple of 8;
  // so out-of-range groups keep iterating with a clamped row and just do not store: the row
  // function shuffles across the whole warp.
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kRowsPerCta;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kRowsPerCta;
  for (int64_t base = first; base < rows; base += stride) {
    const int64_t r = base + group;
    const int64_t row = r < rows ? r : rows - 1;
    float v[kPerThread];
    detail::load_run(x + row * x_stride + column, v);
    __nv_bfloat16 out[kPerThread];
    detail::l2norm_row_bf16<kLanesPerRow, kPerThread>(v, out);
    if (r < rows) detail::store_run(y + row * y_stride + column, out);
  }
}

}  // namespace

void l2norm(const L2NormParams& params, cudaStream_t stream) {
  validate(params);
  if (params.rows == 0) return;
  detail::current_device("l2norm");
  const int64_t x_stride = params.x_row_stride == 0 ? params.dim : params.x_row_stride;
  const int64_t y_stride = params.y_row_stride == 0 ? params.dim : params.y_row_stride;
  // Grid-stride over rows; 2^20 CTAs is far more than the GPU holds at once.
  const int64_t blocks =
      std::min<int64_t>((params.rows + kRowsPerCta - 1) / kRowsPerCta, int64_t{1} << 20);
  auto* y = static_cast<__nv_bfloat16*>(params.y);
  if (params.x_dtype == DType::bf16) {
    l2norm_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(params.x), y, params.rows, x_stride, y_stride);
  } else {
    l2norm_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        static_cast<const float*>(params.x), y, params.rows, x_stride, y_stride);
  }
  detail::check_launch("l2norm");
}

}  // namespace kda
