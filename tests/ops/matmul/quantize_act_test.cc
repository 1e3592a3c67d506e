#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ops/matmul/quant_blocks.h"

namespace nanoserve::quant {
namespace {

void expect_same(const std::vector<float>& x, const char* what) {
  const int64_t K = static_cast<int64_t>(x.size()), nb = K / kBlock;
  std::vector<BlockQ8Act> fast(static_cast<size_t>(nb)), plain(static_cast<size_t>(nb));
  std::memset(fast.data(), 0xa5, fast.size() * sizeof(BlockQ8Act));
  std::memset(plain.data(), 0x5a, plain.size() * sizeof(BlockQ8Act));
  quantize_row_q8(x.data(), K, fast.data());
  quantize_row_q8_scalar(x.data(), K, plain.data());
  for (int64_t b = 0; b < nb; ++b) {
    EXPECT_EQ(std::memcmp(&fast[b], &plain[b], sizeof(BlockQ8Act)), 0) << what << ", block " << b;
  }
}

TEST(QuantizeAct, SimdEqualsScalarOnRandomRows) {
  std::mt19937 rng(5);
  for (float spread : {1e-30f, 1e-3f, 1.0f, 1e4f, 1e30f}) {
    std::normal_distribution<float> dist(0.0f, spread);
    std::vector<float> x(1536);
    for (float& v : x) v = dist(rng);
    expect_same(x, "normal");
  }
}

TEST(QuantizeAct, SimdEqualsScalarOnAwkwardValues) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float denorm = std::numeric_limits<float>::denorm_min();
  // Block 0: exact halves at the rounding boundary (ties go to even), block 1
  // all zeros with a negative zero, block 2 a NaN among values, block 3 an
  // infinity, block 4 denormals only, block 5 all NaN.
  std::vector<float> x(6 * kBlock, 0.0f);
  for (int j = 0; j < kBlock; ++j) x[j] = (static_cast<float>(j) - 16.0f) * 0.5f * (127.0f / 8.0f) / 127.0f;
  x[kBlock] = -0.0f;
  for (int j = 0; j < kBlock; ++j) x[2 * kBlock + j] = static_cast<float>(j) * 0.37f - 5.0f;
  x[2 * kBlock + 7] = nan;
  for (int j = 0; j < kBlock; ++j) x[3 * kBlock + j] = static_cast<float>(j) - 3.0f;
  x[3 * kBlock + 11] = -inf;
  for (int j = 0; j < kBlock; ++j) x[4 * kBlock + j] = denorm * static_cast<float>(j % 5);
  for (int j = 0; j < kBlock; ++j) x[5 * kBlock + j] = nan;
  expect_same(x, "awkward");
}

TEST(QuantizeAct, ScalarMatchesDefinition) {
  // One block by hand: max |x| = 2.54, d = 0.02, q = round(x / d).
  std::vector<float> x(kBlock, 0.0f);
  x[0] = 2.54f;
  x[1] = -1.0f;
  x[2] = 0.03f;  // 1.5 steps: rounds to even, 2
  BlockQ8Act out;
  quantize_row_q8_scalar(x.data(), kBlock, &out);
  EXPECT_FLOAT_EQ(out.d, 2.54f / 127.0f);
  EXPECT_EQ(out.qs[0], 127);
  EXPECT_EQ(out.qs[1], -50);
  EXPECT_EQ(out.qs[3], 0);
  EXPECT_FLOAT_EQ(out.s, out.d * static_cast<float>(127 - 50 + out.qs[2]));
}

}  // namespace
}  // namespace nanoserve::quant
