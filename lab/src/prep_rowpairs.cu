// PREP, variant v2w_rowpair_grams: the library's channel-halves PREP (lib/kda/src/prep/
// halves_chunk.cuh) with the grams' tasks in row-block pairs (prep_layout.h GramMap::row_pairs):
// each warp builds its row block's factor 2^(G_i - G_{m_p}) x_i once per k-step and its
// off-diagonal task scales it per channel, instead of every task building its own from the
// exponentials (docs/perf-notes.md "Issues 15 and 16 after this session", item 1). Same record,
// same layout, same launch as the library's (three CTAs per SM); the library's SCAN reads it.
#include "ladder.h"
#include "prep/halves_chunk.cuh"  // lib/kda/src
#include "prep/prep_layout.h"     // lib/kda/src

namespace kda::lab {
namespace {

using detail::PrepArgs;
using detail::RawPrepArgs;
using detail::prep::F16Record;
using detail::prep::GramMap;

__global__ void __launch_bounds__(detail::kThreads, 3) prep_rowpairs_kernel(const PrepArgs args) {
  detail::prep::prep_chunk_halves<F16Record, false, GramMap::row_pairs>(args, RawPrepArgs{});
}

__global__ void __launch_bounds__(detail::kThreads, 3)
    prep_rowpairs_raw_kernel(const PrepArgs args, const RawPrepArgs raw) {
  detail::prep::prep_chunk_halves<F16Record, true, GramMap::row_pairs>(args, raw);
}

}  // namespace

void launch_prep_rowpairs(const PrepArgs& args, const RawPrepArgs& raw, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(args.capacity), static_cast<unsigned>(args.heads));
  const char* what = "chunk_forward: prep (rowpair grams)";
  constexpr int kSBytes = detail::prep::halves::kSBytes;
  if (raw.any()) {
    detail::set_dynamic_smem(reinterpret_cast<const void*>(&prep_rowpairs_raw_kernel), kSBytes,
                             what, /*max_carveout=*/true);
    prep_rowpairs_raw_kernel<<<grid, detail::kThreads, kSBytes, stream>>>(args, raw);
  } else {
    detail::set_dynamic_smem(reinterpret_cast<const void*>(&prep_rowpairs_kernel), kSBytes, what,
                             /*max_carveout=*/true);
    prep_rowpairs_kernel<<<grid, detail::kThreads, kSBytes, stream>>>(args);
  }
  detail::check_launch(what);
}

}  // namespace kda::lab
