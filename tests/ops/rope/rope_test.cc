#include "ops/rope/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "ops/random_weights.h"
#include "ops/rope/rope_freqs.h"

namespace nanoserve {
namespace {

using testing::f32_tensor;
using testing::random_floats;

TEST(Rope, RotatesAdjacentPairs) {
  // One head of 4 dims at position 1: pair (0,1) turns by inv_freq[0], pair (2,3) by inv_freq[1].
  Tensor x = f32_tensor({1, 0, 1, 0}, {1, 1, 4});
  const std::vector<float> inv = {std::numbers::pi_v<float> / 2, std::numbers::pi_v<float>};
  const int32_t pos[] = {1};
  rope_ref(x, pos, inv);
  const float* v = x.data_as<float>();
  EXPECT_NEAR(v[0], 0, 1e-6);
  EXPECT_NEAR(v[1], 1, 1e-6);
  EXPECT_NEAR(v[2], -1, 1e-6);
  EXPECT_NEAR(v[3], 0, 1e-6);
}

TEST(Rope, FastMatchesReference) {
  ThreadPool pool(2);
  const std::vector<float> inv = rope_inv_freqs(64, 100000.0f, RopeScaling{});
  for (int64_t T : {1, 3, 40}) {
    const auto xv = random_floats(T * 9 * 64, 3);
    std::vector<int32_t> pos(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) pos[t] = static_cast<int32_t>(t * 97 % 2048);
    Tensor r = f32_tensor(xv, {T, 9, 64}), f = f32_tensor(xv, {T, 9, 64});
    rope_ref(r, pos, inv);
    rope(f, pos, inv, pool);
    for (int64_t i = 0; i < r.numel(); ++i) {
      ASSERT_NEAR(f.data_as<float>()[i], r.data_as<float>()[i], 2e-5f) << "T=" << T << " i=" << i;
    }
  }
}

TEST(Rope, PositionZeroIsIdentityAndPartialRopeKeepsTail) {
  ThreadPool pool(1);
  const auto xv = random_floats(2 * 8, 4);
  Tensor x = f32_tensor(xv, {2, 1, 8});
  const std::vector<float> inv = {1.0f, 0.5f};  // rope_dim 4 of head_dim 8
  const int32_t pos[] = {0, 5};
  rope(x, pos, inv, pool);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(x.data_as<float>()[i], xv[i]);
  for (int i = 4; i < 8; ++i) EXPECT_EQ(x.data_as<float>()[8 + i], xv[8 + i]);
  EXPECT_NE(x.data_as<float>()[8], xv[8]);
}

TEST(RopeFreqs, PlainThetaPowers) {
  const auto inv = rope_inv_freqs(8, 10000.0f, RopeScaling{});
  ASSERT_EQ(inv.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(inv[i], std::pow(10000.0, -2.0 * i / 8), 1e-6 * std::pow(10000.0, -2.0 * i / 8));
}

TEST(RopeFreqs, Llama3KeepsHighScalesLowBlendsMiddle) {
  RopeScaling s;
  s.type = RopeScaling::Type::kLlama3;
  s.factor = 8;
  s.low_freq_factor = 1;
  s.high_freq_factor = 4;
  s.original_context_length = 8192;
  const auto plain = rope_inv_freqs(128, 500000.0f, RopeScaling{});
  const auto scaled = rope_inv_freqs(128, 500000.0f, s);
  int kept = 0, divided = 0, blended = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    const double wavelen = 2 * std::numbers::pi / plain[i];
    if (wavelen < 8192.0 / 4) {
      EXPECT_EQ(scaled[i], plain[i]);
      ++kept;
    } else if (wavelen > 8192.0) {
      EXPECT_NEAR(scaled[i], plain[i] / 8, 1e-6 * plain[i]);
      ++divided;
    } else {
      EXPECT_LT(scaled[i], plain[i]);
      EXPECT_GT(scaled[i], plain[i] / 8);
      ++blended;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
}

TEST(RopeFreqs, FreqFactorsDivide) {
  const std::vector<float> factors = {1, 2, 4, 8};
  const auto plain = rope_inv_freqs(8, 10000.0f, RopeScaling{});
  const auto f = rope_inv_freqs(8, 10000.0f, RopeScaling{}, factors);
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(f[i], plain[i] / factors[i]);
}

}  // namespace
}  // namespace nanoserve
