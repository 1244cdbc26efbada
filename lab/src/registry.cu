// The registry of forward variants (include/kda/lab/variants.h): each ladder step's PREP and
// SCAN (ladder.h) on the library's host side (lib/kda/src/forward.h: the plan, the arguments, the
// stages, the tail zeroing) and validation (validate.h, with the step's record size, SCAN grid
// and inputs), and the library's own forward as the last entry.
#include "common.cuh"  // lib/kda/src
#include "forward.h"   // lib/kda/src
#include "kda/lab/variants.h"
#include "record.h"    // lib/kda/src
#include "validate.h"  // lib/kda/src

#if KDA_LAB_LADDER
#include "ladder.h"
#include "records.h"
#endif

namespace kda::lab {
namespace {

#if KDA_LAB_LADDER

using detail::ForwardKernels;
using detail::Plan;

// What validation knows of each step: record size, SCAN CTAs per (sequence, head) chain, and
// whether its PREP reads the raw inputs (v0's does not; v2's is the library's, which does).
constexpr ForwardKernels kV0Kernels{
    kRecord0Bytes, kScanSlices,
    "need a v2 variant (v2_mma, v2t_mma, v2w_mma); variant v0_fp32 reads only the contract "
    "inputs: run l2norm / gate_cumsum / the sigmoid first"};
constexpr ForwardKernels kV1Kernels{
    kRecord1Bytes, kScanSlices,
    "need a v2 variant (v2_mma, v2t_mma, v2w_mma); variant v1_mma reads only the contract "
    "inputs: run l2norm / gate_cumsum / the sigmoid first"};
// v2's SCAN is v1's (4 CTAs per chain) below its threshold: its grid limit.
constexpr ForwardKernels kV2Kernels{kRecord1Bytes, kScanSlices, nullptr};
constexpr ForwardKernels kV2tKernels{kRecord1Bytes, 1, nullptr};

void prep_v0(const ForwardParams& p, const Plan& plan, cudaStream_t stream) {
  launch_prep_v0(detail::prep_args(p, plan), /*v1_record=*/false, stream);
}
void prep_v1(const ForwardParams& p, const Plan& plan, cudaStream_t stream) {
  launch_prep_v0(detail::prep_args(p, plan), /*v1_record=*/true, stream);
}
void prep_v2(const ForwardParams& p, const Plan& plan, cudaStream_t stream) {
  launch_prep_v2(detail::prep_args(p, plan), detail::raw_prep_args(p), stream);
}
void scan_v0(const ForwardParams& p, const Plan& plan, cudaStream_t stream) {
  launch_scan_v0(detail::scan_args(p, plan, kRecord0Bytes), stream);
}
void scan_v1(const ForwardParams& p, const Plan& plan, cudaStream_t stream) {
  launch_scan_v1(detail::scan_args(p, plan, kRecord1Bytes), stream);
}
void scan_v2t(const ForwardParams& p, const Plan& plan, cudaStream_t stream) {
  launch_scan_t(detail::scan_args(p, plan, kRecord1Bytes), stream);
}
// v2_mma: the SCAN picked per call (ladder.h transposed_scan_pays).
void scan_v2(const ForwardParams& p, const Plan& plan, cudaStream_t stream) {
  const int64_t chains = int64_t{plan.seqs.num_seqs} * p.heads;
  if (transposed_scan_pays(chains, detail::multiprocessor_count("chunk_forward: scan"))) {
    scan_v2t(p, plan, stream);
  } else {
    scan_v1(p, plan, stream);
  }
}

struct Step {
  const ForwardKernels* kernels;
  detail::ForwardLaunches launches;
};
constexpr Step kV0{&kV0Kernels, {prep_v0, scan_v0}};
constexpr Step kV1{&kV1Kernels, {prep_v1, scan_v1}};
constexpr Step kV2{&kV2Kernels, {prep_v2, scan_v2}};
constexpr Step kV2t{&kV2tKernels, {prep_v2, scan_v2t}};

// kda.h's entry points for one step, as the library's are for its own kernels (forward.cu).
template <const Step& kStep>
size_t workspace_bytes(const ForwardParams& p) {
  return detail::forward_workspace_bytes(p, *kStep.kernels);
}
template <const Step& kStep>
void validate(const ForwardParams& p) {
  detail::validate(p, *kStep.kernels);
}
template <const Step& kStep>
void forward(const ForwardParams& p, cudaStream_t stream) {
  validate<kStep>(p);
  detail::run_forward(p, kStep.launches, stream);
}
template <const Step& kStep>
void forward_stage(const ForwardParams& p, int stage, cudaStream_t stream) {
  detail::check_stage("chunk_forward_stage", stage);
  validate<kStep>(p);
  detail::run_forward_stage(p, kStep.launches, stage, stream);
}

template <const Step& kStep>
constexpr Variant ladder_variant(const char* name, const char* summary, bool raw_inputs,
                                 bool fused_q_norm_exact) {
  return {name,
          summary,
          /*ships=*/false,
          raw_inputs,
          fused_q_norm_exact,
          workspace_bytes<kStep>,
          validate<kStep>,
          forward<kStep>,
          forward_stage<kStep>};
}

#endif  // KDA_LAB_LADDER

void validate_library(const ForwardParams& p) { kda::validate(p); }
// The one pass's staged value halves and helper clusters refuse raw inputs at validation as their
// launch does, so kda-check and kda-bench report the raw path as unsupported by the variant
// instead of stopping at a launch.
void validate_clusters(const ForwardParams& p) {
  kda::validate(p);
  detail::refuse_raw_on_clusters(p, "chunk_forward");
}

// The library's kernels with the SCAN always in whole chains (scan_ctas.h): what the library ran
// for every chain count before it took value halves for few chains.
void scan_whole_chains(const ForwardParams& p, const detail::Plan& plan, cudaStream_t stream) {
  detail::launch_scan(detail::scan_args(p, plan, detail::kRecordBytes), stream,
                      detail::ScanCtas::whole_chains);
}
constexpr detail::ForwardLaunches kWholeChains{detail::library_prep, scan_whole_chains};
// The library's two kernels on every call (what it ran before the one pass), and its one pass on
// every call (kernel_choice.h picks between them per call).
constexpr detail::ForwardLaunches kTwoKernels{detail::library_prep, detail::library_scan};
constexpr detail::ForwardLaunches kOnePass{detail::library_prep, detail::library_scan,
                                           detail::library_one_pass,
                                           detail::KernelChoice::one_pass};
constexpr detail::ForwardLaunches kOnePassBf16{detail::library_prep, detail::library_scan,
                                               detail::one_pass_bf16,
                                               detail::KernelChoice::one_pass};
constexpr detail::ForwardLaunches kOnePassPairs{detail::library_prep, detail::library_scan,
                                                detail::one_pass_operand_pairs,
                                                detail::KernelChoice::one_pass};
constexpr detail::ForwardLaunches kOnePassF16{detail::library_prep, detail::library_scan,
                                              detail::one_pass_f16_scaled,
                                              detail::KernelChoice::one_pass};
constexpr detail::ForwardLaunches kOnePassVnewPairs{detail::library_prep, detail::library_scan,
                                                    detail::one_pass_vnew_pairs,
                                                    detail::KernelChoice::one_pass};
constexpr detail::ForwardLaunches kOnePassHalvesStaged{detail::library_prep, detail::library_scan,
                                                       detail::one_pass_value_halves_staged,
                                                       detail::KernelChoice::one_pass};
constexpr detail::ForwardLaunches kOnePassHalves{detail::library_prep, detail::library_scan,
                                                 detail::one_pass_value_halves,
                                                 detail::KernelChoice::one_pass};
constexpr detail::ForwardLaunches kOnePassL2Helpers{detail::library_prep, detail::library_scan,
                                                    detail::one_pass_l2_helpers,
                                                    detail::KernelChoice::one_pass};
constexpr detail::ForwardLaunches kOnePassL2ChainsAlone{detail::library_prep,
                                                        detail::library_scan,
                                                        detail::one_pass_l2_chains_alone,
                                                        detail::KernelChoice::one_pass};
constexpr detail::ForwardLaunches kOnePassHelpers{detail::library_prep, detail::library_scan,
                                                  detail::one_pass_helpers,
                                                  detail::KernelChoice::one_pass};

// kda.h's entry points for the library's record and validation on other launches.
template <const detail::ForwardLaunches& kLaunches>
void library_record_forward(const ForwardParams& p, cudaStream_t stream) {
  kda::validate(p);
  detail::run_forward(p, kLaunches, stream);
}
template <const detail::ForwardLaunches& kLaunches>
void library_record_forward_stage(const ForwardParams& p, int stage, cudaStream_t stream) {
  detail::check_stage("chunk_forward_stage", stage);
  kda::validate(p);
  detail::run_forward_stage(p, kLaunches, stage, stream);
}

const Variant kVariants[] = {
#if KDA_LAB_LADDER
    ladder_variant<kV0>("v0_fp32",
                        "fp32 records, CUDA-core PREP and SCAN: the correct-first oracle",
                        /*raw_inputs=*/false, /*fused_q_norm_exact=*/true),
    ladder_variant<kV1>("v1_mma",
                        "v0's PREP writing bf16 records; the SCAN on mma.sync, the fp32 state "
                        "slice in registers",
                        false, true),
    ladder_variant<kV2>("v2_mma",
                        "the PREP on tensor cores (grams, W, U; blocked fp32 inverse) and raw "
                        "inputs; v1's record; the SCAN picked per call (v2t's when the chains "
                        "fill the SMs, else v1's)",
                        true, false),
    ladder_variant<kV2t>("v2t_mma",
                         "v2's PREP; the transposed-state SCAN, one CTA per (sequence, head), on "
                         "mma.sync",
                         true, false),
#endif
    {"v2w_whole_chains",
     "the library's kernels, the SCAN one 256-thread CTA per chain at every chain count (the "
     "library splits few chains' value rows over two CTAs)",
     /*ships=*/false, /*raw_inputs=*/true, /*fused_q_norm_exact=*/false,
     kda::forward_workspace_bytes, validate_library, library_record_forward<kWholeChains>,
     library_record_forward_stage<kWholeChains>},
    {"v2w_two_kernel",
     "the library's two kernels on every call: v2t's SCAN on wgmma, fp16 records with "
     "per-column U scales (the library's choice for few long chains and raw inputs)",
     /*ships=*/false, /*raw_inputs=*/true, /*fused_q_norm_exact=*/false,
     kda::forward_workspace_bytes, validate_library, library_record_forward<kTwoKernels>,
     library_record_forward_stage<kTwoKernels>},
    {"one_pass16",
     "the library's one-pass kernel on every call: 16-token sub-chunks built by three builder "
     "warpgroups beside the chain's, the records in shared memory (the library's choice when the "
     "chains fill the SMs); raw inputs activated by the builders; the chain on bf16 operands for "
     "the fused contract path, fp16 under row scales otherwise (one_pass_operands)",
     /*ships=*/false, /*raw_inputs=*/true, /*fused_q_norm_exact=*/false,
     kda::forward_workspace_bytes, validate_library, library_record_forward<kOnePass>,
     library_record_forward_stage<kOnePass>},
    {"one_pass16_bf16",
     "one_pass16 with the chain on bf16 operands on every path: 4.0 - 4.3e-3 on the explicit and "
     "raw paths of smoke, edge and long-memory problems (above the 4e-3 bar), ~0.8x "
     "one_pass16_f16's time",
     /*ships=*/false, /*raw_inputs=*/true, /*fused_q_norm_exact=*/false,
     kda::forward_workspace_bytes, validate_library, library_record_forward<kOnePassBf16>,
     library_record_forward_stage<kOnePassBf16>},
    {"one_pass16_pairs",
     "one_pass16 with the chain's state and V_new as bf16 hi + lo pairs (every state product "
     "twice): 2.7e-3 / 3.2e-3 fused / explicit on long-memory problems in the CPU replay against "
     "3.7e-3 / 4.1e-3",
     /*ships=*/false, /*raw_inputs=*/true, /*fused_q_norm_exact=*/false,
     kda::forward_workspace_bytes, validate_library, library_record_forward<kOnePassPairs>,
     library_record_forward_stage<kOnePassPairs>},
    {"one_pass16_f16",
     "one_pass16 with the chain's state and V_new in fp16 under a power-of-two scale per value "
     "row (the two kernels' SCAN way) and fp16 record tiles on every path, the fused one too: "
     "2.0e-3 / 2.6e-3 fused / explicit on long-memory problems (b0125ab, H100)",
     /*ships=*/false, /*raw_inputs=*/true, /*fused_q_norm_exact=*/false,
     kda::forward_workspace_bytes, validate_library, library_record_forward<kOnePassF16>,
     library_record_forward_stage<kOnePassF16>},
    {"one_pass16_vpairs",
     "one_pass16_bf16 with V_new as a bf16 hi + lo pair (the B phase's two products twice) on "
     "every path: 3.4 / 3.7e-3 worst fused / explicit on the long-memory problems in the CPU "
     "replay against 3.9 / 4.2e-3, for the chain's slack on builder-bound shapes",
     /*ships=*/false, /*raw_inputs=*/true, /*fused_q_norm_exact=*/false,
     kda::forward_workspace_bytes, validate_library, library_record_forward<kOnePassVnewPairs>,
     library_record_forward_stage<kOnePassVnewPairs>},
    {"one_pass16_halves",
     "one_pass16_bf16 as a cluster of two CTAs per chain, each with half the state's value rows, "
     "both building the chain's sub-chunks (six builders a chain, each record copied whole to the "
     "peer CTA by bulk copy): for few chains; the same bits as one_pass16_bf16; raw inputs on "
     "V_new's bf16 pair (the raw gate's running sums handed across the pair), the same bits as "
     "one_pass16_vpairs",
     /*ships=*/false, /*raw_inputs=*/true, /*fused_q_norm_exact=*/false,
     kda::forward_workspace_bytes, validate_library, library_record_forward<kOnePassHalves>,
     library_record_forward_stage<kOnePassHalves>},
    {"one_pass16_halves_staged",
     "one_pass16_halves with each build's QP, KG, AQK and A staged in the builder's scratch and a "
     "ring buffer taken only for W, U, the copy and the chains' steps: three buffers a CTA serve "
     "the six builders (one_pass16_halves holds a buffer for a whole build: five buffers); the "
     "same bits",
     /*ships=*/false, /*raw_inputs=*/false, /*fused_q_norm_exact=*/false,
     kda::forward_workspace_bytes, validate_clusters,
     library_record_forward<kOnePassHalvesStaged>,
     library_record_forward_stage<kOnePassHalvesStaged>},
    {"one_pass16_helpers",
     "one_pass16_bf16 in clusters of three chain CTAs and one helper CTA, whose three builders "
     "build every fourth sub-chunk of each of the three chains (staged, copied whole into the "
     "chain's ring by bulk copy): for few chains (96 on 132 SMs); the same bits as "
     "one_pass16_bf16; contract inputs only",
     /*ships=*/false, /*raw_inputs=*/false, /*fused_q_norm_exact=*/false,
     kda::forward_workspace_bytes, validate_clusters, library_record_forward<kOnePassHelpers>,
     library_record_forward_stage<kOnePassHelpers>},
    {"one_pass16_l2_helpers",
     "one_pass16_bf16's CTA per chain and, on the SMs the chains leave, helper CTAs of four "
     "builders; every builder claims a chain's next sub-chunk from a global counter, a helper's "
     "record reaching the chain through global memory (L2) and a bulk copy: for few chains (96 on "
     "132 SMs), no cluster; the same bits as one_pass16_bf16; raw inputs on V_new's bf16 pair "
     "(the gate's running sums through global memory), the same bits as one_pass16_vpairs",
     /*ships=*/false, /*raw_inputs=*/true, /*fused_q_norm_exact=*/false,
     detail::l2_helpers_workspace_bytes, validate_library,
     library_record_forward<kOnePassL2Helpers>, library_record_forward_stage<kOnePassL2Helpers>},
    {"one_pass16_l2_chains_alone",
     "one_pass16_l2_helpers with no helper CTA (the chains' own builders claim every sub-chunk, "
     "as when no helper becomes resident): its claims' cost against one_pass16_bf16 (raw inputs: "
     "one_pass16_vpairs)",
     /*ships=*/false, /*raw_inputs=*/true, /*fused_q_norm_exact=*/false,
     detail::l2_helpers_workspace_bytes, validate_library,
     library_record_forward<kOnePassL2ChainsAlone>,
     library_record_forward_stage<kOnePassL2ChainsAlone>},
    {"v2w_mma",
     "the library's chunk_forward: per call the one pass (one_pass16) or the two kernels "
     "(v2w_two_kernel), by kernel_choice.h's time model",
     /*ships=*/true, /*raw_inputs=*/true, /*fused_q_norm_exact=*/false,
     kda::forward_workspace_bytes, validate_library, kda::chunk_forward, kda::chunk_forward_stage},
};

}  // namespace

std::span<const Variant> variants() { return kVariants; }

const Variant* find_variant(std::string_view name) {
  for (const Variant& v : kVariants) {
    if (name == v.name) return &v;
  }
  return nullptr;
}

const Variant& shipping_variant() { return kVariants[std::size(kVariants) - 1]; }

std::vector<std::string> variant_names() {
  std::vector<std::string> names;
  for (const Variant& v : kVariants) names.emplace_back(v.name);
  return names;
}

}  // namespace kda::lab
