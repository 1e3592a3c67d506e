#include "ops/silu_mul/silu_mul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/math/exp_approx.h"
#include "ops/random_weights.h"

namespace nanoserve {
namespace {

using testing::f32_tensor;
using testing::nan_tensor;
using testing::random_floats;

TEST(SiluMul, FastMatchesReference) {
  ThreadPool pool(2);
  for (int64_t n : {1, 33, 1536 * 30}) {
    const Tensor g = f32_tensor(random_floats(n, 1, 4.0f), {n});
    const Tensor u = f32_tensor(random_floats(n, 2), {n});
    Tensor r = nan_tensor({n}), f = nan_tensor({n});
    silu_mul_ref(g, u, r);
    silu_mul(g, u, f, pool);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(f.data_as<float>()[i], r.data_as<float>()[i], 1e-6f * (1 + std::fabs(r.data_as<float>()[i])));
    }
  }
}

// Each element's bits do not depend on where the SIMD lanes and the plain
// tail split the range: a whole row against every element alone (n = 1 runs
// the plain form), over ordinary values and the extremes.
TEST(SiluMul, SameBitsWhateverTheSplit) {
  ThreadPool pool(2);
  std::vector<float> gv = random_floats(1001, 3, 12.0f);
  const float inf = std::numeric_limits<float>::infinity();
  for (float e : {0.0f, -0.0f, 88.0f, 88.4f, 89.0f, 100.0f, -87.0f, -88.4f, -89.0f, -100.0f, inf, -inf,
                  1e-30f, -1e-30f}) {
    gv.push_back(e);
  }
  const int64_t n = static_cast<int64_t>(gv.size());
  const Tensor g = f32_tensor(gv, {n});
  const Tensor u = f32_tensor(random_floats(n, 4), {n});
  Tensor all = nan_tensor({n});
  silu_mul(g, u, all, pool);
  for (int64_t i = 0; i < n; ++i) {
    const Tensor g1 = f32_tensor({gv[static_cast<size_t>(i)]}, {1});
    const Tensor u1 = f32_tensor({u.data_as<float>()[i]}, {1});
    Tensor o1 = nan_tensor({1});
    silu_mul(g1, u1, o1, pool);
    EXPECT_EQ(std::memcmp(o1.data(), all.data_as<float>() + i, 4), 0)
        << "g = " << gv[static_cast<size_t>(i)] << ": " << o1.data_as<float>()[0] << " vs " << all.data_as<float>()[i];
  }
}

// exp_approx against exp in double: within 2 ulps over the normal range,
// 0 below it, +inf above, NaN for NaN.
TEST(ExpApprox, WithinTwoUlps) {
  for (float x = -87.0f; x < 88.3f; x += 0.0137f) {
    const double want = std::exp(static_cast<double>(x));
    const float got = exp_approx(x);
    const float wf = static_cast<float>(want);
    const double ulp = std::nextafter(wf, std::numeric_limits<float>::infinity()) - wf;
    ASSERT_LE(std::fabs(got - want), 2 * ulp) << "x = " << x;
  }
  EXPECT_EQ(exp_approx(0.0f), 1.0f);
  EXPECT_EQ(exp_approx(-90.0f), 0.0f);
  EXPECT_EQ(exp_approx(89.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(exp_approx(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(exp_approx(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isnan(exp_approx(std::nanf(""))));
}

TEST(SiluMul, KnownValues) {
  const Tensor g = f32_tensor({0.0f, 1.0f, -1.0f}, {3});
  const Tensor u = f32_tensor({5.0f, 2.0f, 1.0f}, {3});
  Tensor o = nan_tensor({3});
  silu_mul_ref(g, u, o);
  EXPECT_FLOAT_EQ(o.data_as<float>()[0], 0.0f);
  EXPECT_NEAR(o.data_as<float>()[1], 2.0 / (1 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(o.data_as<float>()[2], -1.0 / (1 + std::exp(1.0)), 1e-6);
}

}  // namespace
}  // namespace nanoserve
