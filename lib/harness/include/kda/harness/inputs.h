// Seeded, reproducible inputs (kda-forward.md §9.3): the same seed gives the same bits on every
// machine (counter-based generator, no platform RNG).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kda/harness/shapes.h"
#include "kda/ref/reference.h"

namespace kda::harness {

// bf16 helpers: round-to-nearest-even, and exact widening.
uint16_t float_to_bf16(float x);
float bf16_to_float(uint16_t bits);

// Host copies of one problem's kernel inputs, in the kernels' dtypes.
struct HostInputs {
  int64_t batch = 0, tokens = 0, heads = 0, key_dim = 128, value_dim = 128;
  std::vector<int32_t> cu_seqlens;   // empty: dense
  std::vector<uint16_t> q, k, v;     // bf16 bits; q raw (not normalized); k normalized
  std::vector<float> gate;           // cumulative log2 gate fp32
  std::vector<float> beta;           // fp32
  std::vector<float> initial_state;  // fp32 [N, H, K, V] or empty
  bool want_final_state = false;
  std::string gate_recipe = "contract";  // GateRecipe::label() of the generator, or "loaded"

  // The raw inputs engines pass (Path::raw: chunk_forward with fuse_k_l2norm, GateInput::raw and
  // BetaInput::logits), from the same draws as the tensors above, which keep their bits.
  // raw_k: k's fp32 draw rounded to bf16 (k normalizes the fp32 draw itself, so l2norm(raw_k)
  // equals k only up to bf16 rounding). raw_gate: the bf16 raw gate that gate is computed from,
  // with a_log [H], dt_bias [H, K] (drawn, or read from the recipe's files) and lower_bound.
  // beta_logits: beta's fp32 draw rounded to bf16 (beta is the sigmoid of the fp32 draw); +0 on
  // rows at or after cu[N], where beta is 0 (no kernel reads those rows).
  std::vector<uint16_t> raw_k;        // bf16 bits [B, T, H, K]
  std::vector<uint16_t> raw_gate;     // bf16 bits [B, T, H, K]
  std::vector<uint16_t> beta_logits;  // bf16 bits [B, T, H]
  std::vector<float> a_log;           // fp32 [H]
  std::vector<float> dt_bias;         // fp32 [H, K]
  float lower_bound = -5.0f;          // the recipe's bound rounded to fp32 (the kernels' type)

  int64_t num_states() const;
  // False only for a --load of a dump written before the raw inputs existed: Path::raw cannot
  // run on it.
  bool has_raw_inputs() const { return !a_log.empty(); }
  // Widened view for kda::ref (exact: every bf16 value is a float).
  kda::ref::Problem to_reference() const;
};

// The fp32 lower bound the kernels get for a gate recipe's (fp64) bound: the nearest float, or the
// next one toward 0 where the nearest lies below the contract's minimum (-5.9148559407783, whose
// nearest float is -5.91485595703): so the bound stays inside both the kernels' and the
// reference's contract (kda::ref::gate_cumsum refuses anything below the minimum).
float kernel_lower_bound(double lower_bound);

// Default run seed; a shape's own `seed:` overrides it.
inline constexpr uint64_t kDefaultSeed = 20261130;

HostInputs make_inputs(const ShapeSpec& shape, uint64_t seed);

}  // namespace kda::harness
