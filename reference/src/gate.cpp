// gate_cumsum: the bounded gate producer of kda-forward.md §3.1, computed in precision S and
// rounded to float (the dtype the kernels consume).
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

#include "detail.h"
#include "kda/ref/reference.h"

namespace kda::ref {
namespace {

void check_gate_arguments(const std::vector<float>& raw, const std::vector<float>& a_log,
                          const std::vector<float>& dt_bias, int64_t batch, int64_t tokens,
                          int64_t heads, int64_t dim, double lower_bound,
                          const std::vector<int32_t>& cu_seqlens, int chunk_size) {
  if (batch < 0 || tokens < 0 || heads < 0 || dim < 1)
    throw std::invalid_argument("gate_cumsum: need batch, tokens, heads >= 0 and dim >= 1");
  if (chunk_size < 1)
    throw std::invalid_argument("gate_cumsum: chunk_size must be >= 1, got " +
                                std::to_string(chunk_size));
  // Written so that NaN fails too.
  if (!(lower_bound >= kMinGateLowerBound && lower_bound <= 0.0))
    throw std::invalid_argument("gate_cumsum: lower_bound must lie in [" +
                                std::to_string(kMinGateLowerBound) + ", 0], got " +
                                std::to_string(lower_bound));
  detail::check_cu_seqlens(cu_seqlens, batch, tokens, "gate_cumsum: cu_seqlens");
  detail::check_size("gate_cumsum: raw", raw.size(), batch * tokens * heads * dim, "B*T*H*D");
  detail::check_size("gate_cumsum: a_log", a_log.size(), heads, "H");
  detail::check_size("gate_cumsum: dt_bias", dt_bias.size(), heads * dim, "H*D");
}

}  // namespace

template <class S>
std::vector<float> gate_cumsum(const std::vector<float>& raw, const std::vector<float>& a_log,
                               const std::vector<float>& dt_bias, int64_t batch, int64_t tokens,
                               int64_t heads, int64_t dim, double lower_bound,
                               const std::vector<int32_t>& cu_seqlens, int chunk_size) {
  check_gate_arguments(raw, a_log, dt_bias, batch, tokens, heads, dim, lower_bound, cu_seqlens,
                       chunk_size);
  const auto spans = detail::sequence_spans(batch, tokens, cu_seqlens);
  const detail::TokenLayout layout{tokens, heads};
  const S lb = static_cast<S>(lower_bound);
  const S log2e = std::numbers::log2e_v<S>;  // 1 / ln 2, rounded once to S
  std::vector<float> gate(raw.size(), 0.0f);  // rows at or after cu[N] stay 0

  detail::for_each_sequence_head(
      static_cast<int64_t>(spans.size()), heads, [&](int64_t sequence, int64_t h) {
        const detail::SequenceSpan& span = spans[sequence];
        const S rate = std::exp(static_cast<S>(a_log[h]));
        const float* bias = dt_bias.data() + h * dim;
        detail::Vector<S> running(dim);  // natural-log prefix sum per channel
        for (int64_t t = span.begin; t < span.end; ++t) {
          if ((t - span.begin) % chunk_size == 0) running.setZero();
          const int64_t offset = layout.row(span.batch_row, t, h) * dim;
          for (int64_t d = 0; d < dim; ++d) {
            const S x = rate * (static_cast<S>(raw[offset + d]) + static_cast<S>(bias[d]));
            const S sigmoid = S(1) / (S(1) + std::exp(-x));
            running[d] += lb * sigmoid;  // gamma in (lb, 0], natural log
            gate[offset + d] = static_cast<float>(running[d] * log2e);
          }
        }
      });
  return gate;
}

template std::vector<float> gate_cumsum<float>(const std::vector<float>&,
                                               const std::vector<float>&,
                                               const std::vector<float>&, int64_t, int64_t,
                                               int64_t, int64_t, double,
                                               const std::vector<int32_t>&, int);
template std::vector<float> gate_cumsum<double>(const std::vector<float>&,
                                                const std::vector<float>&,
                                                const std::vector<float>&, int64_t, int64_t,
                                                int64_t, int64_t, double,
                                                const std::vector<int32_t>&, int);

}  // namespace kda::ref
