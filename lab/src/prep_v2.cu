// PREP, variant v2_mma (and v2t_mma): the library's PREP (lib/kda/src/prep/prep_chunk.cuh) writing
// the bf16 v1 record (records.h) that the v1 and v2t SCANs read, instead of the library's fp16
// record. The same kernels and arithmetic otherwise: tensor-core grams and W / U, the blocked fp32
// inverse, the deferred q norm, the raw-input load.
#include "ladder.h"
#include "prep/prep_chunk.cuh"  // lib/kda/src
#include "prep/prep_layout.h"   // lib/kda/src
#include "records.h"

namespace kda::lab {
namespace {

using detail::PrepArgs;
using detail::RawPrepArgs;

// prep_chunk's record writer for the v1 record: bf16 factors, W / q' / kg unsplit, no U bounds.
struct V1Record {
  static constexpr int64_t kBytes = kRecord1Bytes;
  static constexpr bool kF16 = false;
  static constexpr bool kUBounds = false;
  KDA_HD static constexpr int64_t w(int i, int d) { return v1::rec1_w(i, d); }
  KDA_HD static constexpr int64_t qp(int i, int d) { return v1::rec1_qp(i, d); }
  KDA_HD static constexpr int64_t kg(int i, int d) { return v1::rec1_kg(i, d); }
  KDA_HD static constexpr int64_t aqk(int i, int j) { return v1::rec1_aqk(i, j); }
  KDA_HD static constexpr int64_t u(int i, int d) { return v1::rec1_u(i, d); }
  KDA_HD static constexpr int64_t a(int d) { return v1::rec1_a(d); }
};

__global__ void __launch_bounds__(detail::kThreads, 2) prep_v2_kernel(const PrepArgs args) {
  detail::prep::prep_chunk<V1Record, false>(args, RawPrepArgs{});
}

__global__ void __launch_bounds__(detail::kThreads, 2)
    prep_v2_raw_kernel(const PrepArgs args, const RawPrepArgs raw) {
  detail::prep::prep_chunk<V1Record, true>(args, raw);
}

}  // namespace

void launch_prep_v2(const PrepArgs& args, const RawPrepArgs& raw, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(args.capacity), static_cast<unsigned>(args.heads));
  const char* what = "chunk_forward: prep (v2)";
  constexpr int kSBytes = detail::prep::kSBytes;
  if (raw.any()) {
    detail::set_dynamic_smem(reinterpret_cast<const void*>(&prep_v2_raw_kernel), kSBytes, what,
                             /*max_carveout=*/true);
    prep_v2_raw_kernel<<<grid, detail::kThreads, kSBytes, stream>>>(args, raw);
  } else {
    detail::set_dynamic_smem(reinterpret_cast<const void*>(&prep_v2_kernel), kSBytes, what,
                             /*max_carveout=*/true);
    prep_v2_kernel<<<grid, detail::kThreads, kSBytes, stream>>>(args);
  }
  detail::check_launch(what);
}

}  // namespace kda::lab
