// bf16_unpack_check.cu: the library's bf16 pair unpack against CUDA's conversion on the device.
#pragma once

#include <cuda_runtime_api.h>

namespace kda::test {

// Runs the check over all 2^16 patterns in both halves of a word; the number of words whose two
// floats differ in any bit, and the first such word (0xffffffff if none).
cudaError_t bf16_unpack_mismatches(unsigned* mismatches, unsigned* first_bad);

}  // namespace kda::test
