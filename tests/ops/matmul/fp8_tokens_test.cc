// e4m3_tokens_round_trip (ops/matmul/fp8_tokens.h), the CPU's copy of the
// CUDA FP8 linears' token rounding, against a brute-force statement of the
// same rule: each element bf16-rounded, divided by max |row| / 448, and
// replaced by the nearest of the 253 finite E4M3 values (ties to the even
// code), times the scale.

#include "ops/matmul/fp8_tokens.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/half.h"

namespace nanoserve {
namespace {

// The nearest finite E4M3 value to v, by a search over every code; a tie
// goes to the even code (the lower mantissa bit clear), past 448 to 448.
float nearest_e4m3(float v) {
  float best = 0.0f;
  double best_d = std::numeric_limits<double>::infinity();
  int best_code = 0;
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;  // NaN
    const float e = f8e4m3_to_f32(static_cast<uint8_t>(c));
    if (std::signbit(e) != std::signbit(v) && e != 0.0f) continue;
    const double d = std::fabs(static_cast<double>(e) - v);
    if (d < best_d || (d == best_d && (c & 1) == 0 && (best_code & 1) == 1)) {
      best = e, best_d = d, best_code = c;
    }
  }
  return std::signbit(v) && best == 0.0f ? -0.0f : best;
}

TEST(Fp8Tokens, EachRowIsItsNearestE4M3ValuesTimesItsScale) {
  const int64_t rows = 6, cols = 200;
  std::mt19937 rng(5);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {  // rows of different magnitudes, some tiny values among them
    std::normal_distribution<float> d(0.0f, std::ldexp(1.0f, static_cast<int>(3 * r) - 8));
    for (int64_t i = 0; i < cols; ++i)
      x[static_cast<size_t>(r * cols + i)] = d(rng) * (i % 7 == 0 ? 1e-3f : 1.0f);
  }
  std::vector<float> y = x;
  e4m3_tokens_round_trip(y.data(), rows, cols);
  for (int64_t r = 0; r < rows; ++r) {
    float amax = 0.0f;
    for (int64_t i = 0; i < cols; ++i)
      amax = std::max(amax, std::fabs(bf16_to_f32(f32_to_bf16(x[r * cols + i]))));
    const float scale = amax / 448.0f;
    int wrong = 0;
    for (int64_t i = 0; i < cols; ++i) {
      const float v = bf16_to_f32(f32_to_bf16(x[static_cast<size_t>(r * cols + i)])) / scale;
      wrong += y[static_cast<size_t>(r * cols + i)] != nearest_e4m3(v) * scale;
    }
    EXPECT_EQ(wrong, 0) << "row " << r;
  }
}

TEST(Fp8Tokens, AZeroRowStaysZeroAndNaNStaysNaN) {
  std::vector<float> x = {0.0f, -0.0f, 0.0f, 0.0f, 1.0f, std::nanf(""), 2.0f, -3.0f};
  e4m3_tokens_round_trip(x.data(), 2, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(x[static_cast<size_t>(i)], 0.0f);
  EXPECT_TRUE(std::isnan(x[5]));
}

}  // namespace
}  // namespace nanoserve
