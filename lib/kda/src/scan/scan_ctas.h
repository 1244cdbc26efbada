// The SCAN's two CTA shapes (scan.cu) and the library's choice between them. Host only, no CUDA
// includes: the GPU test asserts the choice on the device's SM count.
//   whole chains   grid (N, H), 256 threads: one CTA per (sequence, head);
//   value halves   grid (N, H, 2), 128 threads: one CTA per (sequence, head, half of the value
//                  rows), the same arithmetic bit for bit, two SMs per chain.
// Both take one SM each (scan_layout.h kSBytes of shared memory).
#pragma once

#include <cstdint>

namespace kda::detail {

enum class ScanCtas { automatic, whole_chains, value_halves };

// automatic takes value halves when every chain's two CTAs fit in one wave: few chains, whose
// whole-chain SCAN leaves SMs idle (h64-fixed: 64 chains on 132 SMs) while each SM's two
// warpgroups share its tensor cores and shared-memory bandwidth.
inline bool scan_value_halves_pay(int64_t chains, int multiprocessors) {
  return 2 * chains <= int64_t{multiprocessors};
}

}  // namespace kda::detail
