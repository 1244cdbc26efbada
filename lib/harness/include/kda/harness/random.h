// Portable, counter-based random numbers for the generated inputs (kda-forward.md §9.3).
//
// Every value is a pure function of (seed, stream, index): no generator state, so tensors can be
// filled in parallel and in any order, and adding a tensor (a new stream id) never shifts the
// values of another. The transcendental functions are written here with IEEE +, -, *, / and sqrt
// only (each exactly rounded), so the same seed gives the same bits on every machine, independent
// of the C library's libm.
#pragma once

#include <cstdint>

namespace kda::harness {

// splitmix64's output function: a bijective 64-bit mixer.
uint64_t mix64(uint64_t x);

// 64 random bits for element `index` of stream `stream` under `seed`.
uint64_t random_bits(uint64_t seed, uint64_t stream, uint64_t index);

// Uniform in the open interval (0, 1), 53 random bits.
double random_uniform(uint64_t seed, uint64_t stream, uint64_t index);

// Standard normals by Box-Muller. Pair p uses the uniforms u1, u2 at indices 2p and 2p + 1 and
// gives (r cos(2 pi u2), r sin(2 pi u2)) with r = sqrt(-2 log u1); normal `index` is element
// index % 2 of pair index / 2. Fill loops take whole pairs (half the work per value).
struct NormalPair {
  double first, second;
};
NormalPair random_normal_pair(uint64_t seed, uint64_t stream, uint64_t pair);
double random_normal(uint64_t seed, uint64_t stream, uint64_t index);

// Calls put(i, random_normal(seed, stream, i)) for every i in [begin, end), one pair at a time.
template <class Put>
void for_each_normal(uint64_t seed, uint64_t stream, uint64_t begin, uint64_t end, Put put) {
  uint64_t i = begin;
  if (i < end && (i & 1) != 0) {  // an odd start takes the second half of its pair alone
    put(i, random_normal(seed, stream, i));
    ++i;
  }
  for (; i + 1 < end; i += 2) {
    const NormalPair pair = random_normal_pair(seed, stream, i / 2);
    put(i, pair.first);
    put(i + 1, pair.second);
  }
  if (i < end) put(i, random_normal(seed, stream, i));
}

// Deterministic replacements for std::log / std::exp / cos(2*pi*u): accurate to a few ulp.
double portable_log(double x);       // x > 0 and finite; other inputs give NaN / -inf
double portable_exp(double x);       // any x; overflow -> inf, underflow -> 0
double portable_cos_2pi(double u);   // cos(2*pi*u) for u in [0, 1)
double portable_sin_2pi(double u);   // sin(2*pi*u) for u in [0, 1)
double portable_sigmoid(double x);   // 1 / (1 + exp(-x))

}  // namespace kda::harness
