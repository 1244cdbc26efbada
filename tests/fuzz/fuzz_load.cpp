// libFuzzer target: the --load reader (kda::harness::parse_problem) on a whole problem directory
// made from arbitrary bytes. The input is split into files: the bytes before the first line
// "@file NAME" are meta.json, each such line starts the file NAME (q.npy, cu_seqlens.npy, ...).
// A refusal must be a DumpError or an NpyError; an accepted problem must be one the tools can
// run: consistent sizes and offsets, q/k/v bf16 values, a gate inside the bounded contract, and
// raw inputs (when there) of the right sizes, finite gate parameters, a bound inside the
// contract and a raw gate that reproduces the gate.
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

#include "kda/harness/dump.h"
#include "kda/harness/shapes.h"
#include "kda/ref/reference.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

std::map<std::string, std::string, std::less<>> split_files(std::string_view input) {
  constexpr std::string_view kMarker = "\n@file ";
  std::map<std::string, std::string, std::less<>> files;
  std::string name = "meta.json";
  // A marker on the first line has no '\n' before it: give it one, and no meta.json.
  size_t pos = 0;
  size_t at = input.substr(0, kMarker.size() - 1) == kMarker.substr(1) ? 0 : input.find(kMarker);
  bool first = at == 0;
  while (true) {
    if (!first) files[name] = std::string(input.substr(pos, std::min(at, input.size()) - pos));
    first = false;
    if (at == std::string_view::npos) break;
    const size_t marker = at == 0 && input[0] == '@' ? kMarker.size() - 1 : kMarker.size();
    const size_t name_start = at + marker;
    const size_t name_end = std::min(input.find('\n', name_start), input.size());
    name = std::string(input.substr(name_start, name_end - name_start));
    pos = std::min(name_end + 1, input.size());
    at = input.find(kMarker, pos);
  }
  return files;
}

void check_accepted(const kda::harness::DumpedProblem& p) {
  const kda::harness::HostInputs& in = p.inputs;
  check(kda::harness::is_valid_shape_id(p.id));
  check(in.batch >= 1 && in.tokens >= 1 && in.heads >= 1 && in.key_dim >= 1 && in.value_dim >= 1);
  const auto rows = static_cast<size_t>(in.batch * in.tokens * in.heads);
  check(in.q.size() == rows * static_cast<size_t>(in.key_dim));
  check(in.k.size() == in.q.size() && in.gate.size() == in.q.size());
  check(in.v.size() == rows * static_cast<size_t>(in.value_dim));
  check(in.beta.size() == rows);
  if (!in.cu_seqlens.empty()) {
    check(in.batch == 1 && in.cu_seqlens.size() >= 2 && in.cu_seqlens.front() == 0);
    for (size_t i = 1; i < in.cu_seqlens.size(); ++i) {
      check(in.cu_seqlens[i - 1] <= in.cu_seqlens[i]);
    }
    check(in.cu_seqlens.back() <= in.tokens);
  }
  if (!in.initial_state.empty()) {
    check(in.initial_state.size() == static_cast<size_t>(in.num_states() * in.heads *
                                                         in.key_dim * in.value_dim));
  }
  in.to_reference().check();                      // throws (and fails the run) if inconsistent
  kda::harness::check_gate_contract(in, "gate");  // likewise
  if (!in.has_raw_inputs()) {
    check(in.raw_k.empty() && in.raw_gate.empty() && in.beta_logits.empty() && in.dt_bias.empty());
    return;
  }
  check(in.raw_k.size() == in.q.size() && in.raw_gate.size() == in.q.size());
  check(in.beta_logits.size() == rows);
  check(in.a_log.size() == static_cast<size_t>(in.heads));
  check(in.dt_bias.size() == static_cast<size_t>(in.heads * in.key_dim));
  for (float a : in.a_log) check(std::isfinite(a) && a <= 88.0f);
  for (float d : in.dt_bias) check(std::isfinite(d));
  check(in.lower_bound >= kda::ref::kMinGateLowerBound && in.lower_bound <= 0.0f);
  kda::harness::check_raw_gate(in, "gate_raw", "gate");  // throws (and fails the run) if off
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  kda::harness::MemoryFiles files("fuzz", split_files(input));
  kda::harness::DumpedProblem problem;
  try {
    problem = kda::harness::parse_problem(files);
  } catch (const kda::harness::DumpError&) {
    return 0;  // a refusal with a message
  } catch (const kda::harness::NpyError&) {
    return 0;
  }
  try {
    check_accepted(problem);
  } catch (...) {
    std::abort();  // the reader accepted a problem that its own checks refuse
  }
  return 0;
}
