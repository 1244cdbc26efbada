// chunked_forward: the chunked (WY / UT-transform) algorithm of kda-forward.md §2.2, the same
// math the kernels run, with Eigen products in precision S.
#include <algorithm>
#include <cmath>

#include "detail.h"
#include "kda/ref/reference.h"

namespace kda::ref {
namespace {

using Index = Eigen::Index;

// Rows [first_token, first_token + n) of one (sequence, head), widened to S.
template <class S>
struct ChunkInputs {
  Matrix<S> q_hat;          // n x K, normalized if Options::normalize_q
  Matrix<S> k;              // n x K
  Matrix<S> v;              // n x V
  Matrix<S> gate;           // n x K, chunk-local cumulative log2 gate G
  detail::Vector<S> beta;   // n
};

template <class S>
void load_chunk(const Problem& problem, const Options& options, int64_t batch_row,
                int64_t first_token, int64_t rows, int64_t head, ChunkInputs<S>& in) {
  const int64_t K = problem.key_dim, V = problem.value_dim;
  const detail::TokenLayout layout{problem.tokens, problem.heads};
  in.q_hat.resize(rows, K);
  in.k.resize(rows, K);
  in.v.resize(rows, V);
  in.gate.resize(rows, K);
  in.beta.resize(rows);
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t row = layout.row(batch_row, first_token + i, head);
    detail::load_query_row(problem, options, row * K, in.q_hat.row(i).data());
    detail::widen_row(problem.k, row * K, K, in.k.row(i).data());
    detail::widen_row(problem.v, row * V, V, in.v.row(i).data());
    detail::widen_row(problem.gate, row * K, K, in.gate.row(i).data());
    in.beta[i] = static_cast<S>(problem.beta[row]);
  }
}

// Step 1: both intra-chunk grams with the exact pairwise relative decay 2^(G_i - G_j) per
// channel (no reference-row factorization: the reference has no range to protect).
//   A_qk[i, j] = scale  * sum_d q_i[d] k_j[d] 2^(G_i[d] - G_j[d])   for j <= i
//   A_kk[i, j] = beta_i * sum_d k_i[d] k_j[d] 2^(G_i[d] - G_j[d])   for j <  i
// For each row i the decayed keys k_j * 2^(G_i - G_j), j <= i, are formed once and both grams
// come from matrix-vector products with them. `decayed_k` and `dots` are workspaces.
template <class S>
void intra_chunk_grams(const ChunkInputs<S>& in, S scale, Matrix<S>& a_qk, Matrix<S>& a_kk,
                       Matrix<S>& decayed_k, detail::Vector<S>& dots) {
  const Index n = in.k.rows(), K = in.k.cols();
  a_qk.setZero(n, n);
  a_kk.setZero(n, n);
  decayed_k.resize(n, K);
  dots.resize(n);
  for (Index i = 0; i < n; ++i) {
    const S* g_i = in.gate.row(i).data();
    for (Index j = 0; j < i; ++j) {
      const S* g_j = in.gate.row(j).data();
      const S* k_j = in.k.row(j).data();
      S* decayed = decayed_k.row(j).data();
      for (Index d = 0; d < K; ++d) decayed[d] = k_j[d] * detail::exp2_or_zero(g_i[d] - g_j[d]);
    }
    decayed_k.row(i) = in.k.row(i);  // 2^0 = 1
    dots.head(i + 1).noalias() = decayed_k.topRows(i + 1) * in.q_hat.row(i).transpose();
    for (Index j = 0; j <= i; ++j) a_qk(i, j) = scale * dots[j];
    dots.head(i + 1).noalias() = decayed_k.topRows(i + 1) * in.k.row(i).transpose();
    for (Index j = 0; j < i; ++j) a_kk(i, j) = in.beta[i] * dots[j];
  }
}

// Workspaces reused across the chunks of one (sequence, head).
template <class S>
struct ChunkWorkspace {
  Matrix<S> gamma;      // n x K: 2^G
  Matrix<S> decayed_k;  // n x K: see intra_chunk_grams
  detail::Vector<S> dots;
};

// Steps 1-6 for one chunk. `step` receives every intermediate (it doubles as the trace record);
// `state` enters as S_c and leaves as S_{c+1}; `out` receives the chunk's n x V output.
template <class S>
void chunk_step(const ChunkInputs<S>& in, S scale, Matrix<S>& state, ChunkTrace<S>& step,
                ChunkWorkspace<S>& work, Matrix<S>& out) {
  const Index n = in.k.rows();
  const auto exp2 = [](S x) { return detail::exp2_or_zero(x); };
  Matrix<S>& gamma = work.gamma;
  gamma = in.gate.unaryExpr(exp2);           // Gamma_i = 2^(G_i), entries <= 1
  const auto last_gate = in.gate.row(n - 1);  // G_{n-1} of the last valid row

  intra_chunk_grams(in, scale, step.A_qk, step.A_kk, work.decayed_k, work.dots);

  // 2. T = (I + A_kk)^-1 by forward substitution. The UnitLower view of A_kk reads only its
  // strictly lower part and takes the diagonal as 1, i.e. it is exactly I + A_kk.
  step.T.setIdentity(n, n);
  step.A_kk.template triangularView<Eigen::UnitLower>().solveInPlace(step.T);

  // 3. W = T (beta * k * Gamma), U = T (beta * v).
  step.W.noalias() = step.T * (in.beta.asDiagonal() * in.k.cwiseProduct(gamma));
  step.U.noalias() = step.T * (in.beta.asDiagonal() * in.v);

  // Operands of steps 5 and 6: q' = scale * q_hat * Gamma, kg = k * 2^(G_{n-1} - G).
  step.q_prime = scale * in.q_hat.cwiseProduct(gamma);
  step.kg.resize(n, in.k.cols());
  for (Index i = 0; i < n; ++i)
    step.kg.row(i) = in.k.row(i).cwiseProduct((last_gate - in.gate.row(i)).unaryExpr(exp2));

  // 4. V_new = U - W S_c (row i is the recurrence's delta_i).
  step.state_in = state;
  step.V_new = step.U;
  step.V_new.noalias() -= step.W * state;

  // 5. O = q' S_c + A_qk V_new.
  out.noalias() = step.q_prime * state;
  out.noalias() += step.A_qk * step.V_new;

  // 6. S_{c+1} = diag(Gamma_{n-1}) S_c + kg^T V_new.
  state.array().colwise() *= gamma.row(n - 1).transpose().array();
  state.noalias() += step.kg.transpose() * step.V_new;
}

bool traced(const TraceFilter& filter, int64_t sequence, int64_t head) {
  return (filter.head < 0 || filter.head == head) &&
         (filter.sequence < 0 || filter.sequence == sequence);
}

// Runs every chunk of one (sequence, head); writes its output rows and returns the final state.
template <class S>
Matrix<S> run_sequence_head(const Problem& problem, const Options& options,
                            const detail::SequenceSpan& span, int64_t sequence, int64_t head,
                            std::vector<S>& out, std::vector<ChunkTrace<S>>* trace) {
  const int64_t V = problem.value_dim;
  const detail::TokenLayout layout{problem.tokens, problem.heads};
  const S scale = detail::resolved_scale<S>(options, problem.key_dim);

  Matrix<S> state = detail::initial_state<S>(problem, sequence, head);
  ChunkInputs<S> in;
  ChunkTrace<S> step;
  ChunkWorkspace<S> work;
  Matrix<S> chunk_out;
  int64_t chunk = 0;
  for (int64_t first = span.begin; first < span.end; first += options.chunk_size, ++chunk) {
    const int64_t rows = std::min<int64_t>(options.chunk_size, span.end - first);
    load_chunk(problem, options, span.batch_row, first, rows, head, in);
    chunk_step(in, scale, state, step, work, chunk_out);
    for (int64_t i = 0; i < rows; ++i) {
      S* destination = out.data() + layout.row(span.batch_row, first + i, head) * V;
      Eigen::Map<detail::Vector<S>>(destination, V) = chunk_out.row(i).transpose();
    }
    if (trace != nullptr) {
      step.sequence = sequence;
      step.head = head;
      step.chunk = chunk;
      step.first_token = span.batch_row * problem.tokens + first;
      step.rows = rows;
      trace->push_back(step);
    }
  }
  return state;
}

}  // namespace

template <class S>
Result<S> chunked_forward(const Problem& problem, const Options& options,
                          std::vector<ChunkTrace<S>>* trace, TraceFilter filter) {
  problem.check();
  detail::check_options(options);
  const auto spans = detail::sequence_spans(problem.batch, problem.tokens, problem.cu_seqlens);
  const int64_t states = problem.num_states();
  const int64_t heads = problem.heads;

  Result<S> result;
  // Zero-filled: rows at or after cu[N] are never written.
  result.out.assign(problem.batch * problem.tokens * heads * problem.value_dim, S(0));
  if (options.final_state)
    result.final_state.assign(states * heads * problem.key_dim * problem.value_dim, S(0));

  // One trace list per (sequence, head) task, concatenated in task order afterwards so the
  // record order does not depend on thread scheduling.
  std::vector<std::vector<ChunkTrace<S>>> task_traces(
      trace != nullptr ? static_cast<std::size_t>(states * heads) : 0);

  detail::for_each_sequence_head(states, heads, [&](int64_t sequence, int64_t head) {
    std::vector<ChunkTrace<S>>* task_trace =
        trace != nullptr && traced(filter, sequence, head)
            ? &task_traces[static_cast<std::size_t>(sequence * heads + head)]
            : nullptr;
    const Matrix<S> state = run_sequence_head<S>(problem, options, spans[sequence], sequence,
                                                 head, result.out, task_trace);
    if (options.final_state)
      detail::store_final_state(state, problem, sequence, head, result.final_state);
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

}  // namespace kda::ref
