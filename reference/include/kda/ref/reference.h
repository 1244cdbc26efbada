// kda::ref: the CPU reference of the KDA forward, the project's ground truth.
//
// Templated on the scalar: double is the golden, float the "low" reference of the error budget
// (../shared/spec/kda-forward.md §9.4). Any K and V. Inputs are the exact (already rounded) values
// the kernels consume, widened to float. Parallel over sequences x heads (OpenMP); the hot loops
// are plain C++ with a fixed order per output element, compiled for several instruction sets
// (Isa below), so the bits depend neither on the thread count nor on the CPU.
#pragma once

#include <cstdint>
#include <vector>

#include <Eigen/Core>

namespace kda::ref {

template <class S>
using Matrix = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// One forward problem, token-major [B, T, H, D] layouts as in the kernels.
struct Problem {
  int64_t batch = 0;
  int64_t tokens = 0;
  int64_t heads = 0;
  int64_t key_dim = 128;
  int64_t value_dim = 128;
  // Empty: dense, sequence b = batch row b (N = B). Otherwise batch == 1 and sequence s owns
  // tokens [cu[s], cu[s+1]); N = cu.size() - 1.
  std::vector<int32_t> cu_seqlens;
  std::vector<float> q, k;          // [B, T, H, K]; q raw (normalized by the reference if asked)
  std::vector<float> v;             // [B, T, H, V]
  std::vector<float> gate;          // cumulative log2 gate, chunk-local (C = 64), [B, T, H, K]
  std::vector<float> beta;          // [B, T, H]
  std::vector<float> initial_state; // [N, H, K, V] or empty (zero state)

  int64_t num_states() const;  // N (packed) or B (dense)
  // Throws std::invalid_argument naming the field when sizes, offsets or buffers disagree.
  void check() const;
};

struct Options {
  bool normalize_q = true;   // apply l2norm to q rows in the reference's own precision
  bool final_state = true;   // compute the final state
  int chunk_size = 64;       // chunked algorithm only; the gate must be chunk-local for this size
  double scale = 0.0;        // 0 = 1/sqrt(K)
  // The "state-carry" baseline: zero the state at the start of every chunk_size-token chunk
  // (chunks counted from each sequence start, as the gate's), the first one included, so the
  // initial state is ignored and every chunk sees only its own tokens. Both algorithms.
  bool reset_state_at_chunk_starts = false;
};

template <class S>
struct Result {
  std::vector<S> out;          // [B, T, H, V]; rows at or after cu[N] are zero
  std::vector<S> final_state;  // [N, H, K, V] when asked for, else empty
};

// Intermediates of one chunk (kda-forward.md §2.2) so kernels can be diffed stage by stage.
template <class S>
struct ChunkTrace {
  int64_t sequence = 0, head = 0, chunk = 0;  // chunk index within the sequence
  int64_t first_token = 0;                     // packed token index of row 0 (dense: b*T + t)
  int64_t rows = 0;                            // n <= chunk_size
  Matrix<S> A_kk;      // n x n strictly lower, beta folded in
  Matrix<S> T;         // (I + A_kk)^-1
  Matrix<S> W;         // n x K
  Matrix<S> U;         // n x V
  Matrix<S> q_prime;   // n x K: scale * q_hat * Gamma
  Matrix<S> kg;        // n x K: k * 2^(G_last - G)
  Matrix<S> A_qk;      // n x n inclusive lower, scale folded in
  Matrix<S> V_new;     // n x V
  Matrix<S> state_in;  // K x V: the state entering the chunk
};

// Which chunks to trace (all by default; traces of large problems are big).
struct TraceFilter {
  int64_t head = -1;      // -1: every head
  int64_t sequence = -1;  // -1: every sequence
};

// Per-token recurrence (§2.1): the ground truth.
template <class S>
Result<S> recurrent_forward(const Problem& problem, const Options& options);

// Chunked algorithm (§2.2); agrees with recurrent_forward to rounding. Traces are appended in
// (sequence, head, chunk) order.
template <class S>
Result<S> chunked_forward(const Problem& problem, const Options& options,
                          std::vector<ChunkTrace<S>>* trace = nullptr,
                          TraceFilter filter = {});

// The chunked algorithm split exactly into segments of `segment_chunks` chunks per (sequence,
// head): the form a GPU forward can run in parallel for few long sequences without a bound on the
// decay (docs/design.md "The one-kernel forward"). Pass 1, per segment from a zero state, its
// state contribution B_s and transition M_s = prod over its chunks of (diag(Gamma_{n-1}) - kg^T W)
// (K x K); pass 2, S_{s+1} = M_s S_s + B_s from the initial state; pass 3, every segment again
// from S_s for its outputs. Agrees with chunked_forward to rounding, bit for bit with one segment.
// Throws std::invalid_argument for segment_chunks < 1 or reset_state_at_chunk_starts.
template <class S>
Result<S> segmented_forward(const Problem& problem, const Options& options, int segment_chunks);

// The chunked algorithm with each chunk computed in 16-row blocks, as a 64-token chain step fed
// by 16-token factors would run it (docs/design.md "The one-kernel forward"): block-diagonal T,
// the cross-block grams from anchor-free operands (every factor <= 1), V_new by a block solve
// with M_pc = T_pp A_kk(p, c). Agrees with chunked_forward to rounding. Throws
// std::invalid_argument for a chunk_size that is not a multiple of 16.
template <class S>
Result<S> blocked_forward(const Problem& problem, const Options& options);

// y = x / sqrt(sum x^2 + eps) per row, in precision S; overflow- and underflow-safe for any
// finite row (exact power-of-two pre-scaling); zero row -> zero row; NaN/inf propagate.
// Throws std::invalid_argument for a negative or non-finite eps.
template <class S>
void l2norm_rows(const float* x, S* y, int64_t rows, int64_t dim, double eps = 1e-6);

// Instruction sets the hot loops are compiled for. The widest one the CPU supports is used;
// every one gives bitwise identical results (reference/src/kernels.h says why). Tests and
// benchmarks may force one: set_isa throws std::invalid_argument for one the CPU lacks and must
// not be called while a forward runs.
enum class Isa { baseline, avx2, avx512 };
bool isa_supported(Isa isa);
Isa active_isa();
void set_isa(Isa isa);
const char* isa_name(Isa isa);

// Most negative lower_bound gate_cumsum accepts (§3.1): -128 / (15 * log2 e) = -5.9148559407783,
// so that 15 per-token log2 decays stay within fp32's exponent budget of 128.
inline constexpr double kMinGateLowerBound = -128.0 / (15.0 * 1.4426950408889634);

// Gate producer (§3.1) in precision S, rounded to float:
//   gamma = lb * sigmoid(exp(A_log[h]) * (raw + dt_bias[h, d]))   (natural log)
//   G = inclusive prefix sum of gamma within each chunk (restart at each sequence start) * log2 e
// raw [B, T, H, D] (bf16 values widened), a_log [H], dt_bias [H, D]. Rows at or after cu[N] are 0.
// Throws std::invalid_argument for a lower_bound outside [kMinGateLowerBound, 0] (NaN included),
// bad sizes or offsets, or chunk_size < 1.
template <class S>
std::vector<float> gate_cumsum(const std::vector<float>& raw, const std::vector<float>& a_log,
                               const std::vector<float>& dt_bias, int64_t batch, int64_t tokens,
                               int64_t heads, int64_t dim, double lower_bound,
                               const std::vector<int32_t>& cu_seqlens, int chunk_size = 64);

}  // namespace kda::ref
