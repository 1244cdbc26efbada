// The order in which the SCANs (scan.cu; the lab's scan_v1.cu and scan_t.cu) take the sequences
// of a batch: longest first. CTAs are handed out in linear block order, so a SCAN decodes its
// linear block index into (rank, head, ...) and asks sequence_of_rank which sequence has that
// rank: the longest chains start in the first wave instead of wherever their index puts them, and
// do not run alone at the end (a ragged batch's scan takes as long as its slowest wave).
#pragma once

#include "common.cuh"

namespace kda::detail {

// Batches of more sequences than this keep index order (the rank search below is O(N) per lane).
inline constexpr int kLongestFirstMaxSeqs = 64;

// The sequence of rank `rank` in the order (length descending, index ascending), for at most
// kLongestFirstMaxSeqs sequences; called by one whole warp, every lane gets the answer. Each lane
// holds the lengths of sequences lane and lane + 32 and counts, over all sequences t (lengths
// passed round by shuffles), how many come before its own: the ranks form a permutation, so
// exactly one lane matches.
__device__ __forceinline__ int longest_first(const Sequences& seqs, int rank, int lane) {
  const int n = seqs.num_seqs;
  auto length = [&](int s) { return static_cast<int>(seqs.begin(s + 1) - seqs.begin(s)); };
  const int len0 = lane < n ? length(lane) : -1;
  const int len1 = lane + 32 < n ? length(lane + 32) : -1;
  int before0 = 0, before1 = 0;
  for (int t = 0; t < n; ++t) {  // uniform trip count
    const int len_t = __shfl_sync(0xffffffffu, t < 32 ? len0 : len1, t & 31);
    before0 += (len_t > len0 || (len_t == len0 && t < lane)) ? 1 : 0;
    before1 += (len_t > len1 || (len_t == len1 && t < lane + 32)) ? 1 : 0;
  }
  const int mine = (lane < n && before0 == rank) ? lane
                   : (lane + 32 < n && before1 == rank) ? lane + 32
                                                        : -1;
  const unsigned match = __ballot_sync(0xffffffffu, mine >= 0);
  return __shfl_sync(0xffffffffu, mine, __ffs(match) - 1);
}

// The sequence a CTA of rank `rank` scans: longest first for packed batches of 2 to
// kLongestFirstMaxSeqs sequences (warp 0 searches, one CTA barrier), the rank itself otherwise.
// Every thread of the CTA must call it.
__device__ __forceinline__ int sequence_of_rank(const Sequences& seqs, int rank) {
  if (seqs.cu == nullptr || seqs.num_seqs <= 1 || seqs.num_seqs > kLongestFirstMaxSeqs) {
    return rank;  // uniform
  }
  __shared__ int ranked;
  if (threadIdx.x < 32) {
    const int found = longest_first(seqs, rank, static_cast<int>(threadIdx.x));
    if (threadIdx.x == 0) ranked = found;
  }
  __syncthreads();
  return ranked;
}

}  // namespace kda::detail
