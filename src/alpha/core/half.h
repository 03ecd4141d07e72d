// 16-bit floating-point storage types for the host: bf16 (8-bit exponent) and f16 (IEEE binary16).
// Conversions round to nearest even; the CPU backend computes in f32 and uses these only for storage.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "alpha/core/hd.h"

namespace alpha {

ALPHA_HD uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
ALPHA_HD float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float f) : bits(from_float(f)) {}
  explicit operator float() const { return bits_float(uint32_t(bits) << 16); }
  static uint16_t from_float(float f) {
    uint32_t u = float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // quiet NaN, sign kept
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
  }
};

struct f16 {
  uint16_t bits = 0;
  f16() = default;
  explicit f16(float f) : bits(from_float(f)) {}
  explicit operator float() const { return to_float(bits); }
  static uint16_t from_float(float f);
  static float to_float(uint16_t h);
};

inline uint16_t f16::from_float(float f) {
  uint32_t u = float_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {                                  // subnormal or zero in f16
    if (abs < 0x33000000u) return uint16_t(sign);           // below half the smallest subnormal
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    int shift = 126 - int(abs >> 23);  // 14..25: f16 subnormals count units of 2^-24
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return uint16_t(sign | half);
  }
  uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15
  r += 0xfffu + ((r >> 13) & 1u);
  return uint16_t(sign | (r >> 13));
}

inline float f16::to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);
    float v = float(mant) * (1.0f / 16777216.0f);  // mant * 2^-24
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
}

// Stochastic rounding from f32 (mixed precision's compute copy of the f32 master weights, kernels/optim.h):
// x becomes one of its two neighbours in the format, the one farther from zero with probability equal to x's
// distance past the nearer one as a fraction of the gap between them, so that the result's expectation is x.
// The fraction is taken to 32 bits: x rounds away from zero iff random_bits < fraction·2³² (exact for bf16,
// which drops 16 bits, and f16 normals, which drop 13; f16 subnormals drop more, and a fraction below 2⁻³²
// of the gap, from |x| < 2⁻⁵⁶, rounds to zero). Host and device compute the same bits from the same bits.
// - Representable values (±0 and ±inf included) come back unchanged whatever the random bits; the sign is
//   kept, and −x takes the negation of x's result for the same bits. NaN stays NaN (quiet, sign kept, as
//   the round-to-nearest conversions above).
// - Overflow: past the largest finite value M the next one up is inf, so x in (M, M + ulp(M)) becomes inf
//   with probability (x − M) / ulp(M): bf16's M = (2 − 2⁻⁷)·2¹²⁷ with ulp 2¹²⁰ (no f32 lies beyond
//   M + ulp); f16's M = 65504 with ulp 32, and |x| >= 65536 is always inf (round to nearest: |x| >= 65520).

// The bf16 bits of x rounded stochastically.
ALPHA_HD uint16_t bf16_bits_stochastic(float x, uint32_t random_bits) {
  const uint32_t u = float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // quiet NaN, sign kept
  const uint32_t fraction = u << 16;  // the 16 dropped bits: x's distance past u >> 16, in bf16 gaps
  // Sign and magnitude: adding one to the truncated bits steps away from zero, from M to inf.
  return uint16_t((u >> 16) + (random_bits < fraction ? 1u : 0u));
}

// The f16 bits of x rounded stochastically.
ALPHA_HD uint16_t f16_bits_stochastic(float x, uint32_t random_bits) {
  const uint32_t u = float_bits(x);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (abs >= 0x47800000u) return uint16_t(sign | 0x7c00u);  // 2^16 or more, inf included: beyond M + ulp(M)
  uint32_t truncated, fraction;                             // |x| toward zero in f16, and the rest in gaps
  if (abs >= 0x38800000u) {                                 // normal in f16 (from 2^-14)
    const uint32_t r = abs - 0x38000000u;                   // rebias exponent 127 -> 15; 13 bits to drop
    truncated = r >> 13;
    fraction = r << 19;
  } else {  // subnormal in f16: |x| = mantissa · 2^-shift units of 2^-24
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = exponent ? (abs & 0x7fffffu) | 0x800000u : abs;
    const uint32_t shift = 126u - (exponent ? exponent : 1u);  // 14 .. 125
    truncated = shift < 32 ? mantissa >> shift : 0u;
    fraction = shift < 64 ? uint32_t((uint64_t(mantissa) << 32) >> shift) : 0u;  // the low 32 bits: the fraction
  }
  // Adding one steps to the next gap: the largest subnormal to the smallest normal, M to inf.
  return uint16_t(sign | (truncated + (random_bits < fraction ? 1u : 0u)));
}

// x rounded stochastically to C (bf16 or f16; C = float is x itself, exact), from 32 random bits: the helper
// both backends' kernels round a compute copy with.
template <class C>
ALPHA_HD C round_stochastic(float x, uint32_t random_bits) {
  if constexpr (std::is_same_v<C, float>) {
    return x;
  } else {
    static_assert(std::is_same_v<C, bf16> || std::is_same_v<C, f16>, "stochastic rounding to bf16 or f16");
    C out;
    out.bits = std::is_same_v<C, bf16> ? bf16_bits_stochastic(x, random_bits) : f16_bits_stochastic(x, random_bits);
    return out;
  }
}

}  // namespace alpha
