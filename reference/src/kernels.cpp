// The hot loops of kernels.h, one body each, compiled for AVX-512, AVX2 and the x86-64 baseline
// (GCC/Clang target attributes on thin wrappers that inline the body) and dispatched at run time.
// Only the register blocking (columns per block, a multiple of the vector width) differs between
// the instruction sets; see kernels.h for why the bits cannot.
#include "kernels.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "detail.h"
#include "kda/ref/reference.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define KDA_REF_X86 1
#define KDA_REF_TARGET_AVX512 __attribute__((target("avx512f")))
#define KDA_REF_TARGET_AVX2 __attribute__((target("avx2")))
#else
#define KDA_REF_X86 0
#endif
#define KDA_REF_INLINE inline __attribute__((always_inline))

// The vector helpers below return vectors wider than the baseline ABI's registers; they are
// always inlined, so no call ever passes one (GCC warns about the ABI all the same).
#pragma GCC diagnostic ignored "-Wpsabi"

namespace kda::ref {
namespace {

bool cpu_has(Isa isa) {
  switch (isa) {
    case Isa::baseline:
      return true;
#if KDA_REF_X86
    case Isa::avx2:
      return __builtin_cpu_supports("avx2");
    case Isa::avx512:
      return __builtin_cpu_supports("avx512f");
#else
    case Isa::avx2:
    case Isa::avx512:
      return false;
#endif
  }
  return false;
}

Isa widest_supported() {
  for (Isa isa : {Isa::avx512, Isa::avx2})
    if (cpu_has(isa)) return isa;
  return Isa::baseline;
}

std::atomic<Isa>& selected_isa() {
  static std::atomic<Isa> isa{widest_supported()};
  return isa;
}

}  // namespace

bool isa_supported(Isa isa) { return cpu_has(isa); }

Isa active_isa() { return selected_isa().load(std::memory_order_relaxed); }

void set_isa(Isa isa) {
  if (!cpu_has(isa))
    throw std::invalid_argument(std::string("set_isa: this CPU does not support ") +
                                isa_name(isa));
  selected_isa().store(isa, std::memory_order_relaxed);
}

const char* isa_name(Isa isa) {
  constexpr const char* kNames[] = {"baseline", "avx2", "avx512"};  // in enum order
  const auto index = static_cast<std::size_t>(isa);
  return index < std::size(kNames) ? kNames[index] : "?";
}

namespace detail {
namespace {

// Vectors of S, `bytes` wide (GCC/Clang vector extensions: element-wise IEEE operations, lowered
// to the instruction set of the function they are compiled in, split into narrower registers
// where needed). Loads and stores go through memcpy (unaligned, no aliasing questions).
template <class S, int bytes>
struct Vector {
  typedef S type __attribute__((vector_size(bytes)));
  static constexpr int lanes = bytes / static_cast<int>(sizeof(S));
};

template <class V, class S>
KDA_REF_INLINE V load(const S* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class V, class S>
KDA_REF_INLINE void store(S* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}

// --- recurrence ------------------------------------------------------------------------------

// The sweeps of kernels.h for value columns [c0, c0 + NV vectors) of every token; `state` points
// at column c0 of row 0, rows `ld` apart. Sweep 2 of token t and sweep 1 of token t + 1 run in one
// pass over the rows (each element still sees the same operations in the same order: its write
// and read for t, then its decay and delta product for t + 1), so the slice is loaded and stored
// once per token. p, delta and o live in registers.
template <class S, int bytes, int NV>
KDA_REF_INLINE void recurrent_slice(const RecurrentTokens<S>& in, S* state, int64_t ld,
                                    int64_t c0) {
  using V = typename Vector<S, bytes>::type;
  constexpr int L = Vector<S, bytes>::lanes;
  const int64_t K = in.key_dim, Vd = in.value_dim;
  if (in.tokens == 0) return;
  V p[NV] = {};  // sweep 1 of token 0
  for (int64_t r = 0; r < K; ++r) {
    S* s = state + r * ld;
    const S dr = in.decay[r], kr = in.k[r];
#pragma GCC unroll 16
    for (int i = 0; i < NV; ++i) {
      const V x = load<V>(s + i * L) * dr;
      store(s + i * L, x);
      p[i] = p[i] + kr * x;
    }
  }
  for (int64_t t = 0; t < in.tokens; ++t) {
    const S* k = in.k + t * K;
    const S* sq = in.sq + t * K;
    const S beta = in.beta[t];
    const S* v = in.v + t * Vd + c0;
    V delta[NV], o[NV] = {};
#pragma GCC unroll 16
    for (int i = 0; i < NV; ++i) delta[i] = beta * (load<V>(v + i * L) - p[i]);
    if (t + 1 < in.tokens) {
      const S* next_decay = in.decay + (t + 1) * K;
      const S* next_k = in.k + (t + 1) * K;
      V next_p[NV] = {};
      for (int64_t r = 0; r < K; ++r) {
        S* s = state + r * ld;
        const S kr = k[r], qr = sq[r], dr = next_decay[r], nkr = next_k[r];
#pragma GCC unroll 16
        for (int i = 0; i < NV; ++i) {
          const V x = load<V>(s + i * L) + kr * delta[i];
          o[i] = o[i] + qr * x;
          const V y = x * dr;
          store(s + i * L, y);
          next_p[i] = next_p[i] + nkr * y;
        }
      }
#pragma GCC unroll 16
      for (int i = 0; i < NV; ++i) p[i] = next_p[i];
    } else {
      for (int64_t r = 0; r < K; ++r) {
        S* s = state + r * ld;
        const S kr = k[r], qr = sq[r];
#pragma GCC unroll 16
        for (int i = 0; i < NV; ++i) {
          const V x = load<V>(s + i * L) + kr * delta[i];
          store(s + i * L, x);
          o[i] = o[i] + qr * x;
        }
      }
    }
    S* out = in.out + t * in.out_stride + c0;
#pragma GCC unroll 16
    for (int i = 0; i < NV; ++i) store(out + i * L, o[i]);
  }
}

// The same for the last value columns [c0, V), one column at a time.
template <class S>
KDA_REF_INLINE void recurrent_tail(const RecurrentTokens<S>& in, S* state, int64_t c0) {
  const int64_t K = in.key_dim, V = in.value_dim;
  for (int64_t c = c0; c < V; ++c) {
    for (int64_t t = 0; t < in.tokens; ++t) {
      const S* decay = in.decay + t * K;
      const S* k = in.k + t * K;
      const S* sq = in.sq + t * K;
      S p = 0;
      for (int64_t r = 0; r < K; ++r) {
        S& s = state[r * V + c];
        s = s * decay[r];
        p = p + k[r] * s;
      }
      const S delta = in.beta[t] * (in.v[t * V + c] - p);
      S o = 0;
      for (int64_t r = 0; r < K; ++r) {
        S& s = state[r * V + c];
        s = s + k[r] * delta;
        o = o + sq[r] * s;
      }
      in.out[t * in.out_stride + c] = o;
    }
  }
}

// Slices of four vectors, then one vector, then single columns. A four-vector slice is copied to
// a contiguous K x 4L buffer while it runs: in place its rows would be V apart, a stride that maps
// them onto a few L1 sets (V = 128 doubles: 16 of 64), so the slice would not stay in L1.
template <class S, int bytes>
KDA_REF_INLINE void recurrent_body(const RecurrentTokens<S>& in, S* state) {
  constexpr int L = Vector<S, bytes>::lanes;
  const int64_t K = in.key_dim, V = in.value_dim;
  int64_t c0 = 0;
  if (V >= 4 * L) {
    std::vector<S> slice(static_cast<std::size_t>(K * 4 * L));
    for (; c0 + 4 * L <= V; c0 += 4 * L) {
      for (int64_t r = 0; r < K; ++r)
        std::memcpy(slice.data() + r * 4 * L, state + r * V + c0, 4 * L * sizeof(S));
      recurrent_slice<S, bytes, 4>(in, slice.data(), 4 * L, c0);
      for (int64_t r = 0; r < K; ++r)
        std::memcpy(state + r * V + c0, slice.data() + r * 4 * L, 4 * L * sizeof(S));
    }
  }
  for (; c0 + L <= V; c0 += L) recurrent_slice<S, bytes, 1>(in, state + c0, V, c0);
  if (c0 < V) recurrent_tail(in, state, c0);
}

// --- GEMM ------------------------------------------------------------------------------------

// Rows [i0, i0 + MR) x columns [c0, c0 + NV vectors) of C: d in [0, depth) for every row
// (depth: the shallowest row's), then each row's remaining d in [depth, depth(i)) on its own.
// g.b and g.ldb here describe the panel of B that starts at column c0.
template <class S, int bytes, int MR, int NV>
KDA_REF_INLINE void gemm_block(const Gemm<S>& g, int64_t i0, int64_t c0, int64_t depth) {
  using V = typename Vector<S, bytes>::type;
  constexpr int L = Vector<S, bytes>::lanes;
  V acc[MR][NV] = {};
  for (int64_t d = 0; d < depth; ++d) {
    const S* b = g.b + d * g.ldb;
    V bv[NV];
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) bv[j] = load<V>(b + j * L);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const S a = g.a[(i0 + i) * g.a_row + d * g.a_col];
#pragma GCC unroll 16
      for (int j = 0; j < NV; ++j) acc[i][j] = acc[i][j] + a * bv[j];
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    const int64_t row_depth = g.lower ? std::min(g.inner, i0 + i + 1) : g.inner;
    for (int64_t d = depth; d < row_depth; ++d) {
      const S a = g.a[(i0 + i) * g.a_row + d * g.a_col];
      const S* b = g.b + d * g.ldb;
#pragma GCC unroll 16
      for (int j = 0; j < NV; ++j) acc[i][j] = acc[i][j] + a * load<V>(b + j * L);
    }
    S* out = g.c + (i0 + i) * g.ldc + c0;
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) store(out + j * L, acc[i][j]);
  }
}

// One element at a time, for the last columns.
template <class S>
KDA_REF_INLINE void gemm_element(const Gemm<S>& g, int64_t i, int64_t c) {
  const int64_t depth = g.lower ? std::min(g.inner, i + 1) : g.inner;
  S acc = 0;
  for (int64_t d = 0; d < depth; ++d)
    acc = acc + g.a[i * g.a_row + d * g.a_col] * g.b[d * g.ldb + c];
  g.c[i * g.ldc + c] = acc;
}

// One column panel [c0, c0 + NV vectors) of C, rows in blocks of MR. The panel of B is copied
// to a contiguous buffer first when `packed` (B's rows may be a cache-set-aliasing stride apart,
// and every row block reads the whole panel).
template <class S, int bytes, int NV>
KDA_REF_INLINE void gemm_columns(const Gemm<S>& g, int64_t c0, std::vector<S>* packed) {
  constexpr int MR = 4, width = NV * Vector<S, bytes>::lanes;
  Gemm<S> panel = g;
  panel.b = g.b + c0;
  if (packed != nullptr) {
    packed->resize(static_cast<std::size_t>(g.inner * width));
    for (int64_t d = 0; d < g.inner; ++d)
      std::memcpy(packed->data() + d * width, g.b + d * g.ldb + c0, width * sizeof(S));
    panel.b = packed->data();
    panel.ldb = width;
  }
  int64_t i0 = 0;
  for (; i0 + MR <= g.rows; i0 += MR)
    gemm_block<S, bytes, MR, NV>(panel, i0, c0, g.lower ? std::min(g.inner, i0 + 1) : g.inner);
  for (; i0 < g.rows; ++i0)
    gemm_block<S, bytes, 1, NV>(panel, i0, c0, g.lower ? std::min(g.inner, i0 + 1) : g.inner);
}

template <class S, int bytes>
KDA_REF_INLINE void gemm_body(const Gemm<S>& g) {
  constexpr int L = Vector<S, bytes>::lanes;
  int64_t c0 = 0;
  std::vector<S> packed;
  std::vector<S>* pack = g.rows > 4 ? &packed : nullptr;  // worth it once B is read more than once
  for (; c0 + 2 * L <= g.cols; c0 += 2 * L) gemm_columns<S, bytes, 2>(g, c0, pack);
  for (; c0 + L <= g.cols; c0 += L) gemm_columns<S, bytes, 1>(g, c0, pack);
  for (int64_t i = 0; i < g.rows; ++i)
    for (int64_t c = c0; c < g.cols; ++c) gemm_element(g, i, c);
}

// --- exp2 --------------------------------------------------------------------------------------

// 2^x for x in [-1022, 1023] (kernels.h, exp2_array).
KDA_REF_INLINE double exp2_normal(double x) {
  constexpr double kShift = 0x1.8p52;  // x + kShift rounds x to an integer in the low bits
  constexpr double kTaylor[14] = {
      1.0,                     // ln2^k / k!, correctly rounded
      0.6931471805599453,     0.24022650695910072,    0.05550410866482158,
      0.009618129107628477,   0.0013333558146428443,  0.0001540353039338161,
      1.5252733804059841e-05, 1.321548679014431e-06,  1.01780860092397e-07,
      7.054911620801123e-09,  4.4455382718708116e-10, 2.5678435993488206e-11,
      1.3691488853904128e-12};
  const double shifted = x + kShift;
  const double m = shifted - kShift;  // round(x), ties to even
  const double f = x - m;             // exact, in [-0.5, 0.5]
  double p = kTaylor[13];
  for (int k = 12; k >= 0; --k) p = p * f + kTaylor[k];
  // The low mantissa bits of `shifted` hold m (two's complement): m + 1023 shifted into the
  // exponent field is 2^m.
  uint64_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  bits = (bits + 1023) << 52;
  double scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

template <class S>
KDA_REF_INLINE void exp2_body(const S* x, S* y, int64_t n) {
  if constexpr (std::is_same_v<S, float>) {
    for (int64_t i = 0; i < n; ++i) y[i] = exp2_or_zero(x[i]);
  } else {
    // In pieces whose inputs are copied first: y may be x (in place), and the second pass needs
    // the inputs.
    constexpr int64_t kPiece = 64;
    double xs[kPiece];
    for (int64_t i0 = 0; i0 < n; i0 += kPiece) {
      const int64_t m = std::min(kPiece, n - i0);
      std::memcpy(xs, x + i0, static_cast<std::size_t>(m) * sizeof(double));
      for (int64_t i = 0; i < m; ++i) {
        const double xi = xs[i];
        const double clamped = xi > -1022.0 ? (xi < 1023.0 ? xi : 1023.0) : -1022.0;  // NaN: -1022
        y[i0 + i] = exp2_normal(clamped);
      }
      for (int64_t i = 0; i < m; ++i)
        if (!(xs[i] >= -1022.0 && xs[i] <= 1023.0)) y[i0 + i] = exp2_or_zero(xs[i]);
    }
  }
}

// --- conversions -------------------------------------------------------------------------------

template <class S>
KDA_REF_INLINE void widen_body(const float* src, S* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<S>(src[i]);
}

template <class S>
KDA_REF_INLINE void gate_difference_body(const float* gate, const float* previous, S* dst,
                                         int64_t n) {
  if (previous == nullptr) return widen_body(gate, dst, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<S>(gate[i]) - static_cast<S>(previous[i]);
}

// --- l2norm pieces ----------------------------------------------------------------------------

KDA_REF_INLINE float max_abs_body(const float* x, int64_t n, bool* finite) {
  constexpr int kLanes = 16;
  float lane_max[kLanes] = {};
  bool lane_finite[kLanes];
  for (bool& f : lane_finite) f = true;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float magnitude = std::fabs(x[i + l]);
      lane_finite[l] = lane_finite[l] & (magnitude <= std::numeric_limits<float>::max());
      lane_max[l] = lane_max[l] < magnitude ? magnitude : lane_max[l];
    }
  for (; i < n; ++i) {
    const float magnitude = std::fabs(x[i]);
    lane_finite[0] = lane_finite[0] & (magnitude <= std::numeric_limits<float>::max());
    lane_max[0] = lane_max[0] < magnitude ? magnitude : lane_max[0];
  }
  bool all_finite = true;
  float largest = 0.0f;
  for (int l = 0; l < kLanes; ++l) {
    all_finite = all_finite && lane_finite[l];
    largest = largest < lane_max[l] ? lane_max[l] : largest;
  }
  *finite = all_finite;
  return largest;
}

template <class S>
KDA_REF_INLINE void scaled_unit_rows_body(const float* x, S* y, int rows, int64_t dim,
                                          const S* unit, const S* eps_scaled) {
  constexpr int kMaxRows = 8;
  S ssq[kMaxRows] = {};
  for (int64_t d = 0; d < dim; ++d)
    for (int r = 0; r < rows; ++r) {
      const S value = static_cast<S>(x[r * dim + d]) * unit[r];
      ssq[r] += value * value;
    }
  for (int r = 0; r < rows; ++r) {
    const S rstd = S(1) / std::sqrt(ssq[r] + eps_scaled[r]);
    for (int64_t d = 0; d < dim; ++d)
      y[r * dim + d] = (static_cast<S>(x[r * dim + d]) * unit[r]) * rstd;
  }
}

// --- forward substitution --------------------------------------------------------------------

template <class S>
KDA_REF_INLINE void unit_lower_inverse_body(int64_t n, const S* a, int64_t lda, S* t,
                                            int64_t ldt) {
  for (int64_t i = 0; i < n; ++i) {
    S* row = t + i * ldt;
    for (int64_t c = 0; c < n; ++c) row[c] = c == i ? S(1) : S(0);
    for (int64_t j = 0; j < i; ++j) {
      const S aij = a[i * lda + j];
      const S* tj = t + j * ldt;
      // Columns c <= j only: T[j][c] is 0 for c > j, so those terms would subtract zeros.
      for (int64_t c = 0; c <= j; ++c) row[c] = row[c] - aij * tj[c];
    }
  }
}

// --- instruction-set wrappers ----------------------------------------------------------------
// Vectors of 64, 32 and 16 bytes.

#define KDA_REF_WRAPPERS(suffix, target, bytes)                                               \
  template <class S>                                                                       \
  target void recurrent_##suffix(const RecurrentTokens<S>& in, S* state) {                 \
    recurrent_body<S, bytes>(in, state);                                                   \
  }                                                                                        \
  template <class S>                                                                       \
  target void gemm_##suffix(const Gemm<S>& g) {                                            \
    gemm_body<S, bytes>(g);                                                                \
  }                                                                                        \
  template <class S>                                                                       \
  target void inverse_##suffix(int64_t n, const S* a, int64_t lda, S* t, int64_t ldt) {    \
    unit_lower_inverse_body(n, a, lda, t, ldt);                                            \
  }                                                                                        \
  template <class S>                                                                       \
  target void exp2_##suffix(const S* x, S* y, int64_t n) {                                 \
    exp2_body(x, y, n);                                                                    \
  }                                                                                        \
  target float max_abs_##suffix(const float* x, int64_t n, bool* finite) {                 \
    return max_abs_body(x, n, finite);                                                     \
  }                                                                                        \
  template <class S>                                                                       \
  target void scaled_unit_rows_##suffix(const float* x, S* y, int rows, int64_t dim,       \
                                        const S* unit, const S* eps_scaled) {              \
    scaled_unit_rows_body(x, y, rows, dim, unit, eps_scaled);                              \
  }                                                                                        \
  template <class S>                                                                       \
  target void widen_##suffix(const float* src, S* dst, int64_t n) {                        \
    widen_body(src, dst, n);                                                               \
  }                                                                                        \
  template <class S>                                                                       \
  target void gate_difference_##suffix(const float* gate, const float* previous, S* dst,   \
                                       int64_t n) {                                        \
    gate_difference_body(gate, previous, dst, n);                                          \
  }

#if KDA_REF_X86
KDA_REF_WRAPPERS(avx512, KDA_REF_TARGET_AVX512, 64)
KDA_REF_WRAPPERS(avx2, KDA_REF_TARGET_AVX2, 32)
#endif
KDA_REF_WRAPPERS(baseline, , 16)
#undef KDA_REF_WRAPPERS

}  // namespace

// Calls name_<isa>(args...) for the active instruction set.
#if KDA_REF_X86
#define KDA_REF_DISPATCH(name, ...)          \
  switch (active_isa()) {                    \
    case Isa::avx512:                        \
      return name##_avx512(__VA_ARGS__);     \
    case Isa::avx2:                          \
      return name##_avx2(__VA_ARGS__);       \
    default:                                 \
      return name##_baseline(__VA_ARGS__);   \
  }
#else
#define KDA_REF_DISPATCH(name, ...) return name##_baseline(__VA_ARGS__)
#endif

template <class S>
void recurrent_tokens(const RecurrentTokens<S>& in, S* state) {
  KDA_REF_DISPATCH(recurrent, in, state);
}

template <class S>
void gemm(const Gemm<S>& g) {
  KDA_REF_DISPATCH(gemm, g);
}

template <class S>
void unit_lower_inverse(int64_t n, const S* a, int64_t lda, S* t, int64_t ldt) {
  KDA_REF_DISPATCH(inverse, n, a, lda, t, ldt);
}

template <class S>
void exp2_array(const S* x, S* y, int64_t n) {
  KDA_REF_DISPATCH(exp2, x, y, n);
}

float max_abs(const float* x, int64_t n, bool* finite) {
  KDA_REF_DISPATCH(max_abs, x, n, finite);
}

template <class S>
void scaled_unit_rows(const float* x, S* y, int rows, int64_t dim, const S* unit,
                      const S* eps_scaled) {
  KDA_REF_DISPATCH(scaled_unit_rows, x, y, rows, dim, unit, eps_scaled);
}

template <class S>
void widen(const float* src, S* dst, int64_t n) {
  KDA_REF_DISPATCH(widen, src, dst, n);
}

template <class S>
void gate_difference(const float* gate, const float* previous, S* dst, int64_t n) {
  KDA_REF_DISPATCH(gate_difference, gate, previous, dst, n);
}

#undef KDA_REF_DISPATCH

template void recurrent_tokens<float>(const RecurrentTokens<float>&, float*);
template void recurrent_tokens<double>(const RecurrentTokens<double>&, double*);
template void gemm<float>(const Gemm<float>&);
template void gemm<double>(const Gemm<double>&);
template void unit_lower_inverse<float>(int64_t, const float*, int64_t, float*, int64_t);
template void unit_lower_inverse<double>(int64_t, const double*, int64_t, double*, int64_t);
template void exp2_array<float>(const float*, float*, int64_t);
template void exp2_array<double>(const double*, double*, int64_t);
template void scaled_unit_rows<float>(const float*, float*, int, int64_t, const float*,
                                      const float*);
template void scaled_unit_rows<double>(const float*, double*, int, int64_t, const double*,
                                       const double*);
template void widen<float>(const float*, float*, int64_t);
template void widen<double>(const float*, double*, int64_t);
template void gate_difference<float>(const float*, const float*, float*, int64_t);
template void gate_difference<double>(const float*, const float*, double*, int64_t);

}  // namespace detail
}  // namespace kda::ref
