// What the host knows of the lab's SCANs: how v0's and v1's split a chain, and v2_mma's choice
// between v1's SCAN and v2t's. Host only, no CUDA includes (the GPU test asserts the choice).
#pragma once

#include <cstdint>

#include "kda/kda.h"

namespace kda::lab {

// v0's and v1's SCANs split a (sequence, head) chain's 128 value columns over 4 CTAs of 32.
inline constexpr int kScanSliceColumns = 32;
inline constexpr int kScanSlices = kHeadDim / kScanSliceColumns;

// v2_mma's SCAN, chosen per call from the number of (sequence, head) chains: the transposed-state
// SCAN (scan_t.cu, one CTA per chain, one CTA per SM) once the chains fill 60 % of the SMs; below
// that, v1's four value-slice CTAs per chain keep more SMs busy on the serial chunk chain. The
// crossing is measured on the H200 (docs/perf-notes.md, "v2t"): 64 chains of 128 chunks, v1
// 0.34 ms against 0.40; 96 chains, v1 0.51 ms against 0.40.
inline bool transposed_scan_pays(int64_t chains, int multiprocessors) {
  return chains * 5 >= int64_t{multiprocessors} * 3;
}

}  // namespace kda::lab
