// argmax_ref's rule (argmax.h) by hand, and its agreement with the sampler's
// greedy choice wherever the sampler's answer does not depend on where a NaN
// sits: rows without NaN (ties included) and rows of only NaN.

#include "ops/argmax/argmax.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "engine/sampler.h"

namespace nanoserve {
namespace {

int32_t argmax_of(std::vector<float> row) {
  int32_t out = -2;
  argmax_ref(Tensor::view(row.data(), DType::kF32, {1, static_cast<int64_t>(row.size())}, nullptr),
             {&out, 1});
  return out;
}

TEST(ArgmaxRef, LargestValueLowestIndex) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(argmax_of({1, 3, 3, 2}), 1);
  EXPECT_EQ(argmax_of({5}), 0);
  EXPECT_EQ(argmax_of({2, 2, 2, 2}), 0);
  EXPECT_EQ(argmax_of({-inf, -inf, -inf}), 0);
  EXPECT_EQ(argmax_of({-1, inf, 7, inf}), 1);
  EXPECT_EQ(argmax_of({0.0f, -0.0f, -1}), 0);
  EXPECT_EQ(argmax_of({-0.0f, 0.0f}), 0);  // -0 == +0: a tie
  EXPECT_EQ(argmax_of({1, 2, 3, 4, 5, 6, 7, 8, 9}), 8);
}

TEST(ArgmaxRef, NanNeverWins) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(argmax_of({nan, 1, nan}), 1);
  EXPECT_EQ(argmax_of({nan, -inf}), 1);
  EXPECT_EQ(argmax_of({5, nan, 3}), 0);
  EXPECT_EQ(argmax_of({nan, nan, nan, nan}), 3);  // no number: V - 1
  EXPECT_EQ(argmax_of({nan}), 0);
}

TEST(ArgmaxRef, AgreesWithSamplerGreedy) {
  const int32_t V = 1000;
  Sampler sampler(V);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  Rng rng(1);
  std::mt19937 gen(7);
  std::uniform_int_distribution<int> small(-3, 3);  // few distinct values: many ties
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> row(V);
    for (float& v : row)
      v = trial % 2 ? static_cast<float>(small(gen)) : std::ldexp(static_cast<float>(gen()), -20);
    if (trial % 5 == 0) row[V - 1] = std::numeric_limits<float>::infinity();
    EXPECT_EQ(argmax_of(row), sampler.sample(row, greedy, {}, {}, rng)) << "trial " << trial;
  }
  const std::vector<float> nan_row(V, std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(argmax_of(nan_row), sampler.sample(nan_row, greedy, {}, {}, rng));
}

}  // namespace
}  // namespace nanoserve
