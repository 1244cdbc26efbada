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

  int64_t num_states() const;
  // Widened view for kda::ref (exact: every bf16 value is a float).
  kda::ref::Problem to_reference() const;
};

// Default run seed; a shape's own `seed:` overrides it.
inline constexpr uint64_t kDefaultSeed = 20261130;

HostInputs make_inputs(const ShapeSpec& shape, uint64_t seed);

}  // namespace kda::harness
