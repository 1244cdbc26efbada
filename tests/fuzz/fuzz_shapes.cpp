// libFuzzer target: the shape-file parser (kda::harness::parse_shape_file) on arbitrary bytes.
// A refusal must be a ShapeFileError; anything else escaping (a yaml-cpp exception, a crash, a
// sanitizer report, a hang) is a bug. An accepted file must satisfy the invariants the tools
// rely on (sizes positive, offsets int32 and consistent).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <set>
#include <string>

#include "kda/harness/shapes.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();  // libFuzzer reports the abort with the input that caused it
}

void check_invariants(const kda::harness::ShapeFile& file) {
  check(!file.shapes.empty());
  std::set<std::string> ids;
  for (const kda::harness::ShapeSpec& s : file.shapes) {
    check(!s.id.empty() && ids.insert(s.id).second);
    check(s.heads >= 1 && s.key_dim >= 1 && s.value_dim >= 1);
    check(s.tokens() >= 1 && s.tokens() <= std::numeric_limits<int32_t>::max());
    check(s.batch_rows() >= 1 && s.num_sequences() >= 1);
    check(s.active_tokens() >= 0 && s.active_tokens() <= s.batch_rows() * s.tokens());
    if (s.dense()) {
      check(s.seq_lens.empty() && s.cu_seqlens().empty());
    } else {
      const std::vector<int32_t> cu = s.cu_seqlens();
      check(cu.size() == s.seq_lens.size() + 1 && cu.front() == 0);
      for (size_t i = 0; i + 1 < cu.size(); ++i) check(cu[i] <= cu[i + 1]);
      check(cu.back() == s.active_tokens() && cu.back() <= s.tokens());
    }
    if (s.q_rows.enabled) {
      check(s.q_rows.min_scale > 0 && s.q_rows.max_scale >= s.q_rows.min_scale);
      check(s.q_rows.zero_rows >= 0);
    }
    // The gate recipe: finite ranges in order, a lower bound inside the contract, a_log whose
    // exp stays finite in fp32; the parser reads no file (values come with load_shape_file).
    const kda::harness::GateRecipe& g = s.gate;
    check(std::isfinite(g.a_log.lo) && g.a_log.lo <= g.a_log.hi && g.a_log.hi <= 88.0);
    check(std::isfinite(g.dt_bias.lo) && g.dt_bias.lo <= g.dt_bias.hi && std::isfinite(g.dt_bias.hi));
    check(g.lower_bound >= -5.9148559407783 && g.lower_bound <= 0.0);
    check(std::isfinite(g.raw_mean) && std::isfinite(g.raw_std) && g.raw_std >= 0.0);
    check(g.a_log_values.empty() && g.dt_bias_values.empty());
    check(kda::harness::gate_preset(g.preset).has_value());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    check_invariants(kda::harness::parse_shape_file(text, "fuzz.yaml"));
  } catch (const kda::harness::ShapeFileError&) {
    // a refusal with a message: the expected outcome for most inputs
  }
  return 0;
}
