// recurrent_forward: the per-token recurrence of kda-forward.md §2.1, the ground truth.
//
// Per (sequence, head) the state is a plain row-major K x V array. Tokens are taken in blocks (at
// most kBlockTokens; never across a chunk start when the state is reset there) whose per-token
// operands (decay, k, scale * q_hat, beta, v) are formed first; detail::recurrent_tokens then
// runs the block's tokens over the state in two fused sweeps per token (kernels.h gives the
// exact operation order).
#include <algorithm>
#include <cmath>
#include <vector>

#include "detail.h"
#include "kda/ref/reference.h"
#include "kernels.h"

namespace kda::ref {
namespace {

// Tokens whose operands are formed per call of the sweep kernel: the kernel keeps one value
// slice of the state in L1 across them (copied in and out once per call), and re-reads their
// operands (~1 MiB for 256 tokens at K = V = 128 in double: L2) once per slice.
constexpr int64_t kBlockTokens = 256;

// Operand buffers of one block of tokens, reused across the blocks of one (sequence, head).
template <class S>
struct TokenBlock {
  std::vector<S> decay, k, sq, beta, v;
  std::vector<float> q_raw;
  explicit TokenBlock(int64_t K, int64_t V)
      : decay(kBlockTokens * K), k(kBlockTokens * K), sq(kBlockTokens * K), beta(kBlockTokens),
        v(kBlockTokens * V) {}
};

// Runs one (sequence, head) pair token by token; writes its output rows and leaves the final
// state in `state` (K x V row-major).
template <class S>
void run_sequence_head(const Problem& problem, const Options& options,
                       const detail::SequenceSpan& span, int64_t sequence, int64_t head,
                       std::vector<S>& out, std::vector<S>& state) {
  const int64_t K = problem.key_dim, V = problem.value_dim;
  const detail::TokenLayout layout{problem.tokens, problem.heads};
  const S scale = detail::resolved_scale<S>(options, K);
  const int64_t chunk = options.chunk_size;

  detail::load_initial_state(problem, options, sequence, head, state.data());
  TokenBlock<S> block(K, V);
  for (int64_t first = span.begin; first < span.end;) {
    // A block ends at the next chunk start when the state is reset there.
    const int64_t offset = first - span.begin;  // position in the sequence
    const int64_t limit =
        options.reset_state_at_chunk_starts ? chunk - offset % chunk : kBlockTokens;
    const int64_t n = std::min({kBlockTokens, limit, span.end - first});
    if (options.reset_state_at_chunk_starts && offset % chunk == 0)
      std::fill(state.begin(), state.end(), S(0));

    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = first + i;
      const int64_t row = layout.row(span.batch_row, t, head);
      const bool chunk_start = (t - span.begin) % chunk == 0;
      const float* gate = problem.gate.data() + row * K;
      const float* previous_gate =
          chunk_start ? nullptr
                      : problem.gate.data() + layout.row(span.batch_row, t - 1, head) * K;
      // Log2 decay gamma_t: G_t at a chunk start (G restarts there), else G_t - G_{t-1} (in S);
      // the decay is 2^gamma. The chunked algorithm uses 2^(G_i - G_j) for the same pairs, so
      // both agree to rounding.
      detail::gate_difference(gate, previous_gate, block.decay.data() + i * K, K);
      detail::widen(problem.k.data() + row * K, block.k.data() + i * K, K);
      detail::widen(problem.v.data() + row * V, block.v.data() + i * V, V);
      block.beta[i] = static_cast<S>(problem.beta[row]);
    }
    detail::exp2_array(block.decay.data(), block.decay.data(), n * K);
    detail::load_query_rows(problem, options, span.batch_row, first, n, head, block.q_raw,
                            block.sq.data());
    for (int64_t e = 0; e < n * K; ++e) block.sq[e] = scale * block.sq[e];

    detail::RecurrentTokens<S> tokens;
    tokens.tokens = n;
    tokens.key_dim = K;
    tokens.value_dim = V;
    tokens.decay = block.decay.data();
    tokens.k = block.k.data();
    tokens.sq = block.sq.data();
    tokens.beta = block.beta.data();
    tokens.v = block.v.data();
    // Output rows of consecutive tokens are H rows apart.
    tokens.out = out.data() + layout.row(span.batch_row, first, head) * V;
    tokens.out_stride = problem.heads * V;
    detail::recurrent_tokens(tokens, state.data());

    first += n;
  }
}

}  // namespace

template <class S>
Result<S> recurrent_forward(const Problem& problem, const Options& options) {
  problem.check();
  detail::check_options(options);
  const auto spans = detail::sequence_spans(problem.batch, problem.tokens, problem.cu_seqlens);
  const int64_t states = problem.num_states();
  const int64_t KV = problem.key_dim * problem.value_dim;

  Result<S> result;
  // Zero-filled: rows at or after cu[N] are never written.
  result.out.assign(problem.batch * problem.tokens * problem.heads * problem.value_dim, S(0));
  if (options.final_state) result.final_state.assign(states * problem.heads * KV, S(0));

  detail::for_each_sequence_head(states, problem.heads, [&](int64_t sequence, int64_t head) {
    std::vector<S> state(KV);
    run_sequence_head<S>(problem, options, spans[sequence], sequence, head, result.out, state);
    if (options.final_state)
      detail::store_final_state(state.data(), problem, sequence, head, result.final_state);
  });
  return result;
}

template Result<float> recurrent_forward<float>(const Problem&, const Options&);
template Result<double> recurrent_forward<double>(const Problem&, const Options&);

}  // namespace kda::ref
