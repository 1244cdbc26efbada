#include "kda/harness/random.h"

#include <cmath>
#include <limits>

namespace kda::harness {

namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;  // 2^64 / golden ratio (splitmix64 increment)

// ln 2 split so that k * kLn2Hi is exact for |k| < 2^11 (the fdlibm constants).
constexpr double kLn2Hi = 6.93147180369123816490e-01;
constexpr double kLn2Lo = 1.90821492927058770002e-10;
constexpr double kInvLn2 = 1.44269504088896338700e+00;
constexpr double kHalfPi = 1.57079632679489661923;
constexpr double kSqrtHalf = 0.70710678118654752440;

// sin(x) and cos(x) for |x| <= pi/4 by their Taylor series (the terms left out are < 1e-17).
double sin_small(double x) {
  const double x2 = x * x;
  double p = 1.0 / 355687428096000.0;          // 1/17!
  p = p * x2 - 1.0 / 1307674368000.0;          // 1/15!
  p = p * x2 + 1.0 / 6227020800.0;             // 1/13!
  p = p * x2 - 1.0 / 39916800.0;               // 1/11!
  p = p * x2 + 1.0 / 362880.0;                 // 1/9!
  p = p * x2 - 1.0 / 5040.0;                   // 1/7!
  p = p * x2 + 1.0 / 120.0;                    // 1/5!
  p = p * x2 - 1.0 / 6.0;                      // 1/3!
  return x + x * x2 * p;
}

double cos_small(double x) {
  const double x2 = x * x;
  double p = 1.0 / 20922789888000.0;           // 1/16!
  p = p * x2 - 1.0 / 87178291200.0;            // 1/14!
  p = p * x2 + 1.0 / 479001600.0;              // 1/12!
  p = p * x2 - 1.0 / 3628800.0;                // 1/10!
  p = p * x2 + 1.0 / 40320.0;                  // 1/8!
  p = p * x2 - 1.0 / 720.0;                    // 1/6!
  p = p * x2 + 1.0 / 24.0;                     // 1/4!
  p = p * x2 - 0.5;                            // 1/2!
  return 1.0 + x2 * p;
}

// cos and sin of 2 pi u for u in [0, 1). u * 4 and the subtraction are exact, so the quadrant
// reduction adds no error: 2 pi u = pi/2 * (quadrant + f), f in [0, 1), folded to [0, pi/4].
void cos_sin_2pi(double u, double& cos_out, double& sin_out) {
  const double r = u * 4.0;
  const double quadrant = std::floor(r);
  const double f = r - quadrant;
  double c = 0.0, s = 0.0;  // cos and sin of pi/2 * f
  if (f <= 0.5) {
    c = cos_small(f * kHalfPi);
    s = sin_small(f * kHalfPi);
  } else {
    const double g = 1.0 - f;  // exact (Sterbenz)
    c = sin_small(g * kHalfPi);
    s = cos_small(g * kHalfPi);
  }
  switch (static_cast<int>(quadrant) & 3) {
    case 0: cos_out = c; sin_out = s; break;
    case 1: cos_out = -s; sin_out = c; break;
    case 2: cos_out = -c; sin_out = -s; break;
    default: cos_out = s; sin_out = -c; break;
  }
}

}  // namespace

uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t random_bits(uint64_t seed, uint64_t stream, uint64_t index) {
  // A per-(seed, stream) key, then element `index` of the splitmix64 sequence started at that key.
  const uint64_t key = mix64(mix64(seed) ^ (stream * 0xD1B54A32D192ED03ull + 0x8CB92BA72F3D8DD7ull));
  return mix64(key + (index + 1) * kGolden);
}

double random_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  // The top 53 bits plus one half: never exactly 0 or 1, so log(u) is always finite.
  const uint64_t top = random_bits(seed, stream, index) >> 11;
  return (static_cast<double>(top) + 0.5) * 0x1p-53;
}

NormalPair random_normal_pair(uint64_t seed, uint64_t stream, uint64_t pair) {
  const double u1 = random_uniform(seed, stream, 2 * pair);
  const double u2 = random_uniform(seed, stream, 2 * pair + 1);
  const double radius = std::sqrt(-2.0 * portable_log(u1));
  double c = 0.0, s = 0.0;
  cos_sin_2pi(u2, c, s);
  return {radius * c, radius * s};
}

double random_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  const NormalPair pair = random_normal_pair(seed, stream, index / 2);
  return (index & 1) != 0 ? pair.second : pair.first;
}

double portable_log(double x) {
  if (std::isnan(x) || x < 0.0) return std::numeric_limits<double>::quiet_NaN();
  if (x == 0.0) return -std::numeric_limits<double>::infinity();
  if (std::isinf(x)) return x;
  // x = m * 2^e with m in [sqrt(1/2), sqrt(2)); frexp and the doubling are exact.
  int e = 0;
  double m = std::frexp(x, &e);
  if (m < kSqrtHalf) {
    m *= 2.0;
    e -= 1;
  }
  // log(m) = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...), s = (m-1)/(m+1), |s| <= 0.1716.
  const double s = (m - 1.0) / (m + 1.0);
  // p = sum_k z^k / (2k + 1) with z = s^2, k = 0..11, in Estrin form (short dependency chains).
  // The coefficients are compile-time constants: multiply, never divide at run time.
  const double z = s * s, z2 = z * z, z4 = z2 * z2, z8 = z4 * z4;
  const double a0 = 1.0 + z * (1.0 / 3.0), a1 = 1.0 / 5.0 + z * (1.0 / 7.0);
  const double a2 = 1.0 / 9.0 + z * (1.0 / 11.0), a3 = 1.0 / 13.0 + z * (1.0 / 15.0);
  const double a4 = 1.0 / 17.0 + z * (1.0 / 19.0), a5 = 1.0 / 21.0 + z * (1.0 / 23.0);
  const double b0 = a0 + a1 * z2, b1 = a2 + a3 * z2, b2 = a4 + a5 * z2;
  const double p = b0 + b1 * z4 + b2 * z8;
  const double log_m = 2.0 * s * p;
  const double de = static_cast<double>(e);
  return de * kLn2Hi + (log_m + de * kLn2Lo);
}

double portable_exp(double x) {
  if (std::isnan(x)) return x;
  if (x > 709.782712893384) return std::numeric_limits<double>::infinity();
  if (x < -745.2) return 0.0;
  // x = k ln2 + r with |r| <= ln2/2; exp(x) = 2^k exp(r); ldexp is exact (or a correct subnormal).
  const double k = std::floor(x * kInvLn2 + 0.5);
  const double r = (x - k * kLn2Hi) - k * kLn2Lo;
  // Taylor series of exp(r) to r^14 (the rest < 1e-17), evaluated in Horner form.
  double q = 1.0;
  for (int n = 14; n >= 1; --n) q = 1.0 + q * r / n;
  return std::ldexp(q, static_cast<int>(k));
}

double portable_cos_2pi(double u) {
  double c = 0.0, s = 0.0;
  cos_sin_2pi(u, c, s);
  return c;
}

double portable_sin_2pi(double u) {
  double c = 0.0, s = 0.0;
  cos_sin_2pi(u, c, s);
  return s;
}

double portable_sigmoid(double x) { return 1.0 / (1.0 + portable_exp(-x)); }

}  // namespace kda::harness
