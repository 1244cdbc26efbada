// The lab's kernels (the steps of the ladder, lab/README.md) as the registry (registry.cu) calls
// them: one launcher per PREP and SCAN, on the library's arguments (lib/kda/src/prep/prep.h,
// scan/scan.h) and its slot map, each writing or reading one of records.h's records.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "prep/prep.h"  // lib/kda/src
#include "scan/scan.h"  // lib/kda/src
#include "scans.h"

namespace kda::lab {

// v0_fp32 / v1_mma PREP (forward_v0.cu): fp32 on CUDA cores, grid (capacity, H); writes the v0
// record, or the v1 record with `v1_record`. Contract inputs only.
void launch_prep_v0(const detail::PrepArgs& args, bool v1_record, cudaStream_t stream);
// v0_fp32 SCAN (forward_v0.cu): fp32 on CUDA cores, the state slice in shared memory; grid
// (4 N, H).
void launch_scan_v0(const detail::ScanArgs& args, cudaStream_t stream);
// v1_mma SCAN (scan_v1.cu): mma.sync, the fp32 state slice in registers; grid (4 N, H), reads the
// v1 record.
void launch_scan_v1(const detail::ScanArgs& args, cudaStream_t stream);
// v2 PREP (prep_v2.cu): the library's PREP writing the bf16 v1 record; raw inputs too.
void launch_prep_v2(const detail::PrepArgs& args, const detail::RawPrepArgs& raw,
                    cudaStream_t stream);
// v2t SCAN (scan_t.cu): the library's transposed-state recurrence on mma.sync, one CTA per
// (sequence, head); grid (N, H), reads the v1 record.
void launch_scan_t(const detail::ScanArgs& args, cudaStream_t stream);

}  // namespace kda::lab
