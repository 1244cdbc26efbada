// replay_forward: the chunked algorithm with the default kernel's rounding points (replay.h).
#include "kda/ref/replay.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <stdexcept>
#include <string>

#include "detail.h"

namespace kda::ref {

// ---------------------------------------------------------------------------------------------
// Formats

namespace {

// Round to nearest even with `bits` significant bits, normal numbers down to 2^min_exp (below:
// subnormal spacing 2^(min_exp - bits + 1)), values past max_finite -> inf.
double round_significand(double x, int bits, int min_exp, double max_finite) {
  if (!std::isfinite(x) || x == 0.0) return x;
  int e = 0;
  std::frexp(x, &e);  // |x| = f 2^e, f in [0.5, 1): the leading bit is 2^(e - 1)
  const int lead = std::max(e - 1, min_exp);
  const double quantum = std::ldexp(1.0, lead - bits + 1);
  const double r = std::nearbyint(x / quantum) * quantum;  // exact scalings; RNE
  if (std::fabs(r) > max_finite) return std::copysign(INFINITY, x);
  return r;
}

constexpr double kBf16Max = 3.3895313892515355e38;   // (2 - 2^-7) 2^127
constexpr double kTf32Max = 3.4011621342146535e38;   // (2 - 2^-10) 2^127
constexpr double kF16Max = 65504.0;

}  // namespace

const char* to_string(Format format) {
  switch (format) {
    case Format::exact: return "exact";
    case Format::f32: return "f32";
    case Format::tf32: return "tf32";
    case Format::f16: return "f16";
    case Format::bf16: return "bf16";
    case Format::bf16x2: return "bf16x2";
    case Format::f16x2: return "f16x2";
    case Format::f16s: return "f16s";
  }
  return "?";
}

Format parse_format(const std::string& name) {
  for (Format f : {Format::exact, Format::f32, Format::tf32, Format::f16, Format::bf16,
                   Format::bf16x2, Format::f16x2, Format::f16s}) {
    if (name == to_string(f)) return f;
  }
  throw std::invalid_argument("unknown number format '" + name +
                              "' (exact, f32, tf32, f16, bf16, bf16x2, f16x2, f16s)");
}

double round_to(Format format, double x) {
  switch (format) {
    case Format::exact: return x;
    case Format::f32: return static_cast<double>(static_cast<float>(x));
    case Format::tf32: return round_significand(x, 11, -126, kTf32Max);
    case Format::f16s: return round_significand(x, 11, -100000, INFINITY);
    case Format::f16: return round_significand(x, 11, -14, kF16Max);
    case Format::bf16: return round_significand(x, 8, -126, kBf16Max);
    case Format::bf16x2: {
      const double hi = round_significand(x, 8, -126, kBf16Max);
      return std::isfinite(hi) ? hi + round_significand(x - hi, 8, -126, kBf16Max) : hi;
    }
    case Format::f16x2: {
      const double hi = round_significand(x, 11, -14, kF16Max);
      return std::isfinite(hi) ? hi + round_significand(x - hi, 11, -14, kF16Max) : hi;
    }
  }
  return x;
}

// ---------------------------------------------------------------------------------------------
// The plan

RoundingPlan RoundingPlan::default_kernel(bool fused) {
  RoundingPlan plan;
  plan.fused_q_norm = fused;
  return plan;
}

RoundingPlan RoundingPlan::bf16_record(bool fused) {
  RoundingPlan plan = default_kernel(fused);
  plan.beta_in_t = false;
  plan.u_rhs = plan.a_qk = plan.w = plan.u = plan.q_prime = plan.kg = Format::bf16;
  plan.state_operand = plan.v_new = Format::bf16;
  return plan;
}

RoundingPlan RoundingPlan::one_pass(bool fused) {
  RoundingPlan plan = default_kernel(fused);
  plan.chunk = 16;
  plan.a_kk_off = Format::exact;  // one 16 x 16 block: T from the fp32 A_kk
  plan.u = Format::f32;           // U^T stays fp32 in the record
  plan.w = plan.q_prime = plan.kg = plan.a_qk = Format::bf16;
  plan.state_operand = plan.v_new = Format::bf16;
  return plan;
}

RoundingPlan RoundingPlan::exact() const {
  RoundingPlan plan = *this;
  for (const Point& p : points()) plan.*p.member = Format::exact;
  return plan;
}

const std::vector<RoundingPlan::Point>& RoundingPlan::points() {
  static const std::vector<Point> kPoints = {
      {"q_hat", &RoundingPlan::q_hat, "explicit path: l2norm(q) stored (unused when fused)"},
      {"gram_row", &RoundingPlan::gram_row, "gram row operand x_i 2^(G_i - G_m)"},
      {"gram_col", &RoundingPlan::gram_col, "gram column operand k_j 2^(G_m - G_j)"},
      {"a_qk", &RoundingPlan::a_qk, "A_qk in the record"},
      {"a_kk_off", &RoundingPlan::a_kk_off, "A_kk off-diagonal blocks in the Schur products"},
      {"t_for_w", &RoundingPlan::t_for_w, "T as the operand of W = T (beta k Gamma)"},
      {"w_rhs", &RoundingPlan::w_rhs, "beta k Gamma"},
      {"t_for_u", &RoundingPlan::t_for_u, "T diag(beta) as the operand of U = (T diag beta) v"},
      {"u_rhs", &RoundingPlan::u_rhs, "v as the operand of U (beta v without beta_in_t)"},
      {"w", &RoundingPlan::w, "W in the record"},
      {"u", &RoundingPlan::u, "U in the record"},
      {"q_prime", &RoundingPlan::q_prime, "q' = scale r q Gamma in the record"},
      {"kg", &RoundingPlan::kg, "kg = k 2^(G_last - G) in the record"},
      {"state_operand", &RoundingPlan::state_operand, "state as the MMA operand of W S and q' S"},
      {"v_new", &RoundingPlan::v_new, "V_new as the MMA operand of A_qk V_new and kg^T V_new"},
      {"out", &RoundingPlan::out, "the output store"},
  };
  return kPoints;
}

void RoundingPlan::set(const std::string& point, Format format) {
  std::string names;
  for (const Point& p : points()) {
    if (point == p.name) {
      this->*p.member = format;
      return;
    }
    names += (names.empty() ? "" : ", ") + std::string(p.name);
  }
  throw std::invalid_argument("unknown rounding point '" + point + "' (" + names + ")");
}

std::string RoundingPlan::diff(const RoundingPlan& base) const {
  std::string text;
  for (const Point& p : points()) {
    if (this->*p.member == base.*p.member) continue;
    text += (text.empty() ? "" : " ") + std::string(p.name) + "=" + to_string(this->*p.member);
  }
  return text;
}

// ---------------------------------------------------------------------------------------------
// Replay

namespace {

using M = Matrix<double>;
using Index = Eigen::Index;
constexpr int kBlock = 16;  // gram / inverse block size (the kernels' 16x16 tiles)

M rounded(const M& x, Format format) {
  if (format == Format::exact) return x;
  return x.unaryExpr([format](double v) { return round_to(format, v); });
}

double exp2_double(double x) { return std::exp2(x); }

// One chunk's inputs: rows [first, first + n) of one (sequence, head).
struct ChunkIn {
  M x;     // n x K: what the grams and q' are built from (raw or rescaled q, or q_hat)
  M k, v, gate;
  std::vector<double> beta, row_scale;  // row_scale = scale r_i (fused) or scale (explicit)
};

// Fused path: q stays raw and scale r_i multiplies the A_qk row and q'; a row whose fp32 sum of
// squares overflows is first scaled by the exact power of two that brings max|q| into [0.5, 1),
// as the kernel does (lib/kda/src/prep/prep_chunk.cuh deferred_row_norm). Explicit path: q_hat = l2norm(q), rounded.
void load_query(const float* q, int64_t dim, double scale, const RoundingPlan& plan, double* x,
                double& row_scale) {
  if (!plan.fused_q_norm) {
    l2norm_rows<double>(q, x, 1, dim);
    for (int64_t d = 0; d < dim; ++d) x[d] = round_to(plan.q_hat, x[d]);
    row_scale = scale;
    return;
  }
  double ssq = 0.0, largest = 0.0;
  for (int64_t d = 0; d < dim; ++d) {
    x[d] = q[d];
    ssq += x[d] * x[d];
    largest = std::max(largest, std::fabs(x[d]));
  }
  double eps = 1e-6;
  if (std::isfinite(ssq) && ssq > FLT_MAX) {
    int e = 0;
    std::frexp(largest, &e);
    ssq = 0.0;
    for (int64_t d = 0; d < dim; ++d) {
      x[d] = std::ldexp(x[d], -e);
      ssq += x[d] * x[d];
    }
    eps = 0.0;
  }
  row_scale = scale / std::sqrt(ssq + eps);
}

// The chunk step with the plan's roundings; `state` enters as S_c and leaves as S_{c+1}.
void replay_chunk(const ChunkIn& in, const RoundingPlan& plan, M& state, M& out) {
  const Index n = in.k.rows(), K = in.k.cols();
  const auto last_gate = in.gate.row(n - 1);

  // q', kg (record parts) and the decay a = 2^(G_last).
  M q_prime(n, K), kg(n, K);
  for (Index i = 0; i < n; ++i) {
    for (Index d = 0; d < K; ++d) {
      q_prime(i, d) = round_to(plan.q_prime, in.row_scale[i] * in.x(i, d) * exp2_double(in.gate(i, d)));
      kg(i, d) = round_to(plan.kg, in.k(i, d) * exp2_double(last_gate[d] - in.gate(i, d)));
    }
  }
  // Grams per block pair (p >= c) with the column block's anchor m_c = min(16 c + 8, n - 1).
  M a_kk = M::Zero(n, n), a_qk = M::Zero(n, n);
  const Index blocks = (n + kBlock - 1) / kBlock;
  for (Index c = 0; c < blocks; ++c) {
    const Index m = std::min<Index>(kBlock * c + 8, n - 1);
    const Index c0 = kBlock * c, cn = std::min<Index>(kBlock, n - c0);
    M col(cn, K);
    for (Index j = 0; j < cn; ++j)
      for (Index d = 0; d < K; ++d)
        col(j, d) = round_to(plan.gram_col,
                             in.k(c0 + j, d) * exp2_double(in.gate(m, d) - in.gate(c0 + j, d)));
    for (Index p = c; p < blocks; ++p) {
      const Index p0 = kBlock * p, pn = std::min<Index>(kBlock, n - p0);
      M row_q(pn, K), row_k(pn, K);
      for (Index i = 0; i < pn; ++i) {
        for (Index d = 0; d < K; ++d) {
          const double f = exp2_double(in.gate(p0 + i, d) - in.gate(m, d));
          row_q(i, d) = round_to(plan.gram_row, in.x(p0 + i, d) * f);
          row_k(i, d) = round_to(plan.gram_row, in.k(p0 + i, d) * f);
        }
      }
      const M gq = row_q * col.transpose(), gk = row_k * col.transpose();
      for (Index i = 0; i < pn; ++i) {
        for (Index j = 0; j < cn; ++j) {
          const Index gi = p0 + i, gj = c0 + j;
          if (gj < gi) a_kk(gi, gj) = in.beta[gi] * gk(i, j);
          if (gj <= gi) a_qk(gi, gj) = round_to(plan.a_qk, in.row_scale[gi] * gq(i, j));
        }
      }
    }
  }
  // T = (I + A_kk)^-1; the off-diagonal blocks enter the Schur products rounded.
  M a_solve = a_kk;
  for (Index i = 0; i < n; ++i)
    for (Index j = 0; j < i; ++j)
      if (i / kBlock != j / kBlock) a_solve(i, j) = round_to(plan.a_kk_off, a_kk(i, j));
  M t = M::Identity(n, n);
  a_solve.triangularView<Eigen::UnitLower>().solveInPlace(t);

  // W = T (beta k Gamma), U = T (beta v): rounded operands, one rounding of the result.
  M w_rhs(n, K), u_rhs(n, in.v.cols()), t_u = t;
  for (Index i = 0; i < n; ++i) {
    for (Index d = 0; d < K; ++d)
      w_rhs(i, d) = round_to(plan.w_rhs, in.beta[i] * in.k(i, d) * exp2_double(in.gate(i, d)));
    const double row_beta = plan.beta_in_t ? 1.0 : in.beta[i];
    for (Index d = 0; d < in.v.cols(); ++d) u_rhs(i, d) = round_to(plan.u_rhs, row_beta * in.v(i, d));
    if (plan.beta_in_t) t_u.col(i) *= in.beta[i];
  }
  const M w = rounded(rounded(t, plan.t_for_w) * w_rhs, plan.w);
  M t_u_op = rounded(t_u, plan.t_for_u);
  if (plan.beta_in_t) {
    // The diagonal, beta_i, is not an operand: the kernel adds beta_i v_i in fp32 (T_ii = 1).
    for (Index i = 0; i < n; ++i) t_u_op(i, i) = t_u(i, i);
  }
  const M u = rounded(t_u_op * u_rhs, plan.u);

  // The scan: state and V_new rounded where they become MMA operands, fp32-exact accumulation.
  const M s_op = rounded(state, plan.state_operand);
  const M v_new = u - w * s_op;
  const M v_op = rounded(v_new, plan.v_new);
  out = q_prime * s_op + a_qk * v_op;
  out = rounded(out, plan.out);
  for (Index d = 0; d < K; ++d) state.row(d) *= exp2_double(last_gate[d]);
  state.noalias() += kg.transpose() * v_op;
}

}  // namespace

Result<double> replay_forward(const Problem& problem, const Options& options,
                              const RoundingPlan& plan) {
  problem.check();
  detail::check_options(options);
  if (!options.normalize_q)
    throw std::invalid_argument("replay_forward: Options::normalize_q must be true");
  if (options.chunk_size != 64)
    throw std::invalid_argument("replay_forward: the kernels' gate is 64-token-local (chunk_size 64)");
  if (plan.chunk != 64 && plan.chunk != 16)
    throw std::invalid_argument("replay_forward: RoundingPlan::chunk must be 64 (the two kernels) "
                                "or 16 (the one pass), not " + std::to_string(plan.chunk));
  const int64_t K = problem.key_dim, V = problem.value_dim, H = problem.heads;
  const auto spans = detail::sequence_spans(problem.batch, problem.tokens, problem.cu_seqlens);
  const int64_t states = problem.num_states();
  const double scale = detail::resolved_scale<double>(options, K);
  const detail::TokenLayout layout{problem.tokens, H};

  Result<double> result;
  result.out.assign(problem.batch * problem.tokens * H * V, 0.0);
  if (options.final_state) result.final_state.assign(states * H * K * V, 0.0);

  detail::for_each_sequence_head(states, H, [&](int64_t sequence, int64_t head) {
    const detail::SequenceSpan& span = spans[sequence];
    M state(K, V);  // row-major, as load_initial_state and store_final_state lay it out
    detail::load_initial_state<double>(problem, options, sequence, head, state.data());
    ChunkIn in;
    M chunk_out;
    for (int64_t first = span.begin; first < span.end; first += plan.chunk) {
      const int64_t n = std::min<int64_t>(plan.chunk, span.end - first);
      const int64_t position = first - span.begin;  // in the sequence: the gate's chunks count from 0
      if (options.reset_state_at_chunk_starts && position % options.chunk_size == 0) state.setZero();
      // The gate before this (sub-)chunk: 0 at a 64-token chunk's start, else the row before.
      const int64_t before_row =
          position % options.chunk_size == 0 ? -1 : layout.row(span.batch_row, first - 1, head);
      in.x.resize(n, K);
      in.k.resize(n, K);
      in.v.resize(n, V);
      in.gate.resize(n, K);
      in.beta.resize(n);
      in.row_scale.resize(n);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t row = layout.row(span.batch_row, first + i, head);
        load_query(problem.q.data() + row * K, K, scale, plan, in.x.row(i).data(), in.row_scale[i]);
        for (int64_t d = 0; d < K; ++d) {
          in.k(i, d) = problem.k[row * K + d];
          in.gate(i, d) = static_cast<double>(problem.gate[row * K + d]) -
                          (before_row < 0 ? 0.0 : static_cast<double>(problem.gate[before_row * K + d]));
        }
        for (int64_t d = 0; d < V; ++d) in.v(i, d) = problem.v[row * V + d];
        in.beta[i] = problem.beta[row];
      }
      replay_chunk(in, plan, state, chunk_out);
      for (int64_t i = 0; i < n; ++i) {
        double* dst = result.out.data() + layout.row(span.batch_row, first + i, head) * V;
        for (int64_t d = 0; d < V; ++d) dst[d] = chunk_out(i, d);
      }
    }
    if (options.final_state)
      detail::store_final_state(state.data(), problem, sequence, head, result.final_state);
  });
  return result;
}

}  // namespace kda::ref
