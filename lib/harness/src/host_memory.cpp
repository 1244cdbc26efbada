// Host-memory estimate and check (host_memory.h).
#include "kda/harness/host_memory.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <iterator>
#include <string>

#include <fmt/format.h>

#include "kda/harness/report.h"

namespace kda::harness {

HostFootprint host_footprint(const ProblemSize& d, HostWork work, bool raw_golden) {
  // Sizes in double: a shape near the parser's 2^40-element bound must not wrap size_t.
  const double th = static_cast<double>(d.token_heads());
  const double k = static_cast<double>(d.key_dim), v = static_cast<double>(d.value_dim);
  const double s = static_cast<double>(d.state_elements());
  const double h0 = d.initial_state ? s : 0.0;
  const double ht = d.final_state ? s : 0.0;

  HostFootprint f;
  // HostInputs::to_reference: q k v widened to fp32, gate, beta and the state copied.
  const double copy = th * (4 * k + 4 * k + 4 * v + 4 * k + 4) + 4 * h0;
  double working = 0.0;
  switch (work) {
    case HostWork::inputs_only:
      // make_inputs holds the raw gate (fp32) while it forms the cumulative one.
      working = th * 4 * k;
      break;
    case HostWork::gpu_check: {
      // compute_golden keeps out, out_low, q_hat, q_hat_low and the final states (fp64); while
      // it runs, the fp32 copy, the fp32 results before widening and the state-carry run's fp64
      // output (kda-check) are alive too.
      const double golden = th * (8 * v + 8 * v + 8 * k + 8 * k) + 16 * ht;
      const double computing = copy + th * (4 * v + 4 * k + 8 * v) + 4 * ht;
      // check_path: the kept outputs of fused, explicit and l2norm (fp32), a repeat run and its
      // bf16 download, and two fp64 widenings at once (judge_against_explicit).
      double judging = th * (4 * v + 4 * v + 4 * k + 4 * v + 2 * v + 16 * v) + 20 * ht;
      if (!raw_golden) {
        working = golden + std::max(computing, judging);
        break;
      }
      // compute_raw_golden keeps out, out_low and the final states (fp64) beside the golden;
      // while it runs, its fp32 copy (k and beta re-derived in place), the state-carry run's
      // fp64 output and the fp32 results before widening. The raw path's output is kept too.
      const double raw_kept = th * (8 * v + 8 * v) + 16 * ht;
      const double raw_computing = copy + th * (8 * v + 4 * v) + 4 * ht;
      judging += th * 4 * v + 4 * ht;
      working = golden + raw_kept + std::max({computing, raw_computing, judging});
      break;
    }
    case HostWork::reference:
      // check_reference: the fp32 copy, recurrent and chunked results in fp64 and fp32, the
      // state-carry run's fp64 output, and the fp64 widenings of the fp32 pair being judged.
      working = copy + th * (8 * v + 8 * v + 4 * v + 4 * v + 8 * v) + 24 * ht +
                std::max(th * 16 * v, 16 * ht);
      break;
  }
  auto bytes = [](double x) {
    return x >= 0x1p63 ? static_cast<size_t>(1) << 63 : static_cast<size_t>(x);
  };
  f.inputs = d.input_bytes();
  f.working = bytes(working);
  return f;
}

namespace {

// The value of `key:` in /proc/meminfo text, in bytes (the file says kB).
std::optional<uint64_t> meminfo_field(std::string_view text, std::string_view key) {
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.size() <= key.size() || line.substr(0, key.size()) != key ||
        line[key.size()] != ':') {
      continue;
    }
    line.remove_prefix(key.size() + 1);
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    uint64_t kib = 0;
    const auto [ptr, ec] = std::from_chars(line.data(), line.data() + line.size(), kib);
    if (ec != std::errc()) return std::nullopt;
    return kib * 1024;
  }
  return std::nullopt;
}

std::optional<std::string> read_kernel_file(const char* path) {
  // /proc and /sys files report a size of 0: read them as streams.
  std::ifstream in(path);
  if (!in) return std::nullopt;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::optional<uint64_t> parse_u64(const std::string& text) {
  uint64_t value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc()) return std::nullopt;
  return value;
}

}  // namespace

std::optional<AvailableMemory> parse_meminfo(std::string_view meminfo) {
  if (auto available = meminfo_field(meminfo, "MemAvailable")) {
    return AvailableMemory{*available, "MemAvailable"};
  }
  const auto free = meminfo_field(meminfo, "MemFree");
  if (!free) return std::nullopt;
  return AvailableMemory{*free + meminfo_field(meminfo, "Buffers").value_or(0) +
                             meminfo_field(meminfo, "Cached").value_or(0),
                         "MemFree + Buffers + Cached"};
}

std::optional<AvailableMemory> available_host_memory() {
  std::optional<AvailableMemory> available;
  if (const auto text = read_kernel_file("/proc/meminfo")) available = parse_meminfo(*text);
  // In a container the machine's MemAvailable is not what the cgroup lets us have.
  const auto limit = read_kernel_file("/sys/fs/cgroup/memory.max");
  const auto current = read_kernel_file("/sys/fs/cgroup/memory.current");
  if (limit && current) {
    const auto max = parse_u64(*limit), used = parse_u64(*current);  // "max": no limit
    if (max && used) {
      const uint64_t left = *max > *used ? *max - *used : 0;
      if (!available || left < available->bytes) {
        available = AvailableMemory{left, "cgroup memory.max"};
      }
    }
  }
  return available;
}

std::string host_memory_shortfall(const std::string& shape_id, const HostFootprint& need,
                                  const AvailableMemory& available) {
  if (need.total() <= available.bytes) return "";
  return fmt::format(
      "shape '{}' needs about {} of host memory ({} bytes: inputs {}{}, references and "
      "judging {}), {} available ({}); use a smaller shape, check fewer shapes at a time "
      "(--only), or free memory",
      shape_id, format_gib(need.total()), need.total(), need.inputs,
      need.inputs_loaded ? " loaded already" : "", need.working, format_gib(available.bytes),
      available.source);
}

void require_host_memory(const std::string& shape_id, const HostFootprint& need) {
  const std::optional<AvailableMemory> available = available_host_memory();
  if (!available) return;
  const std::string shortfall = host_memory_shortfall(shape_id, need, *available);
  if (!shortfall.empty()) throw HostMemoryError(shortfall);
}

std::string out_of_host_memory(const std::string& during) {
  return fmt::format(
      "out of host memory (std::bad_alloc) {}; use a smaller shape, check fewer shapes at a time "
      "(--only), or free memory",
      during);
}

}  // namespace kda::harness
