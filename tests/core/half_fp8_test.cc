// FP8 E4M3 conversions (core/half.h) against ml_dtypes' float8_e4m3fn:
// tests/fixtures/fp8/e4m3.json (made by make_e4m3_fixture.py) holds all 256
// decoded codes and 7,260 f32 values with the byte they round to (every
// code, the ties halfway between neighbours and the floats either side of
// them, random values over the range, both signs). Saturation, which the
// fixture leaves out (ml_dtypes gives NaN above 464), is asserted here.

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/half.h"

namespace nanoserve {
namespace {

nlohmann::json fixture() {
  std::ifstream in(NS_SOURCE_DIR "/tests/fixtures/fp8/e4m3.json");
  EXPECT_TRUE(in.good()) << "tests/fixtures/fp8/e4m3.json";
  return nlohmann::json::parse(in);
}

TEST(HalfFp8, DecodesEveryCodeAsTheOracle) {
  const nlohmann::json f = fixture();
  ASSERT_EQ(f["decode"].size(), 256u);
  for (int b = 0; b < 256; ++b) {
    const float got = f8e4m3_to_f32(static_cast<uint8_t>(b));
    const nlohmann::json& want = f["decode"][static_cast<size_t>(b)];
    if (want.is_null()) {
      EXPECT_TRUE(std::isnan(got)) << "code " << b;
    } else {
      EXPECT_EQ(got, want.get<float>()) << "code " << b;
      EXPECT_EQ(std::signbit(got), b >= 128) << "code " << b;
    }
  }
}

TEST(HalfFp8, RoundsToNearestEvenAsTheOracle) {
  const nlohmann::json f = fixture();
  ASSERT_GT(f["encode"].size(), 7000u);
  int wrong = 0;
  for (const nlohmann::json& e : f["encode"]) {
    const uint32_t bits = e[0].get<uint32_t>();
    const int want = e[1].get<int>();
    const int got = f32_to_f8e4m3(f32_from_bits(bits));
    if (got != want && ++wrong <= 10) {
      ADD_FAILURE() << f32_from_bits(bits) << " (0x" << std::hex << bits << "): got 0x" << got << ", want 0x"
                    << want;
    }
  }
  EXPECT_EQ(wrong, 0);
}

TEST(HalfFp8, SaturatesAndKeepsNaN) {
  EXPECT_EQ(f32_to_f8e4m3(448.0f), 0x7e);
  EXPECT_EQ(f32_to_f8e4m3(464.0f), 0x7e);  // the tie above 448 rounds to even 448
  EXPECT_EQ(f32_to_f8e4m3(500.0f), 0x7e);
  EXPECT_EQ(f32_to_f8e4m3(1e30f), 0x7e);
  EXPECT_EQ(f32_to_f8e4m3(-1e30f), 0xfe);
  EXPECT_EQ(f32_to_f8e4m3(INFINITY), 0x7e);
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(f32_to_f8e4m3(NAN))));
  // Every finite code survives decode then encode.
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;
    EXPECT_EQ(f32_to_f8e4m3(f8e4m3_to_f32(static_cast<uint8_t>(b))), b) << "code " << b;
  }
}

}  // namespace
}  // namespace nanoserve
