#pragma once
// Scalar IEEE binary16 (fp16), bfloat16 and FP8 E4M3 <-> f32 conversions.
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

// FP8 E4M3 (OCP "fn" variant, as torch.float8_e4m3fn and Hopper's cvt): 1 sign,
// 4 exponent (bias 7), 3 mantissa bits; no inf; 0x7f / 0xff are NaN; largest
// finite 448. Exact: every E4M3 is an f32.
constexpr float kF8E4M3Max = 448.0f;

inline float f8e4m3_to_f32(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xfu, mant = b & 0x7u;
  if ((b & 0x7fu) == 0x7fu) return f32_from_bits(sign | 0x7fc00000u);
  if (exp != 0) return f32_from_bits(sign | ((exp + 120) << 23) | (mant << 20));
  // Subnormal or zero: mant * 2^-9.
  return f32_from_bits(f32_bits(static_cast<float>(mant) * 0x1p-9f) | sign);
}

// Rounds to nearest even, saturating at +-448 (as cvt.rn.satfinite); NaN stays NaN.
inline uint8_t f32_to_f8e4m3(float f) {
  const uint32_t u = f32_bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);
  const float a = f32_from_bits(abs);
  if (a >= kF8E4M3Max) return static_cast<uint8_t>(sign | 0x7eu);
  // Below 2^-6 the spacing is 2^-9 (subnormals): round a * 2^9 to an integer.
  if (a < 0x1p-6f) {
    const float scaled = a * 0x1p9f;  // exact: a power-of-two scale of an f32 in range
    uint32_t q = static_cast<uint32_t>(scaled);
    const float rem = scaled - static_cast<float>(q);
    if (rem > 0.5f || (rem == 0.5f && (q & 1u))) ++q;  // q == 8 is the smallest normal: correct
    return static_cast<uint8_t>(sign | q);
  }
  // Normal: keep 3 of the 23 mantissa bits, RNE; a carry bumps the exponent
  // (448 + half an ulp and above saturated above).
  const uint32_t rebased = abs - (120u << 23);
  uint32_t q = rebased >> 20;
  const uint32_t rem = rebased & 0xfffffu;
  if (rem > 0x80000u || (rem == 0x80000u && (q & 1u))) ++q;
  if (q > 0x7eu) q = 0x7eu;
  return static_cast<uint8_t>(sign | q);
}

}  // namespace nanoserve
