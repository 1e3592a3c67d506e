#include "ops/silu_mul/silu_mul.h"

#include <gtest/gtest.h>

#include <cmath>

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
