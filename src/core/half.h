#pragma once
// Scalar IEEE binary16 (fp16) and bfloat16 <-> f32 conversions.
//
// Bit manipulation only, so the result never depends on the compiler, the CPU
// or the rounding mode. Narrowing rounds to nearest, ties to even; NaN stays
// NaN (quieted, sign kept); f32 values beyond the target range become inf.
// Inline because every dequantize and matmul inner loop calls them.

#include <cstdint>
#include <cstring>

namespace nanoserve {

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// fp16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Exact: every fp16 is an f32.
inline float fp16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp != 0) return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return f32_from_bits(sign);  // +-0
  // Subnormal: value = mant * 2^-24. Normalise so the leading 1 is bit 10.
  int e = 113;  // f32 biased exponent of 2^-14
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return f32_from_bits(sign | (static_cast<uint32_t>(e) << 23) | ((mant & 0x3ffu) << 13));
}

inline uint16_t f32_to_fp16(float f) {
  const uint32_t u = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) {  // NaN: keep the top payload bits, force quiet
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  }
  // 65520 = largest f32 that rounds below fp16 inf (max finite 65504 + half an ulp).
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (abs < 0x38800000u) {
    // Result is subnormal or zero: value / 2^-24, rounded to nearest even.
    // abs < 2^-25 rounds to 0 (2^-25 exactly is a tie to even 0).
    if (abs < 0x33000000u) return sign;
    const uint32_t exp = abs >> 23;                       // 102..112
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;  // 24 significant bits
    const uint32_t shift = 126 - exp;                     // 14..24
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;  // may carry into the smallest normal: correct
    return static_cast<uint16_t>(sign | q);
  }
  // Normal: rebias exponent (127 -> 15), drop 13 mantissa bits with RNE.
  // A carry out of the mantissa correctly bumps the exponent (possibly to inf,
  // excluded above).
  const uint32_t rebased = abs - (112u << 23);
  uint32_t q = rebased >> 13;
  const uint32_t rem = rebased & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

// bf16: the top 16 bits of an f32.
inline float bf16_to_f32(uint16_t b) {
  return f32_from_bits(static_cast<uint32_t>(b) << 16);
}

inline uint16_t f32_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  // RNE on the low 16 bits; a carry into the exponent rounds up to inf correctly.
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

}  // namespace nanoserve
