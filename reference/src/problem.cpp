// Problem validation and the helpers that turn a problem into sequences.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "detail.h"
#include "kda/ref/reference.h"

namespace kda::ref {

namespace detail {

void check_size(const char* field, std::size_t actual, int64_t expected, const char* formula) {
  if (static_cast<int64_t>(actual) == expected) return;
  std::ostringstream message;
  message << field << ": expected " << expected << " elements (" << formula << "), got "
          << actual;
  throw std::invalid_argument(message.str());
}

void check_cu_seqlens(const std::vector<int32_t>& cu_seqlens, int64_t batch, int64_t tokens,
                      const char* field) {
  if (cu_seqlens.empty()) return;  // dense
  auto fail = [field](const std::string& what) {
    throw std::invalid_argument(std::string(field) + ": " + what);
  };
  if (cu_seqlens.size() < 2) fail("needs at least 2 entries (N + 1 with N >= 1), got 1");
  if (batch != 1) fail("packed sequences need batch == 1, got batch = " + std::to_string(batch));
  if (cu_seqlens.front() != 0)
    fail("must start at 0, got cu_seqlens[0] = " + std::to_string(cu_seqlens.front()));
  for (std::size_t i = 1; i < cu_seqlens.size(); ++i) {
    if (cu_seqlens[i] < cu_seqlens[i - 1])
      fail("must be non-decreasing, got cu_seqlens[" + std::to_string(i) +
           "] = " + std::to_string(cu_seqlens[i]) + " < cu_seqlens[" + std::to_string(i - 1) +
           "] = " + std::to_string(cu_seqlens[i - 1]));
  }
  if (cu_seqlens.back() > tokens)
    fail("last entry must be <= tokens = " + std::to_string(tokens) + ", got " +
         std::to_string(cu_seqlens.back()));
}

std::vector<SequenceSpan> sequence_spans(int64_t batch, int64_t tokens,
                                         const std::vector<int32_t>& cu_seqlens) {
  std::vector<SequenceSpan> spans;
  if (cu_seqlens.empty()) {
    for (int64_t b = 0; b < batch; ++b) spans.push_back({b, 0, tokens});
  } else {
    for (std::size_t s = 0; s + 1 < cu_seqlens.size(); ++s)
      spans.push_back({0, cu_seqlens[s], cu_seqlens[s + 1]});
  }
  return spans;
}

void check_options(const Options& options) {
  if (options.chunk_size < 1)
    throw std::invalid_argument("Options::chunk_size: must be >= 1, got " +
                                std::to_string(options.chunk_size));
  if (!std::isfinite(options.scale))
    throw std::invalid_argument("Options::scale: must be finite (0 = 1/sqrt(K))");
}

}  // namespace detail

int64_t Problem::num_states() const {
  return cu_seqlens.empty() ? batch : static_cast<int64_t>(cu_seqlens.size()) - 1;
}

void Problem::check() const {
  auto require_non_negative = [](const char* field, int64_t value, int64_t minimum) {
    if (value < minimum)
      throw std::invalid_argument(std::string(field) + ": must be >= " + std::to_string(minimum) +
                                  ", got " + std::to_string(value));
  };
  require_non_negative("Problem::batch", batch, 0);
  require_non_negative("Problem::tokens", tokens, 0);
  require_non_negative("Problem::heads", heads, 0);
  require_non_negative("Problem::key_dim", key_dim, 1);
  require_non_negative("Problem::value_dim", value_dim, 1);

  detail::check_cu_seqlens(cu_seqlens, batch, tokens, "Problem::cu_seqlens");

  const int64_t rows = batch * tokens * heads;
  detail::check_size("Problem::q", q.size(), rows * key_dim, "B*T*H*K");
  detail::check_size("Problem::k", k.size(), rows * key_dim, "B*T*H*K");
  detail::check_size("Problem::v", v.size(), rows * value_dim, "B*T*H*V");
  detail::check_size("Problem::gate", gate.size(), rows * key_dim, "B*T*H*K");
  detail::check_size("Problem::beta", beta.size(), rows, "B*T*H");
  if (!initial_state.empty())
    detail::check_size("Problem::initial_state", initial_state.size(),
                       num_states() * heads * key_dim * value_dim, "N*H*K*V or empty");
}

}  // namespace kda::ref
