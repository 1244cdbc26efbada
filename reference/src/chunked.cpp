// chunked_forward: the chunked (WY / UT-transform) algorithm of kda-forward.md §2.2, the same
// math the kernels run, in precision S. Every product is a small GEMM or forward substitution of
// kernels.h (fixed order per element, the same bits on every instruction set); the grams use the
// kernels' per-block anchors (docs/design.md, PREP step 3) instead of one exp2 per (i, j, d).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define KDA_REF_HAVE_MXCSR 1
#else
#define KDA_REF_HAVE_MXCSR 0
#endif

#include "detail.h"
#include "kda/ref/reference.h"
#include "kernels.h"

namespace kda::ref {
namespace {

// Column blocks of the grams and the anchor row inside each (the kernels' choice).
constexpr int64_t kGramBlock = 16;
constexpr int64_t kAnchorOffset = 8;

// Largest exponent an anchored factor may have: larger ones (gates far outside the bounded-gate
// contract, whose anchored exponents stay within 7 decays of 8.53 = 59.7) send the panel to the
// direct pairwise form. At this limit a factor that underflows (float: below 2^-126, results are
// flushed, see FlushSubnormalResults) is paired with one of at most 2^limit, so the product it
// drops is below 2^(80 - 126) = 2^-46 (float) or 2^(900 - 1074) (double) of |x_i| |k_j|:
// nothing at S's precision.
template <class S>
constexpr S anchor_exponent_limit() {
  return std::is_same_v<S, float> ? S(80) : S(900);
}

// While alive, results that would be subnormal are flushed to zero on this thread (x86 MXCSR.FTZ;
// restored afterwards); used for the float chunked algorithm only. Its anchored factors and 2^G
// reach far below float's normal range, and a subnormal result costs a microcode assist of ~100
// cycles: 2^-126 and less of |x_i||k_j| (or of the state) is nothing at float's precision, and
// the GPU kernels flush the same way (ftz). Inputs are never flushed (no DAZ), and the float
// recurrence, the budget's `low`, stays plain IEEE.
class FlushSubnormalResults {
 public:
  explicit FlushSubnormalResults(bool enable) {
#if KDA_REF_HAVE_MXCSR
    if (enable) {
      saved_ = _mm_getcsr();
      _mm_setcsr(saved_ | _MM_FLUSH_ZERO_ON);
      active_ = true;
    }
#else
    (void)enable;
#endif
  }
  ~FlushSubnormalResults() {
#if KDA_REF_HAVE_MXCSR
    if (active_) _mm_setcsr(saved_);
#endif
  }
  FlushSubnormalResults(const FlushSubnormalResults&) = delete;  // owns the thread's FP mode
  FlushSubnormalResults& operator=(const FlushSubnormalResults&) = delete;

 private:
  unsigned saved_ = 0;
  bool active_ = false;
};

// Row-major matrix workspaces of one (sequence, head), sized for the largest chunk.
template <class S>
struct ChunkWorkspace {
  int64_t n = 0, K = 0, V = 0;
  std::vector<S> q_hat, k, v, gate, beta;  // inputs: n x K, n x K, n x V, n x K, n
  std::vector<S> gamma;                    // n x K: 2^G
  std::vector<S> a_qk, a_kk, t;            // n x n
  std::vector<S> rhs_k, rhs_v;             // n x K: beta k Gamma, n x V: beta v
  std::vector<S> w, u;                     // n x K, n x V
  std::vector<S> q_prime, kg;              // n x K
  std::vector<S> v_new, out, product;      // n x V
  std::vector<S> row_q, row_k;             // n x K: anchored row operands
  std::vector<S> column_t;                 // K x kGramBlock: anchored column operand, transposed
  std::vector<S> gram_q, gram_k;           // n x kGramBlock
  std::vector<S> state_product;            // K x V
  std::vector<float> q_raw;                // n x K: q as given
  std::vector<S> factor;                   // K: one row of anchored factors

  ChunkWorkspace(int64_t rows, int64_t key_dim, int64_t value_dim)
      : K(key_dim), V(value_dim) {
    const int64_t nK = rows * key_dim, nV = rows * value_dim;
    for (auto* m : {&q_hat, &k, &gate, &gamma, &rhs_k, &w, &q_prime, &kg, &row_q, &row_k})
      m->resize(nK);
    for (auto* m : {&v, &rhs_v, &u, &v_new, &out, &product}) m->resize(nV);
    for (auto* m : {&a_qk, &a_kk, &t}) m->resize(rows * rows);
    beta.resize(rows);
    column_t.resize(key_dim * kGramBlock);
    gram_q.resize(rows * kGramBlock);
    gram_k.resize(rows * kGramBlock);
    state_product.resize(key_dim * value_dim);
    factor.resize(key_dim);
  }
};

// Rows [first_token, first_token + n) of one (sequence, head), widened to S.
template <class S>
void load_chunk(const Problem& problem, const Options& options, int64_t batch_row,
                int64_t first_token, int64_t rows, int64_t head, ChunkWorkspace<S>& w) {
  const int64_t K = w.K, V = w.V;
  const detail::TokenLayout layout{problem.tokens, problem.heads};
  w.n = rows;
  detail::load_query_rows(problem, options, batch_row, first_token, rows, head, w.q_raw,
                          w.q_hat.data());
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t row = layout.row(batch_row, first_token + i, head);
    detail::widen(problem.k.data() + row * K, w.k.data() + i * K, K);
    detail::widen(problem.v.data() + row * V, w.v.data() + i * V, V);
    detail::widen(problem.gate.data() + row * K, w.gate.data() + i * K, K);
    w.beta[i] = static_cast<S>(problem.beta[row]);
  }
}

// C (rows x cols, ldc) = A · B, A(i, d) = a[i * a_row + d * a_col], B row-major (ldb).
template <class S>
void product(int64_t rows, int64_t cols, int64_t inner, const S* a, int64_t a_row,
             int64_t a_col, const S* b, int64_t ldb, S* c, int64_t ldc, bool lower = false) {
  detail::gemm(detail::Gemm<S>{rows, cols, inner, a, a_row, a_col, b, ldb, c, ldc, lower});
}

// One panel of the grams, rows [r0, r1) x columns [j0, j1) (of which the caller keeps j <= i),
// factored at an anchor row a <= r0:
//   2^(G_i - G_j) = 2^(G_i - G_a) * 2^(G_a - G_j),
// row operands x_i 2^(G_i - G_a), column operand k_j 2^(G_a - G_j), and the panel of each gram is
// one GEMM (sum over d ascending) into w.gram_q / w.gram_k (row i - r0, column j - j0). A panel
// whose exponents exceed anchor_exponent_limit (gates far outside the contract; NaN too) is
// computed pairwise instead: sum_d x_i[d] (k_j[d] 2^(G_i[d] - G_j[d])), ascending d.
template <class S>
void gram_panel(ChunkWorkspace<S>& w, int64_t r0, int64_t r1, int64_t j0, int64_t j1,
                int64_t a) {
  const int64_t K = w.K, rows = r1 - r0, width = j1 - j0;
  const S limit = anchor_exponent_limit<S>();
  const S* g_a = w.gate.data() + a * K;
  bool fits = true;
  for (int64_t i = r0; i < r1 && fits; ++i)
    for (int64_t d = 0; d < K; ++d) fits = fits && w.gate[i * K + d] - g_a[d] <= limit;
  for (int64_t j = j0; j < j1 && fits; ++j)
    for (int64_t d = 0; d < K; ++d) fits = fits && g_a[d] - w.gate[j * K + d] <= limit;

  if (fits) {
    S* factor = w.factor.data();
    for (int64_t j = j0; j < j1; ++j) {
      const S* g_j = w.gate.data() + j * K;
      const S* k_j = w.k.data() + j * K;
      for (int64_t d = 0; d < K; ++d) factor[d] = g_a[d] - g_j[d];
      detail::exp2_array(factor, factor, K);
      for (int64_t d = 0; d < K; ++d) w.column_t[d * kGramBlock + (j - j0)] = k_j[d] * factor[d];
    }
    for (int64_t i = r0; i < r1; ++i) {
      const S* g_i = w.gate.data() + i * K;
      S* rq = w.row_q.data() + (i - r0) * K;
      S* rk = w.row_k.data() + (i - r0) * K;
      for (int64_t d = 0; d < K; ++d) factor[d] = g_i[d] - g_a[d];
      detail::exp2_array(factor, factor, K);
      for (int64_t d = 0; d < K; ++d) {
        rq[d] = w.q_hat[i * K + d] * factor[d];
        rk[d] = w.k[i * K + d] * factor[d];
      }
    }
    product(rows, width, K, w.row_q.data(), K, 1, w.column_t.data(), kGramBlock,
            w.gram_q.data(), kGramBlock);
    product(rows, width, K, w.row_k.data(), K, 1, w.column_t.data(), kGramBlock,
            w.gram_k.data(), kGramBlock);
    return;
  }
  for (int64_t i = r0; i < r1; ++i) {
    const S* g_i = w.gate.data() + i * K;
    for (int64_t j = j0; j < std::min(j1, i + 1); ++j) {
      const S* g_j = w.gate.data() + j * K;
      const S* k_j = w.k.data() + j * K;
      S dot_q = 0, dot_k = 0;
      for (int64_t d = 0; d < K; ++d) {
        const S decayed = k_j[d] * detail::exp2_or_zero(g_i[d] - g_j[d]);
        dot_q = dot_q + w.q_hat[i * K + d] * decayed;
        dot_k = dot_k + w.k[i * K + d] * decayed;
      }
      w.gram_q[(i - r0) * kGramBlock + (j - j0)] = dot_q;
      w.gram_k[(i - r0) * kGramBlock + (j - j0)] = dot_k;
    }
  }
}

// Scales the panel's entries with j <= i into the grams: A_qk = scale * gram_q (j <= i),
// A_kk = beta_i * gram_k (j < i). Rows [r0, r1).
template <class S>
void store_panel(ChunkWorkspace<S>& w, S scale, int64_t r0, int64_t r1, int64_t j0, int64_t j1) {
  const int64_t n = w.n;
  for (int64_t i = r0; i < r1; ++i)
    for (int64_t j = j0; j < std::min(j1, i + 1); ++j) {
      const int64_t g = (i - r0) * kGramBlock + (j - j0);
      w.a_qk[i * n + j] = scale * w.gram_q[g];
      if (j < i) w.a_kk[i * n + j] = w.beta[i] * w.gram_k[g];
    }
}

// Step 1, the intra-chunk grams (the upper parts are exact zeros):
//   A_qk[i, j] = scale  * sum_d q_i[d] k_j[d] 2^(G_i[d] - G_j[d])   for j <= i
//   A_kk[i, j] = beta_i * sum_d k_i[d] k_j[d] 2^(G_i[d] - G_j[d])   for j <  i
// Column block c (columns 16c .. 16c + 15) is factored at the kernels' anchor m = 16c + 8 for
// the rows i >= m (docs/design.md, PREP step 3): there every row factor is <= 1 and every column
// factor within 7 per-token decays (<= 2^60 at the contract's edge, fine even in float); rows of
// later blocks get factors that underflow only where the entry is negligible. The rows above m,
// [16c, 16c + 8), with their columns j <= i, use the block's first row as anchor instead (factors
// within 7 decays again), where the kernels use m (or n - 1 in a short last chunk): so no entry
// depends on a later token's gate, and an output row never depends on later tokens, bit for bit.
// Column block [j0, j0 + 16) of both grams for the rows [j0, row_end), at the anchors above.
template <class S>
void column_block_grams(ChunkWorkspace<S>& w, S scale, int64_t j0, int64_t row_end) {
  const int64_t j1 = std::min(j0 + kGramBlock, w.n);
  const int64_t m = j0 + kAnchorOffset;
  const int64_t top_end = std::min(m, row_end);
  gram_panel(w, j0, top_end, j0, top_end, j0);
  store_panel(w, scale, j0, top_end, j0, top_end);
  if (m < row_end) {
    gram_panel(w, m, row_end, j0, j1, m);
    store_panel(w, scale, m, row_end, j0, j1);
  }
}

template <class S>
void intra_chunk_grams(ChunkWorkspace<S>& w, S scale) {
  const int64_t n = w.n;
  std::fill(w.a_qk.begin(), w.a_qk.begin() + n * n, S(0));
  std::fill(w.a_kk.begin(), w.a_kk.begin() + n * n, S(0));
  for (int64_t j0 = 0; j0 < n; j0 += kGramBlock) column_block_grams(w, scale, j0, n);
}

// Step 3 and the operands of steps 5 and 6, from T (lower triangular; block-diagonal in
// blocked_chunk_step): W = T (beta * k * Gamma), U = T (beta * v), q' = scale * q_hat * Gamma,
// kg = k * 2^(G_{n-1} - G). w.gamma holds 2^G.
template <class S>
void chunk_factors(ChunkWorkspace<S>& w, S scale) {
  const int64_t n = w.n, K = w.K, V = w.V;
  const S* last_gate = w.gate.data() + (n - 1) * K;  // G_{n-1} of the last valid row
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t d = 0; d < K; ++d) w.rhs_k[i * K + d] = w.beta[i] * (w.k[i * K + d] * w.gamma[i * K + d]);
    for (int64_t c = 0; c < V; ++c) w.rhs_v[i * V + c] = w.beta[i] * w.v[i * V + c];
  }
  product(n, K, n, w.t.data(), n, 1, w.rhs_k.data(), K, w.w.data(), K, true);
  product(n, V, n, w.t.data(), n, 1, w.rhs_v.data(), V, w.u.data(), V, true);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < K; ++d) w.kg[i * K + d] = last_gate[d] - w.gate[i * K + d];
  detail::exp2_array(w.kg.data(), w.kg.data(), n * K);
  for (int64_t e = 0; e < n * K; ++e) {
    w.q_prime[e] = scale * (w.q_hat[e] * w.gamma[e]);
    w.kg[e] = w.k[e] * w.kg[e];
  }
}

// Steps 5 and 6, from V_new: O = q' S_c + A_qk V_new into w.out; `state` becomes
// S_{c+1} = diag(Gamma_{n-1}) S_c + kg^T V_new.
template <class S>
void chunk_output_and_state(ChunkWorkspace<S>& w, std::vector<S>& state) {
  const int64_t n = w.n, K = w.K, V = w.V;
  const S* last_gamma = w.gamma.data() + (n - 1) * K;
  product(n, V, K, w.q_prime.data(), K, 1, state.data(), V, w.out.data(), V);
  product(n, V, n, w.a_qk.data(), n, 1, w.v_new.data(), V, w.product.data(), V, true);
  for (int64_t e = 0; e < n * V; ++e) w.out[e] = w.out[e] + w.product[e];
  product(K, V, n, w.kg.data(), 1, K, w.v_new.data(), V, w.state_product.data(), V);
  for (int64_t r = 0; r < K; ++r)
    for (int64_t c = 0; c < V; ++c)
      state[r * V + c] = state[r * V + c] * last_gamma[r] + w.state_product[r * V + c];
}

// Steps 1-6 for one chunk. `state` (K x V) enters as S_c and leaves as S_{c+1}; the chunk's
// n x V output is left in w.out.
template <class S>
void chunk_step(ChunkWorkspace<S>& w, S scale, std::vector<S>& state) {
  const int64_t n = w.n, K = w.K, V = w.V;
  detail::exp2_array(w.gate.data(), w.gamma.data(), n * K);  // Gamma = 2^G <= 1

  intra_chunk_grams(w, scale);

  // 2. T = (I + A_kk)^-1 by forward substitution.
  detail::unit_lower_inverse(n, w.a_kk.data(), n, w.t.data(), n);

  // 3. W, U; the operands of steps 5 and 6.
  chunk_factors(w, scale);

  // 4. V_new = U - W S_c (row i is the recurrence's delta_i).
  product(n, V, K, w.w.data(), K, 1, state.data(), V, w.product.data(), V);
  for (int64_t e = 0; e < n * V; ++e) w.v_new[e] = w.u[e] - w.product[e];

  // 5, 6. O and S_{c+1}.
  chunk_output_and_state(w, state);
}

// Copies the chunk's intermediates into a trace record.
template <class S>
void record_chunk(const ChunkWorkspace<S>& w, const std::vector<S>& state_in,
                  ChunkTrace<S>& step) {
  const auto n = static_cast<Eigen::Index>(w.n), K = static_cast<Eigen::Index>(w.K),
             V = static_cast<Eigen::Index>(w.V);
  using Map = Eigen::Map<const Matrix<S>>;
  step.A_kk = Map(w.a_kk.data(), n, n);
  step.T = Map(w.t.data(), n, n);
  step.W = Map(w.w.data(), n, K);
  step.U = Map(w.u.data(), n, V);
  step.q_prime = Map(w.q_prime.data(), n, K);
  step.kg = Map(w.kg.data(), n, K);
  step.A_qk = Map(w.a_qk.data(), n, n);
  step.V_new = Map(w.v_new.data(), n, V);
  step.state_in = Map(state_in.data(), K, V);
}

bool traced(const TraceFilter& filter, int64_t sequence, int64_t head) {
  return (filter.head < 0 || filter.head == head) &&
         (filter.sequence < 0 || filter.sequence == sequence);
}

// Runs every chunk of one (sequence, head); writes its output rows and leaves the final state in
// `state` (K x V row-major).
template <class S>
void run_sequence_head(const Problem& problem, const Options& options,
                       const detail::SequenceSpan& span, int64_t sequence, int64_t head,
                       std::vector<S>& out, std::vector<S>& state,
                       std::vector<ChunkTrace<S>>* trace) {
  const int64_t V = problem.value_dim;
  const detail::TokenLayout layout{problem.tokens, problem.heads};
  const S scale = detail::resolved_scale<S>(options, problem.key_dim);

  detail::load_initial_state(problem, options, sequence, head, state.data());
  ChunkWorkspace<S> work(std::min<int64_t>(options.chunk_size, span.end - span.begin),
                         problem.key_dim, V);
  std::vector<S> state_in;
  int64_t chunk = 0;
  for (int64_t first = span.begin; first < span.end; first += options.chunk_size, ++chunk) {
    const int64_t rows = std::min<int64_t>(options.chunk_size, span.end - first);
    if (options.reset_state_at_chunk_starts) std::fill(state.begin(), state.end(), S(0));
    load_chunk(problem, options, span.batch_row, first, rows, head, work);
    if (trace != nullptr) state_in = state;
    {
      const FlushSubnormalResults flush(std::is_same_v<S, float>);
      chunk_step(work, scale, state);
    }
    for (int64_t i = 0; i < rows; ++i)
      std::copy_n(work.out.data() + i * V, V,
                  out.data() + layout.row(span.batch_row, first + i, head) * V);
    if (trace != nullptr) {
      ChunkTrace<S> step;
      record_chunk(work, state_in, step);
      step.sequence = sequence;
      step.head = head;
      step.chunk = chunk;
      step.first_token = span.batch_row * problem.tokens + first;
      step.rows = rows;
      trace->push_back(std::move(step));
    }
  }
}

// The chunked algorithm in segments of `segment_chunks` chunks (segmented_forward). Pass 1, per
// segment from a zero state: its state contribution B_s (the state it leaves) and its transition
// M_s = M_last ... M_first, M_c = diag(Gamma_{n-1}) - kg^T W (S_{c+1} = M_c S_c + kg^T U); pass 2:
// S_{s+1} = M_s S_s + B_s from the initial state; pass 3: every segment again from S_s, for its
// outputs and, at the end, the final state. Pass 1's segments are independent (a GPU runs them
// at once); here they run in order, which does not change their values. With one segment, passes
// 1 and 2 have nothing to do and pass 3 is run_sequence_head's loop: the same bits.
template <class S>
void run_sequence_head_segmented(const Problem& problem, const Options& options,
                                 const detail::SequenceSpan& span, int64_t sequence,
                                 int64_t head, int segment_chunks, std::vector<S>& out,
                                 std::vector<S>& state) {
  const int64_t K = problem.key_dim, V = problem.value_dim;
  const detail::TokenLayout layout{problem.tokens, problem.heads};
  const S scale = detail::resolved_scale<S>(options, K);
  const FlushSubnormalResults flush(std::is_same_v<S, float>);

  detail::load_initial_state(problem, options, sequence, head, state.data());
  ChunkWorkspace<S> work(std::min<int64_t>(options.chunk_size, span.end - span.begin), K, V);
  std::vector<int64_t> firsts;  // each chunk's first token
  for (int64_t first = span.begin; first < span.end; first += options.chunk_size)
    firsts.push_back(first);
  const auto chunks = static_cast<int64_t>(firsts.size());
  const int64_t segments = (chunks + segment_chunks - 1) / segment_chunks;
  auto load = [&](int64_t chunk) {
    const int64_t first = firsts[static_cast<std::size_t>(chunk)];
    load_chunk(problem, options, span.batch_row, first,
               std::min<int64_t>(options.chunk_size, span.end - first), head, work);
  };

  // Passes 1 and 2: the state entering each segment.
  std::vector<std::vector<S>> entering(static_cast<std::size_t>(std::max<int64_t>(segments, 1)));
  entering[0] = state;
  std::vector<S> contribution(K * V), transition(K * K), chunk_transition(K * K), scratch(K * K);
  for (int64_t seg = 0; seg + 1 < segments; ++seg) {
    std::fill(contribution.begin(), contribution.end(), S(0));
    std::fill(transition.begin(), transition.end(), S(0));
    for (int64_t r = 0; r < K; ++r) transition[r * K + r] = S(1);
    for (int64_t c = seg * segment_chunks; c < (seg + 1) * segment_chunks; ++c) {
      load(c);
      chunk_step(work, scale, contribution);
      const S* last_gamma = work.gamma.data() + (work.n - 1) * K;
      product(K, K, work.n, work.kg.data(), 1, K, work.w.data(), K, chunk_transition.data(), K);
      for (int64_t r = 0; r < K; ++r)
        for (int64_t col = 0; col < K; ++col)
          chunk_transition[r * K + col] =
              (r == col ? last_gamma[r] : S(0)) - chunk_transition[r * K + col];
      product(K, K, K, chunk_transition.data(), K, 1, transition.data(), K, scratch.data(), K);
      transition.swap(scratch);
    }
    std::vector<S>& next = entering[static_cast<std::size_t>(seg + 1)];
    next.assign(K * V, S(0));
    product(K, V, K, transition.data(), K, 1, entering[static_cast<std::size_t>(seg)].data(), V,
            next.data(), V);
    for (int64_t e = 0; e < K * V; ++e) next[e] = next[e] + contribution[e];
  }

  // Pass 3: each segment from its entering state.
  for (int64_t seg = 0; seg < segments; ++seg) {
    state = entering[static_cast<std::size_t>(seg)];
    for (int64_t c = seg * segment_chunks; c < std::min(chunks, (seg + 1) * segment_chunks); ++c) {
      load(c);
      chunk_step(work, scale, state);
      const int64_t first = firsts[static_cast<std::size_t>(c)];
      for (int64_t i = 0; i < work.n; ++i)
        std::copy_n(work.out.data() + i * V, V,
                    out.data() + layout.row(span.batch_row, first + i, head) * V);
    }
  }
}

// One chunk of the chunked algorithm computed the way docs/design.md's hybrid does it, in
// blocks of kGramBlock rows (p, c index blocks; s_p the row before block p, e_c the last row of
// block c; G chunk-local):
//   inside a block: the grams at intra_chunk_grams' anchors (its column block, the block's own
//     rows), T_pp = (I + A_kk(p, p))^-1, W'_p = T_pp (beta k 2^G)_p, U_p = T_pp (beta v)_p;
//   across blocks (c < p): the grams at the anchor s_p, row factors 2^(G_i - G_{s_p}) and column
//     factors 2^(G_{s_p} - G_j) both <= 1 (a product below the range is one whose true value
//     is; the GPU's form of the column factor is kc_c D_pc = k 2^(G_{e_c} - G) 2^(G_{s_p} -
//     G_{e_c}), factors16's KG times the A of the blocks between), and M_pc = T_pp A_kk(p, c);
//   V_new_p = U_p - (W' S)_p - sum_{c<p} M_pc V_new_c, then O = q' S + A_qk V_new and
//     S' = diag(2^G_{n-1}) S + kg^T V_new as chunk_step.
// Exact in exact arithmetic (the block forward substitution of (I + A_kk) V_new = beta v -
// beta k Gamma S); blocked_forward checks the algebra a 64-token chain step with 16-token
// factors would run.
template <class S>
void blocked_chunk_step(ChunkWorkspace<S>& w, S scale, std::vector<S>& state) {
  const int64_t n = w.n, K = w.K, V = w.V, B = kGramBlock;
  const int64_t blocks = (n + B - 1) / B;
  auto rows_of = [&](int64_t p) { return std::min(B, n - p * B); };
  detail::exp2_array(w.gate.data(), w.gamma.data(), n * K);  // 2^G <= 1

  // The whole chunk's A_qk (lower, diagonal included) and the blocks' T_pp, W', U, M_pc.
  std::fill(w.a_qk.begin(), w.a_qk.begin() + n * n, S(0));
  std::fill(w.a_kk.begin(), w.a_kk.begin() + n * n, S(0));  // A_kk(p, c) blocks, then M_pc
  std::fill(w.t.begin(), w.t.begin() + n * n, S(0));        // block-diagonal T
  std::vector<S> block_t(B * B), block_a(B * B);
  for (int64_t p = 0; p < blocks; ++p) {
    const int64_t p0 = p * B, np = rows_of(p);
    // Inside the block: chunk_step's anchors, for the block's own rows only.
    column_block_grams(w, scale, p0, p0 + np);
    // Across blocks: one panel per earlier block at the anchor s_p = p0 - 1, so the row factors
    // 2^(G_i - G_{s_p}) and the column factors 2^(G_{s_p} - G_j) are both <= 1 (the GPU forms
    // the same column factor as kc_c D_pc from factors16's KG and A).
    for (int64_t c = 0; c < p; ++c) {
      gram_panel(w, p0, p0 + np, c * B, c * B + B, p0 - 1);
      store_panel(w, scale, p0, p0 + np, c * B, c * B + B);
    }
    // T_pp, then M_pc = T_pp A_kk(p, c) in place of A_kk(p, c).
    for (int64_t i = 0; i < np; ++i)
      for (int64_t j = 0; j < np; ++j) block_a[i * np + j] = w.a_kk[(p0 + i) * n + p0 + j];
    detail::unit_lower_inverse(np, block_a.data(), np, block_t.data(), np);
    for (int64_t i = 0; i < np; ++i)
      for (int64_t j = 0; j < np; ++j) w.t[(p0 + i) * n + p0 + j] = block_t[i * np + j];
    for (int64_t c = 0; c < p; ++c) {
      const int64_t c0 = c * B;
      for (int64_t i = 0; i < np; ++i)
        for (int64_t j = 0; j < B; ++j) {
          S acc = 0;
          for (int64_t r = 0; r <= i; ++r) acc += block_t[i * np + r] * w.a_kk[(p0 + r) * n + c0 + j];
          block_a[i * B + j] = acc;
        }
      for (int64_t i = 0; i < np; ++i)
        for (int64_t j = 0; j < B; ++j) w.a_kk[(p0 + i) * n + c0 + j] = block_a[i * B + j];
    }
  }

  // W' = T (beta k 2^G), U = T (beta v) with T block-diagonal; q', kg as chunk_step.
  chunk_factors(w, scale);

  // V_new by the block solve.
  product(n, V, K, w.w.data(), K, 1, state.data(), V, w.product.data(), V);
  for (int64_t p = 0; p < blocks; ++p) {
    const int64_t p0 = p * B, np = rows_of(p);
    for (int64_t i = 0; i < np; ++i)
      for (int64_t col = 0; col < V; ++col) {
        S x = w.u[(p0 + i) * V + col] - w.product[(p0 + i) * V + col];
        for (int64_t j = 0; j < p0; ++j) x -= w.a_kk[(p0 + i) * n + j] * w.v_new[j * V + col];
        w.v_new[(p0 + i) * V + col] = x;
      }
  }

  // O = q' S + A_qk V_new; S' = diag(2^G_{n-1}) S + kg^T V_new.
  chunk_output_and_state(w, state);
}

// The result's buffers (zero-filled: rows at or after cu[N] are never written) and one run of
// chain(span, sequence, head, out, state) per (sequence, head), in parallel, its final state
// stored after it. The caller has checked problem and options.
template <class S, class Chain>
Result<S> run_chains(const Problem& problem, const Options& options, const Chain& chain) {
  const auto spans = detail::sequence_spans(problem.batch, problem.tokens, problem.cu_seqlens);
  const int64_t states = problem.num_states();
  const int64_t heads = problem.heads;
  const int64_t KV = problem.key_dim * problem.value_dim;
  Result<S> result;
  result.out.assign(problem.batch * problem.tokens * heads * problem.value_dim, S(0));
  if (options.final_state) result.final_state.assign(states * heads * KV, S(0));
  detail::for_each_sequence_head(states, heads, [&](int64_t sequence, int64_t head) {
    std::vector<S> state(KV);
    chain(spans[sequence], sequence, head, result.out, state);
    if (options.final_state)
      detail::store_final_state(state.data(), problem, sequence, head, result.final_state);
  });
  return result;
}

}  // namespace

template <class S>
Result<S> segmented_forward(const Problem& problem, const Options& options, int segment_chunks) {
  problem.check();
  detail::check_options(options);
  if (segment_chunks < 1)
    throw std::invalid_argument(std::string("segmented_forward: segment_chunks must be >= 1, got ")
                                    .append(std::to_string(segment_chunks)));
  if (options.reset_state_at_chunk_starts)
    throw std::invalid_argument(
        "segmented_forward: reset_state_at_chunk_starts leaves no state to carry between "
        "segments; use chunked_forward");
  return run_chains<S>(problem, options,
                       [&](const detail::SequenceSpan& span, int64_t sequence, int64_t head,
                           std::vector<S>& out, std::vector<S>& state) {
                         run_sequence_head_segmented<S>(problem, options, span, sequence, head,
                                                        segment_chunks, out, state);
                       });
}

template <class S>
Result<S> blocked_forward(const Problem& problem, const Options& options) {
  problem.check();
  detail::check_options(options);
  if (options.chunk_size % kGramBlock != 0)
    throw std::invalid_argument(
        std::string("blocked_forward: chunk_size must be a multiple of 16, got ")
            .append(std::to_string(options.chunk_size)));
  return run_chains<S>(problem, options,
                       [&](const detail::SequenceSpan& span, int64_t sequence, int64_t head,
                           std::vector<S>& out, std::vector<S>& state) {
                         const int64_t V = problem.value_dim;
                         const detail::TokenLayout layout{problem.tokens, problem.heads};
                         const S scale = detail::resolved_scale<S>(options, problem.key_dim);
                         const FlushSubnormalResults flush(std::is_same_v<S, float>);
                         detail::load_initial_state(problem, options, sequence, head, state.data());
                         ChunkWorkspace<S> work(
                             std::min<int64_t>(options.chunk_size, span.end - span.begin),
                             problem.key_dim, V);
                         for (int64_t first = span.begin; first < span.end;
                              first += options.chunk_size) {
                           const int64_t rows = std::min<int64_t>(options.chunk_size, span.end - first);
                           if (options.reset_state_at_chunk_starts)
                             std::fill(state.begin(), state.end(), S(0));
                           load_chunk(problem, options, span.batch_row, first, rows, head, work);
                           blocked_chunk_step(work, scale, state);
                           for (int64_t i = 0; i < rows; ++i)
                             std::copy_n(work.out.data() + i * V, V,
                                         out.data() + layout.row(span.batch_row, first + i, head) * V);
                         }
                       });
}

template <class S>
Result<S> chunked_forward(const Problem& problem, const Options& options,
                          std::vector<ChunkTrace<S>>* trace, TraceFilter filter) {
  problem.check();
  detail::check_options(options);
  // One trace list per (sequence, head) task, concatenated in task order afterwards so the
  // record order does not depend on thread scheduling.
  const int64_t heads = problem.heads;
  std::vector<std::vector<ChunkTrace<S>>> task_traces(
      trace != nullptr ? static_cast<std::size_t>(problem.num_states() * heads) : 0);
  Result<S> result = run_chains<S>(
      problem, options,
      [&](const detail::SequenceSpan& span, int64_t sequence, int64_t head, std::vector<S>& out,
          std::vector<S>& state) {
        std::vector<ChunkTrace<S>>* task_trace =
            trace != nullptr && traced(filter, sequence, head)
                ? &task_traces[static_cast<std::size_t>(sequence * heads + head)]
                : nullptr;
        run_sequence_head<S>(problem, options, span, sequence, head, out, state, task_trace);
      });
  if (trace != nullptr)
    for (auto& records : task_traces)
      for (auto& record : records) trace->push_back(std::move(record));
  return result;
}

template Result<float> chunked_forward<float>(const Problem&, const Options&,
                                              std::vector<ChunkTrace<float>>*, TraceFilter);
template Result<double> chunked_forward<double>(const Problem&, const Options&,
                                                std::vector<ChunkTrace<double>>*, TraceFilter);
template Result<float> segmented_forward<float>(const Problem&, const Options&, int);
template Result<double> segmented_forward<double>(const Problem&, const Options&, int);
template Result<float> blocked_forward<float>(const Problem&, const Options&);
template Result<double> blocked_forward<double>(const Problem&, const Options&);

}  // namespace kda::ref
