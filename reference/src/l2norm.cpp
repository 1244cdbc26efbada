// l2norm_rows: y = x / sqrt(sum x^2 + eps) per row (kda-forward.md §4.1, §9.1), in precision S,
// valid for every finite row.
//
// A plain sum of squares overflows in fp32 once ||x|| >~ 1.8e19 (the row would come out as zeros)
// and loses the small entries of tiny rows to underflow. Scaling the row by an exact power of two
// 2^-e, chosen so that the largest entry lies in [0.5, 1), avoids both, and the identity
//   x / sqrt(ssq + eps) = x' / sqrt(ssq' + eps * 2^-2e),   x' = x * 2^-e,  ssq' = sum x'^2
// keeps the formula unchanged (the scaling itself is exact).
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "detail.h"
#include "kda/ref/reference.h"
#include "kernels.h"

namespace kda::ref {
namespace {

// The textbook formula, summing in S. Used where it is exact enough (see callers) and for rows
// with NaN/inf, where it propagates them: a NaN makes the whole row NaN, an inf entry gives
// inf * 0 = NaN (and the finite entries 0), never a plausible unit vector.
template <class S>
void l2norm_row_unscaled(const float* x, S* y, int64_t dim, S eps) {
  S ssq = 0;
  for (int64_t d = 0; d < dim; ++d) ssq += static_cast<S>(x[d]) * static_cast<S>(x[d]);
  const S rstd = S(1) / std::sqrt(ssq + eps);
  for (int64_t d = 0; d < dim; ++d) y[d] = static_cast<S>(x[d]) * rstd;
}

// Row maximum |x| and whether every entry is finite (detail::max_abs: exact in any order).
inline float row_max_abs(const float* x, int64_t dim, bool* finite) {
  return detail::max_abs(x, dim, finite);
}

// The power-of-two scaling of a row: x' = x * unit with unit = 2^-e, and eps * 2^-2e. `simple`
// when the row is finite and non-zero, unit is representable and the scaled eps finite, the
// case l2norm_rows_simple handles; every other row goes through l2norm_row.
template <class S>
struct RowScale {
  bool simple = false;
  S unit = 1, eps_scaled = 0;
};

template <class S>
RowScale<S> row_scale(const float* x, int64_t dim, S eps) {
  RowScale<S> scale;
  bool finite = true;
  const float largest = row_max_abs(x, dim, &finite);
  if (!finite || largest == 0.0f) return scale;
  int e = 0;
  std::frexp(largest, &e);  // largest = f * 2^e, f in [0.5, 1)
  scale.eps_scaled = std::ldexp(eps, -2 * e);
  scale.unit = std::ldexp(S(1), -e);
  scale.simple = std::isfinite(scale.eps_scaled) && std::isfinite(scale.unit);
  return scale;
}

template <class S>
void l2norm_row(const float* x, S* y, int64_t dim, S eps) {
  bool finite = true;
  const float largest = row_max_abs(x, dim, &finite);
  if (!finite) return l2norm_row_unscaled(x, y, dim, eps);
  if (largest == 0.0f) {
    std::fill(y, y + dim, S(0));
    return;
  }
  int e = 0;
  std::frexp(largest, &e);  // largest = f * 2^e, f in [0.5, 1)
  const S eps_scaled = std::ldexp(eps, -2 * e);
  if (!std::isfinite(eps_scaled)) {
    // Only for S = float and tiny rows (max|x| < ~2^-74 with eps = 1e-6). Overflow means
    // eps > 2^(128 + 2e) while ssq < dim * 2^(2e), so ssq / eps < dim * 2^-128: ssq + eps
    // rounds to eps however ssq is computed (even if its terms underflow), and the unscaled
    // formula returns x / sqrt(eps), the correctly rounded answer. (In double the scaled eps
    // cannot overflow: e >= -148 for any float input.)
    return l2norm_row_unscaled(x, y, dim, eps);
  }
  // Multiplying by the power of two 2^-e is exact (as ldexp) unless the product falls below
  // S's normal range; such entries are < 2^-125 of the row maximum and do not matter. 2^-e is
  // not representable in float only for e < -127, which needs eps < ~2^-108; use ldexp there.
  const S unit = std::ldexp(S(1), -e);
  const bool unit_representable = std::isfinite(unit);
  auto scaled = [&](float value) {
    return unit_representable ? static_cast<S>(value) * unit
                              : std::ldexp(static_cast<S>(value), -e);
  };
  S ssq = 0;
  for (int64_t d = 0; d < dim; ++d) {
    const S value = scaled(x[d]);
    ssq += value * value;  // ssq in [0.25, dim]: no overflow, no harmful underflow
  }
  // Multiply by the reciprocal, as the kernels do (y = x * rstd).
  const S rstd = S(1) / std::sqrt(ssq + eps_scaled);
  for (int64_t d = 0; d < dim; ++d) y[d] = scaled(x[d]) * rstd;
}

// kGroup simple rows at once (detail::scaled_unit_rows: l2norm_row's operations for each row,
// the rows' sums of squares interleaved), so each row gets exactly l2norm_row's bits.
constexpr int kGroup = 4;

template <class S>
void l2norm_rows_simple(const float* x, S* y, int64_t dim, const RowScale<S>* scale) {
  S unit[kGroup], eps_scaled[kGroup];
  for (int r = 0; r < kGroup; ++r) {
    unit[r] = scale[r].unit;
    eps_scaled[r] = scale[r].eps_scaled;
  }
  detail::scaled_unit_rows(x, y, kGroup, dim, unit, eps_scaled);
}

// Rows [first, first + kGroup): interleaved when all are simple, else one by one.
template <class S>
void l2norm_group(const float* x, S* y, int64_t first, int64_t dim, S eps) {
  RowScale<S> scale[kGroup];
  bool simple = true;
  for (int r = 0; r < kGroup; ++r) {
    scale[r] = row_scale(x + (first + r) * dim, dim, eps);
    simple = simple && scale[r].simple;
  }
  if (simple) return l2norm_rows_simple(x + first * dim, y + first * dim, dim, scale);
  for (int r = 0; r < kGroup; ++r) l2norm_row(x + (first + r) * dim, y + (first + r) * dim, dim, eps);
}

}  // namespace

template <class S>
void l2norm_rows(const float* x, S* y, int64_t rows, int64_t dim, double eps) {
  if (!(eps >= 0.0) || !std::isfinite(eps))
    throw std::invalid_argument("l2norm_rows: eps must be finite and >= 0");
  const S eps_s = static_cast<S>(eps);
  const int64_t groups = rows / kGroup;
  // Rows are independent, so threads change no bit; only large calls (kda-check's q_hat of a
  // whole problem) are worth a parallel region.
  constexpr int64_t kParallelRows = 16384;
  if (rows >= kParallelRows) {
#pragma omp parallel for schedule(static)
    for (int64_t g = 0; g < groups; ++g) l2norm_group(x, y, g * kGroup, dim, eps_s);
  } else {
    for (int64_t g = 0; g < groups; ++g) l2norm_group(x, y, g * kGroup, dim, eps_s);
  }
  for (int64_t r = groups * kGroup; r < rows; ++r) l2norm_row(x + r * dim, y + r * dim, dim, eps_s);
}

template void l2norm_rows<float>(const float*, float*, int64_t, int64_t, double);
template void l2norm_rows<double>(const float*, double*, int64_t, int64_t, double);

}  // namespace kda::ref
