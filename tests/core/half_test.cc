#include "core/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace nanoserve {
namespace {

bool is_nan16(uint16_t h) {
  return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
}

TEST(Half, Fp16ToF32KnownValues) {
  EXPECT_EQ(fp16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(fp16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(fp16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(fp16_to_f32(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(fp16_to_f32(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(fp16_to_f32(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(fp16_to_f32(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::signbit(fp16_to_f32(0x8000)));
  EXPECT_TRUE(std::isnan(fp16_to_f32(0x7e00)));
}

// Every fp16 value survives fp16 -> f32 -> fp16 (NaNs stay NaN).
TEST(Half, Fp16RoundTripIsExactForAll65536) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t back = f32_to_fp16(fp16_to_f32(static_cast<uint16_t>(h)));
    if (is_nan16(static_cast<uint16_t>(h))) {
      EXPECT_TRUE(is_nan16(back)) << h;
    } else {
      ASSERT_EQ(back, h);
    }
  }
}

// Reference narrowing by search: the nearest fp16 in exact (double) arithmetic,
// ties to the even bit pattern, inf from 65520 (max finite + half an ulp) up.
uint16_t nearest_fp16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7c00;
  uint32_t lo = 0, hi = 0x7bff;  // positive finite fp16 bit patterns are ordered by value
  while (lo < hi) {              // first pattern whose value is >= a
    const uint32_t mid = (lo + hi) / 2;
    if (static_cast<double>(fp16_to_f32(static_cast<uint16_t>(mid))) < a) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == 0) return sign;
  const double above = fp16_to_f32(static_cast<uint16_t>(lo)) - a;
  const double below = a - fp16_to_f32(static_cast<uint16_t>(lo - 1));
  if (above < below || (above == below && lo % 2 == 0)) return static_cast<uint16_t>(sign | lo);
  return static_cast<uint16_t>(sign | (lo - 1));
}

// Narrowing rounds to the nearest fp16, ties to even, on random bit patterns and
// on the exact midpoints between fp16 neighbours.
TEST(Half, F32ToFp16RoundsToNearestEven) {
  std::mt19937 rng(1);
  for (int i = 0; i < 300000; ++i) {
    const float f = f32_from_bits(static_cast<uint32_t>(rng()));
    const uint16_t got = f32_to_fp16(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(is_nan16(got));
    } else {
      ASSERT_EQ(got, nearest_fp16(f)) << "f=" << f << " bits=" << std::hex << f32_bits(f);
    }
  }
  // Random values in fp16's range, where the rounding actually happens.
  std::uniform_real_distribution<float> in_range(-70000.0f, 70000.0f);
  for (int i = 0; i < 100000; ++i) {
    const float f = in_range(rng) * std::ldexp(1.0f, -static_cast<int>(rng() % 40));
    ASSERT_EQ(f32_to_fp16(f), nearest_fp16(f)) << f;
  }
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // the midpoint above every finite positive fp16
    const double mid =
        (static_cast<double>(fp16_to_f32(static_cast<uint16_t>(h))) +
         static_cast<double>(h == 0x7bff ? 65536.0f : fp16_to_f32(static_cast<uint16_t>(h + 1)))) /
        2;
    const float f = static_cast<float>(mid);  // exact: fp16 midpoints fit in f32
    const uint16_t want = nearest_fp16(f);
    ASSERT_EQ(want, h % 2 == 0 ? h : h + 1) << "midpoint above " << h;  // the search itself ties to even
    ASSERT_EQ(f32_to_fp16(f), want) << "midpoint above " << h;
    ASSERT_EQ(f32_to_fp16(-f), want | 0x8000u);
  }
  EXPECT_EQ(f32_to_fp16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_fp16(65520.0f), 0x7c00);  // rounds to inf
  EXPECT_EQ(f32_to_fp16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_fp16(-1e-10f), 0x8000);
}

#if defined(__FLT16_MAX__)
// Where the compiler has _Float16, its IEEE conversion agrees too.
TEST(Half, F32ToFp16MatchesCompilerConversion) {
  std::mt19937 rng(2);
  for (int i = 0; i < 1000000; ++i) {
    const float f = f32_from_bits(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) continue;
    const _Float16 ref = static_cast<_Float16>(f);
    uint16_t ref_bits;
    std::memcpy(&ref_bits, &ref, 2);
    ASSERT_EQ(f32_to_fp16(f), ref_bits) << "f=" << f << " bits=" << std::hex << f32_bits(f);
  }
}
#endif

TEST(Half, Bf16RoundsToNearestEven) {
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly between bf16 1.0 (even) and 1 + 2^-7: ties to even.
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3 * 2^-8 is between 1 + 2^-7 (odd) and 1 + 2^-6 (even): rounds up.
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds to inf
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  // A signalling NaN whose payload lives in the low bits must not become inf.
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f32_from_bits(0x7f800001u)))));
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_to_f32(static_cast<uint16_t>(b));
    if (!std::isnan(f)) {
      ASSERT_EQ(f32_to_bf16(f), b);
    }
  }
}

}  // namespace
}  // namespace nanoserve
