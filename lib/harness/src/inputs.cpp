// Seeded inputs (kda-forward.md §9.3; the exact recipe is in shapes/README.md). Every value is a
// pure function of (seed, tensor stream, flat element index), so the fill order and the thread
// count never change a bit.
#include "kda/harness/inputs.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "kda/harness/random.h"

namespace kda::harness {

// ---------------------------------------------------------------------------------------------
// bf16

uint16_t float_to_bf16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if (std::isnan(x)) {
    // Keep the sign and the top payload bits; force a quiet-NaN bit so truncation can't make inf.
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  // Round to nearest, ties to even: add 0x7FFF plus the lowest kept bit, then truncate. A carry
  // into the exponent is the correct rounding up (and gives inf only past the largest bf16).
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float bf16_to_float(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

float kernel_lower_bound(double lower_bound) {
  const float nearest = static_cast<float>(lower_bound);
  if (static_cast<double>(nearest) < kda::ref::kMinGateLowerBound) {
    return std::nextafter(nearest, 0.0f);
  }
  return nearest;
}

// ---------------------------------------------------------------------------------------------
// HostInputs

int64_t HostInputs::num_states() const {
  return cu_seqlens.empty() ? batch : static_cast<int64_t>(cu_seqlens.size()) - 1;
}

kda::ref::Problem HostInputs::to_reference() const {
  kda::ref::Problem problem;
  problem.batch = batch;
  problem.tokens = tokens;
  problem.heads = heads;
  problem.key_dim = key_dim;
  problem.value_dim = value_dim;
  problem.cu_seqlens = cu_seqlens;
  auto widen = [](const std::vector<uint16_t>& bits) {
    std::vector<float> out(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_float(bits[i]);
    return out;
  };
  problem.q = widen(q);
  problem.k = widen(k);
  problem.v = widen(v);
  problem.gate = gate;
  problem.beta = beta;
  problem.initial_state = initial_state;
  return problem;
}

// ---------------------------------------------------------------------------------------------
// Generation

namespace {

// Stream ids: one per tensor (and per auxiliary draw). Never renumber: that changes the inputs.
enum Stream : uint64_t {
  kStreamQ = 1,
  kStreamK = 2,
  kStreamV = 3,
  kStreamRawGate = 4,
  kStreamALog = 5,
  kStreamDtBias = 6,
  kStreamBeta = 7,
  kStreamInitialState = 8,
  kStreamHugeSign = 9,
  kStreamHugeMagnitude = 10,
  kStreamKHugeSign = 11,       // k_rows: the huge rows of k, as 9 / 10 are q's
  kStreamKHugeMagnitude = 12,
};

constexpr int kGateChunk = 64;         // the kernels' chunk size
constexpr double kStateScale = 0.01;   // initial state = 0.01 * randn
constexpr double kBf16Max = 3.3895313892515355e38;  // largest finite bf16 (0x7F7F)

// Runs body(i) for i in [0, n) on all cores; bodies touch disjoint elements. Small loops stay on
// one thread (a parallel region costs more than a few rows of work).
template <class Body>
void parallel_for(int64_t n, Body body) {
#pragma omp parallel for schedule(static) if (n > 64)
  for (int64_t i = 0; i < n; ++i) body(i);
}

// Element i of `out` = bf16(float(randn)), for every i in [begin, end).
void fill_normal_bf16(uint64_t seed, uint64_t stream, int64_t begin, int64_t end,
                      std::vector<uint16_t>& out) {
  for_each_normal(seed, stream, static_cast<uint64_t>(begin), static_cast<uint64_t>(end),
                  [&](uint64_t i, double x) { out[i] = float_to_bf16(static_cast<float>(x)); });
}

// Layout facts shared by the fill functions.
struct Layout {
  int64_t batch = 0, tokens = 0, heads = 0, key_dim = 0, value_dim = 0;
  int64_t active_end = 0;  // packed: cu[N]; dense: tokens (every token of every row is active)

  int64_t rows() const { return batch * tokens * heads; }  // (b, t, h) triples
  // Token index t of a flat (b, t, h) row.
  int64_t token_of_row(int64_t row) const { return (row / heads) % tokens; }
  bool active(int64_t row) const { return token_of_row(row) < active_end; }
};

// The q row-scale suite: factor of token t, and which tokens are zero or huge (kda-forward §9.3).
struct RowSuitePlan {
  double log_min = 0.0, log_max = 0.0;
  int64_t active = 0;                       // active tokens per batch row
  std::vector<int64_t> zero_tokens;         // set to exactly 0 (applied last: wins collisions)
  std::vector<int64_t> huge_tokens;         // one per huge value
  std::vector<double> huge_values;          // clamped to the largest finite bf16

  double scale(int64_t t) const {
    const double frac = active > 1 ? static_cast<double>(t) / static_cast<double>(active - 1) : 0.0;
    return portable_exp(log_min + (log_max - log_min) * frac);
  }
};

RowSuitePlan plan_row_suite(const QRowSuite& suite, int64_t active) {
  RowSuitePlan plan;
  plan.log_min = portable_log(suite.min_scale);
  plan.log_max = portable_log(suite.max_scale);
  plan.active = active;
  if (active == 0) return plan;
  // Evenly spaced marker rows: j * active / (count + 1) for j = 1..count (T/2; T/3 and 2T/3).
  const int64_t zeros = suite.zero_rows;
  for (int64_t j = 1; j <= zeros; ++j) plan.zero_tokens.push_back(active * j / (zeros + 1));
  const int64_t huge = static_cast<int64_t>(suite.huge_values.size());
  for (int64_t j = 1; j <= huge; ++j) {
    plan.huge_tokens.push_back(active * j / (huge + 1));
    plan.huge_values.push_back(std::min(suite.huge_values[static_cast<size_t>(j - 1)], kBf16Max));
  }
  return plan;
}

// The row-scale suite on one active row of token t (kda-forward.md §9.3): `drawn` holds the
// row's fp32 draws, element i of the tensor at row_base + i; they are scaled in fp64 and rounded
// to fp32, huge rows replaced (sign and magnitude from their own streams), zero rows zeroed.
void apply_row_suite(const RowSuitePlan& plan, int64_t t, int64_t row_base, uint64_t seed,
                     uint64_t sign_stream, uint64_t magnitude_stream, float* drawn, int64_t dim) {
  const double factor = plan.scale(t);
  for (int64_t d = 0; d < dim; ++d) drawn[d] = static_cast<float>(drawn[d] * factor);
  // The marker tokens are sorted: look t up instead of scanning every marker per row (a shape
  // file may ask for up to a million zero rows).
  const auto [huge_begin, huge_end] =
      std::equal_range(plan.huge_tokens.begin(), plan.huge_tokens.end(), t);
  for (auto it = huge_begin; it != huge_end; ++it) {
    const size_t j = static_cast<size_t>(it - plan.huge_tokens.begin());
    for (int64_t d = 0; d < dim; ++d) {
      const int64_t i = row_base + d;
      const double sign = (random_bits(seed, sign_stream, i) >> 63) != 0 ? -1.0 : 1.0;
      const double magnitude = 0.5 + 0.5 * random_uniform(seed, magnitude_stream, i);
      drawn[d] = static_cast<float>(sign * plan.huge_values[j] * magnitude);
    }
  }
  if (std::binary_search(plan.zero_tokens.begin(), plan.zero_tokens.end(), t)) {
    for (int64_t d = 0; d < dim; ++d) drawn[d] = 0.0f;  // +0.0
  }
}

void fill_q(const Layout& layout, const QRowSuite& suite, uint64_t seed, std::vector<uint16_t>& q) {
  const int64_t dim = layout.key_dim;
  q.resize(static_cast<size_t>(layout.rows() * dim));
  const RowSuitePlan plan = suite.enabled ? plan_row_suite(suite, layout.active_end) : RowSuitePlan{};
  parallel_for(layout.rows(), [&](int64_t row) {
    if (!suite.enabled || !layout.active(row)) {
      fill_normal_bf16(seed, kStreamQ, row * dim, (row + 1) * dim, q);
      return;
    }
    // Drawn in fp32, scaled in fp64, rounded to fp32 and then to bf16.
    std::vector<float> drawn(static_cast<size_t>(dim));
    for_each_normal(seed, kStreamQ, static_cast<uint64_t>(row * dim),
                    static_cast<uint64_t>((row + 1) * dim),
                    [&](uint64_t i, double x) { drawn[i - row * dim] = static_cast<float>(x); });
    apply_row_suite(plan, layout.token_of_row(row), row * dim, seed, kStreamHugeSign,
                    kStreamHugeMagnitude, drawn.data(), dim);
    for (int64_t d = 0; d < dim; ++d) q[row * dim + d] = float_to_bf16(drawn[d]);
  });
}

// k = l2norm(randn): drawn in fp32 (with k_rows: the row-scale suite applied to the draw, as for
// q), normalized in fp64 by the reference's own l2norm, then bf16.
// raw_k = the same draw rounded to bf16 (what an engine passes before its own norm).
void fill_k(const Layout& layout, const QRowSuite& suite, uint64_t seed, std::vector<uint16_t>& k,
            std::vector<uint16_t>& raw_k) {
  const RowSuitePlan plan = suite.enabled ? plan_row_suite(suite, layout.active_end) : RowSuitePlan{};
  const int64_t dim = layout.key_dim;
  const int64_t rows = layout.rows();
  k.resize(static_cast<size_t>(rows * dim));
  raw_k.resize(k.size());
  constexpr int64_t kBlockRows = 256;
  const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
  parallel_for(blocks, [&](int64_t block) {
    const int64_t first = block * kBlockRows;
    const int64_t count = std::min(kBlockRows, rows - first);
    std::vector<float> drawn(static_cast<size_t>(count * dim));
    std::vector<double> normalized(drawn.size());
    const uint64_t base = static_cast<uint64_t>(first * dim);
    for_each_normal(seed, kStreamK, base, base + drawn.size(),
                    [&](uint64_t i, double x) { drawn[i - base] = static_cast<float>(x); });
    if (suite.enabled) {  // k_rows: the suite on the draw, before both roundings
      for (int64_t r = 0; r < count; ++r) {
        const int64_t row = first + r;
        if (!layout.active(row)) continue;
        apply_row_suite(plan, layout.token_of_row(row), row * dim, seed, kStreamKHugeSign,
                        kStreamKHugeMagnitude, drawn.data() + r * dim, dim);
      }
    }
    kda::ref::l2norm_rows<double>(drawn.data(), normalized.data(), count, dim);
    for (int64_t j = 0; j < count * dim; ++j) {
      k[first * dim + j] = float_to_bf16(static_cast<float>(normalized[j]));
      raw_k[first * dim + j] = float_to_bf16(drawn[j]);
    }
  });
}

// Cumulative log2 gate from the §3.1 producer with the shape's recipe (the contract default:
// raw randn (bf16), A_log ~ U(0,1), dt_bias ~ U(0,1), lower bound -5). The draws are
// lo + (hi - lo) u and mean + std x, which are exactly u and x for the contract's (0, 1) ranges and
// N(0, 1), so the contract inputs keep their bits. Fills in.gate and the producer's inputs the
// raw path passes: in.raw_gate (the bf16 raw gate), in.a_log, in.dt_bias, in.lower_bound.
void make_gate(const Layout& layout, const std::vector<int32_t>& cu, uint64_t seed,
               const GateRecipe& recipe, HostInputs& in) {
  const int64_t dim = layout.key_dim;
  std::vector<float> raw(static_cast<size_t>(layout.rows() * dim));
  in.raw_gate.resize(raw.size());
  parallel_for(layout.rows(), [&](int64_t row) {
    for_each_normal(seed, kStreamRawGate, static_cast<uint64_t>(row * dim),
                    static_cast<uint64_t>((row + 1) * dim), [&](uint64_t i, double x) {
                      const double drawn = static_cast<float>(x);
                      const float value = static_cast<float>(recipe.raw_mean + recipe.raw_std * drawn);
                      in.raw_gate[i] = float_to_bf16(value);
                      raw[i] = bf16_to_float(in.raw_gate[i]);
                    });
  });
  auto uniform = [&](const GateRecipe::Range& range, uint64_t stream, int64_t i) {
    return static_cast<float>(range.lo + (range.hi - range.lo) * random_uniform(seed, stream, i));
  };
  std::vector<float> a_log = recipe.a_log_values;
  if (a_log.empty()) {
    a_log.resize(static_cast<size_t>(layout.heads));
    for (int64_t h = 0; h < layout.heads; ++h) a_log[h] = uniform(recipe.a_log, kStreamALog, h);
  }
  std::vector<float> dt_bias = recipe.dt_bias_values;
  if (dt_bias.empty()) {
    dt_bias.resize(static_cast<size_t>(layout.heads * dim));
    for (int64_t i = 0; i < layout.heads * dim; ++i) dt_bias[i] = uniform(recipe.dt_bias, kStreamDtBias, i);
  }
  std::vector<float> gate = kda::ref::gate_cumsum<double>(raw, a_log, dt_bias, layout.batch,
                                                          layout.tokens, layout.heads, dim,
                                                          recipe.lower_bound, cu, kGateChunk);
  // The reference zeroes the inactive suffix already; the harness states its own contract.
  parallel_for(layout.rows(), [&](int64_t row) {
    if (layout.active(row)) return;
    std::fill_n(gate.begin() + row * dim, dim, 0.0f);
  });
  in.gate = std::move(gate);
  in.a_log = std::move(a_log);
  in.dt_bias = std::move(dt_bias);
  // The gate above used the bound in fp64; the kernels take it in fp32. The two differ only
  // for bounds that are not fp32 numbers (-5.9 of the long-memory shapes: by 1.6e-8 relative).
  in.lower_bound = kernel_lower_bound(recipe.lower_bound);
}

}  // namespace

HostInputs make_inputs(const ShapeSpec& shape, uint64_t seed) {
  seed = shape.seed.value_or(seed);
  HostInputs in;
  in.batch = shape.batch_rows();
  in.tokens = shape.tokens();
  in.heads = shape.heads;
  in.key_dim = shape.key_dim;
  in.value_dim = shape.value_dim;
  in.cu_seqlens = shape.cu_seqlens();
  in.want_final_state = shape.final_state;
  if (in.batch < 1 || in.tokens < 1 || in.heads < 1 || in.key_dim < 1 || in.value_dim < 1) {
    throw std::invalid_argument("make_inputs: shape '" + shape.id +
                                "' has an empty dimension (load shapes through the parser)");
  }

  Layout layout;
  layout.batch = in.batch;
  layout.tokens = in.tokens;
  layout.heads = in.heads;
  layout.key_dim = in.key_dim;
  layout.value_dim = in.value_dim;
  layout.active_end = in.cu_seqlens.empty() ? in.tokens : in.cu_seqlens.back();

  fill_q(layout, shape.q_rows, seed, in.q);
  fill_k(layout, shape.k_rows, seed, in.k, in.raw_k);
  const int64_t value_dim = in.value_dim;
  in.v.resize(static_cast<size_t>(layout.rows() * value_dim));
  parallel_for(layout.rows(), [&](int64_t row) {
    fill_normal_bf16(seed, kStreamV, row * value_dim, (row + 1) * value_dim, in.v);
  });
  GateRecipe recipe = shape.gate;
  load_gate_files(shape.id, in.heads, in.key_dim, recipe);  // no-op when already read
  make_gate(layout, in.cu_seqlens, seed, recipe, in);
  in.gate_recipe = recipe.label();

  // beta = sigmoid of the fp32 draw; the raw path's logits are that draw rounded to bf16. Rows
  // at or after cu[N] hold 0 in both (a logit of 0 is no beta of 0, but no kernel reads them).
  in.beta.resize(static_cast<size_t>(layout.rows()));
  in.beta_logits.resize(in.beta.size());
  for_each_normal(seed, kStreamBeta, 0, in.beta.size(), [&](uint64_t row, double x) {
    const float drawn = static_cast<float>(x);
    const bool active = layout.active(static_cast<int64_t>(row));
    in.beta[row] = active ? static_cast<float>(portable_sigmoid(drawn)) : 0.0f;
    in.beta_logits[row] = active ? float_to_bf16(drawn) : uint16_t{0};
  });

  if (shape.initial_state) {
    // [N, H, K, V]: filled one V-row at a time.
    const int64_t state_rows = in.num_states() * in.heads * in.key_dim;
    in.initial_state.resize(static_cast<size_t>(state_rows * value_dim));
    parallel_for(state_rows, [&](int64_t row) {
      for_each_normal(seed, kStreamInitialState, static_cast<uint64_t>(row * value_dim),
                      static_cast<uint64_t>((row + 1) * value_dim), [&](uint64_t i, double x) {
                        const double drawn = static_cast<float>(x);
                        in.initial_state[i] = static_cast<float>(kStateScale * drawn);
                      });
    });
  }
  return in;
}

}  // namespace kda::harness
