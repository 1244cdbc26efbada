// The forward's kernel choice (kernel_choice.h): a time model of both kernels per call.
#include "kernel_choice.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "onepass/record16.h"

namespace kda::detail {

namespace {

// H200 measurements (docs/perf-notes.md "The one-pass forward in the library"): per one-pass
// chain the first build before the chain can start plus the state's 64 KB in and out (the step:
// kernel_choice.h); the two-kernel PREP per 64-token chunk-head of SM time, and the SCAN's chunk
// latency and SM time.
constexpr double kOnePassChainUs = 4.0;
constexpr double kPrepChunkSmUs = 7.3;
constexpr double kScanChunkUs = 2.07;
constexpr double kScanChunkSmUs = 2.8;
// The one pass must be estimated this much faster: the model's error on the measured shapes is a
// few percent, and the two kernels are the better-known quantity.
constexpr double kOnePassMargin = 0.95;
// List scheduling is simulated up to this many chains; beyond, its bound.
constexpr int64_t kSimulatedChains = 16384;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

bool one_pass_reads(const ForwardParams& p) {
  const auto resolved = [&](int64_t stride) {
    return stride == 0 ? static_cast<int64_t>(p.heads) * kHeadDim : stride;
  };
  onepass::BuildInputs in{};
  in.q_stride = resolved(p.q_token_stride);
  in.k_stride = resolved(p.k_token_stride);
  in.v_stride = resolved(p.v_token_stride);
  in.heads = p.heads;
  return onepass::row_offsets_fit(in);
}

double two_kernel_slowdown(double dram_bytes_per_s) {
  if (!(dram_bytes_per_s > 0)) return 1.0;  // unknown: the H200's times
  return std::max(1.0, std::pow(kH200DramBytesPerS / dram_bytes_per_s,
                                kTwoKernelBandwidthExponent));
}

namespace {

// Chains of `groups` (longest first) x heads, each chain_us(length), list-scheduled on `machines`
// that each run one chain at a time: the time the last one finishes.
template <class ChainUs>
double list_schedule_us(const std::vector<LengthGroup>& groups, int heads, double machines_in,
                        double chains, const ChainUs& chain_us) {
  if (chains == 0) return 0;
  if (chains <= static_cast<double>(kSimulatedChains)) {
    // The machines' free times, ascending; a chain goes to the machine that frees first. While
    // they lie within one chain's duration of each other, the next n <= machines equal chains go
    // one each to the n earliest, which then free last in the same order (a rotation); whole
    // rounds at once. Otherwise one chain at a time.
    const int64_t machines = static_cast<int64_t>(std::min(machines_in, chains));
    std::vector<double> free_at(static_cast<size_t>(machines), 0.0);
    for (const LengthGroup& g : groups) {
      const double duration = chain_us(g.length);
      int64_t left = g.count * heads;
      while (left > 0) {
        if (free_at.back() - free_at.front() <= duration) {
          const int64_t rounds = left / machines, n = left % machines;
          for (double& t : free_at) t += static_cast<double>(rounds) * duration;
          for (int64_t i = 0; i < n; ++i) free_at[static_cast<size_t>(i)] += duration;
          std::rotate(free_at.begin(), free_at.begin() + n, free_at.end());
          left = 0;
        } else {
          const double done = free_at.front() + duration;
          free_at.erase(free_at.begin());
          free_at.insert(std::upper_bound(free_at.begin(), free_at.end(), done), done);
          --left;
        }
      }
    }
    return free_at.back();
  }
  double work = 0;
  for (const LengthGroup& g : groups) {
    if (g.count > 0) work += chain_us(g.length) * static_cast<double>(g.count) * heads;
  }
  return work / machines_in + chain_us(groups.front().length);
}

}  // namespace

ForwardEstimate estimate_forward_grouped(std::vector<LengthGroup> groups, int heads, int sm_count,
                                         double step_us, double dram_bytes_per_s,
                                         int halves_clusters, double halves_step_us) {
  ForwardEstimate e;
  const double sms = std::max(sm_count, 1);
  // Longest first; the totals over every sequence.
  std::sort(groups.begin(), groups.end(),
            [](const LengthGroup& a, const LengthGroup& b) { return a.length > b.length; });
  double chunks = 0, chains = 0;
  int64_t longest_chunks = 0;
  for (const LengthGroup& g : groups) {
    if (g.count <= 0) continue;
    chunks += static_cast<double>(ceil_div(g.length, kChunk)) * static_cast<double>(g.count);
    chains += static_cast<double>(g.count) * heads;
    longest_chunks = std::max(longest_chunks, ceil_div(g.length, kChunk));
  }

  // Two kernels: PREP over every chunk-head, then SCAN.
  const double chunk_heads = chunks * heads;
  e.two_kernel_us = (kPrepChunkSmUs * chunk_heads / sms +
                     std::max(kScanChunkUs * static_cast<double>(longest_chunks),
                              kScanChunkSmUs * chunk_heads / sms)) *
                    two_kernel_slowdown(dram_bytes_per_s);

  // One pass: chains longest first, each to the SM that frees first; the value halves the same
  // on the device's cluster slots.
  const auto chain_us = [](double step) {
    return [step](int64_t length) {
      return step * static_cast<double>(ceil_div(length, onepass::kSub)) + kOnePassChainUs;
    };
  };
  e.one_pass_us = list_schedule_us(groups, heads, sms, chains, chain_us(step_us));
  e.value_halves_us = halves_clusters > 0
                          ? list_schedule_us(groups, heads, halves_clusters, chains,
                                             chain_us(halves_step_us))
                          : std::numeric_limits<double>::infinity();
  return e;
}

ForwardEstimate estimate_forward(const std::vector<int64_t>& lengths, int heads, int sm_count,
                                 double step_us, double dram_bytes_per_s, int halves_clusters,
                                 double halves_step_us) {
  std::vector<LengthGroup> groups;
  groups.reserve(lengths.size());
  for (const int64_t len : lengths) groups.push_back({len, 1});
  return estimate_forward_grouped(std::move(groups), heads, sm_count, step_us, dram_bytes_per_s,
                                  halves_clusters, halves_step_us);
}

namespace {
bool contract_inputs(const ForwardParams& p) {
  return p.gate_input == GateInput::chunk_log2 && p.beta_input == BetaInput::probability &&
         p.beta_dtype == DType::f32 && !p.fuse_k_l2norm;
}
}  // namespace

onepass::ChainOperands one_pass_operands(const ForwardParams& p) {
  if (!p.fuse_q_l2norm) return onepass::ChainOperands::f16_scaled;
  return contract_inputs(p) ? onepass::ChainOperands::bf16
                            : onepass::ChainOperands::bf16_vnew_pairs;
}

double one_pass_step_us(const ForwardParams& p) {
  switch (one_pass_operands(p)) {
    case onepass::ChainOperands::bf16: return kOnePassStepUs;
    case onepass::ChainOperands::bf16_vnew_pairs: return kOnePassVnewPairsRawStepUs;
    default: return contract_inputs(p) ? kOnePassF16StepUs : kOnePassF16RawStepUs;
  }
}

bool value_halves_run(const ForwardParams& p) {
  const onepass::ChainOperands operands = one_pass_operands(p);
  return operands == onepass::ChainOperands::bf16 ||
         operands == onepass::ChainOperands::bf16_vnew_pairs;
}

ForwardKernel choose_forward_kernel(const ForwardParams& p, int sm_count,
                                    double dram_bytes_per_s, int halves_clusters) {
  if (!one_pass_reads(p)) return ForwardKernel::two_kernel;
  std::vector<LengthGroup> groups;
  if (p.cu_seqlens != nullptr) {
    groups.reserve(static_cast<size_t>(p.num_seqs));
    for (int s = 0; s < p.num_seqs; ++s) {
      groups.push_back({int64_t{p.cu_seqlens_host[s + 1]} - p.cu_seqlens_host[s], 1});
    }
  } else {
    groups.push_back({p.tokens, p.batch});
  }
  ForwardEstimate e = estimate_forward_grouped(
      std::move(groups), p.heads, sm_count, one_pass_step_us(p), dram_bytes_per_s,
      value_halves_run(p) ? halves_clusters : 0,
      contract_inputs(p) ? kValueHalvesStepUs : kValueHalvesRawStepUs);
  if (!contract_inputs(p)) e.two_kernel_us *= kRawTwoKernelFactor;
  const bool one_pass = e.one_pass_us < kOnePassMargin * e.two_kernel_us;
  const double best = one_pass ? e.one_pass_us : e.two_kernel_us;
  if (e.value_halves_us < kOnePassMargin * best) return ForwardKernel::one_pass_halves;
  return one_pass ? ForwardKernel::one_pass : ForwardKernel::two_kernel;
}

}  // namespace kda::detail
