// Bytes each timed path must move through global memory at the least (pure CPU), and the
// byte floor they are judged against (performance.md "Floors").
//
// forward (per token-head, over all B·T·H rows: every output row is written, also rows at or
// after cu_seqlens[N]):
//     q, k   bf16  2 · K · 2 B      (K = 128: 512 B)
//     v      bf16  V · 2 B          (256 B)
//     gate   fp32  K · 4 B          (cumulative log2 gate: 512 B)
//     beta   fp32  4 B
//     out    bf16  V · 2 B          (256 B)
//   = 1540 B per token-head for K = V = 128; plus N·H·K·V·4 B for an initial state read and the
//   same for a final state written.
// l2norm pass: reads q and writes q_hat, both bf16: 2 · rows · K · 2 B with rows = B·T·H.
// raw forward (Path::raw: the norms, the gate producer and the sigmoid in the kernel), per
// token-head:
//     q, k   bf16  2 · K · 2 B      (raw q and raw k: 512 B)
//     v      bf16  V · 2 B          (256 B)
//     gate   bf16  K · 2 B          (the raw gate projection: 256 B)
//     beta   bf16  2 B              (logits)
//     out    bf16  V · 2 B          (256 B)
//   = 1282 B per token-head for K = V = 128; plus A_log and dt_bias, H · (1 + K) · 4 B, and the
//   states as for the forward.
// Paths: fused = forward; explicit = forward + l2norm pass; l2norm = l2norm pass; raw = raw
// forward. No path counts cu_seqlens ((N + 1) · 4 B).
// Floor: the forward's bytes for fused and explicit (both compute the same operation, so the
// explicit path's extra pass counts against it), the l2norm pass's bytes for l2norm, the raw
// forward's own bytes for raw (it computes more: its floor is what it must read and write).
#pragma once

#include <cstdint>

#include "kda/harness/problem.h"

namespace kda::bench {

// The harness's problem size and path types (one of each for every tool): num_states (N) and
// the state flags of the size give the state terms.
using kda::harness::Path;
using kda::harness::ProblemSize;

int64_t forward_bytes_per_token_head(const ProblemSize& size);  // 1540 for K = V = 128
int64_t forward_bytes(const ProblemSize& size);
int64_t raw_forward_bytes_per_token_head(const ProblemSize& size);  // 1282 for K = V = 128
int64_t raw_forward_bytes(const ProblemSize& size);
int64_t l2norm_bytes(const ProblemSize& size);
int64_t path_bytes(const ProblemSize& size, Path path);   // what the path moves at least
int64_t floor_bytes(const ProblemSize& size, Path path);  // what it is judged against

}  // namespace kda::bench
