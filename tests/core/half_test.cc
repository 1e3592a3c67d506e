#include "core/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace nanoserve {
namespace {

bool is_nan16(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }

TEST(Half, Fp16ToF32KnownValues) {
  EXPECT_EQ(fp16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(fp16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(fp16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(fp16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(fp16_to_f32(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(fp16_to_f32(0x0400), std::ldexp(1.0f, -14));  // smallest normal
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

// Narrowing matches the compiler's own IEEE conversion (round to nearest even)
// on random bit patterns and on the exact midpoints between fp16 neighbours.
TEST(Half, F32ToFp16MatchesCompilerConversion) {
  std::mt19937 rng(1);
  for (int i = 0; i < 2000000; ++i) {
    const float f = f32_from_bits(static_cast<uint32_t>(rng()));
    const _Float16 ref = static_cast<_Float16>(f);
    uint16_t ref_bits;
    std::memcpy(&ref_bits, &ref, 2);
    const uint16_t got = f32_to_fp16(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(is_nan16(got));
    } else {
      ASSERT_EQ(got, ref_bits) << "f=" << f << " bits=" << std::hex << f32_bits(f);
    }
  }
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // midpoints above every finite positive fp16
    const double mid = (static_cast<double>(fp16_to_f32(static_cast<uint16_t>(h))) +
                        static_cast<double>(h == 0x7bff ? 65536.0f : fp16_to_f32(static_cast<uint16_t>(h + 1)))) /
                       2;
    const float f = static_cast<float>(mid);  // exact: fp16 midpoints fit in f32
    const _Float16 ref = static_cast<_Float16>(f);
    uint16_t ref_bits;
    std::memcpy(&ref_bits, &ref, 2);
    ASSERT_EQ(f32_to_fp16(f), ref_bits) << "midpoint above " << h;
    ASSERT_EQ(f32_to_fp16(-f), ref_bits | 0x8000u);
  }
  EXPECT_EQ(f32_to_fp16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_fp16(65520.0f), 0x7c00);  // rounds to inf
  EXPECT_EQ(f32_to_fp16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_fp16(-1e-10f), 0x8000);
}

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
