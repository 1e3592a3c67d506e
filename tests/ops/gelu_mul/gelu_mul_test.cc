#include "ops/gelu_mul/gelu_mul.h"

#include <gtest/gtest.h>

#include <cmath>

#include "ops/random_weights.h"

namespace nanoserve {
namespace {

using testing::f32_tensor;
using testing::nan_tensor;
using testing::random_floats;

TEST(GeluTanhMul, FastMatchesReference) {
  ThreadPool pool(2);
  for (int64_t n : {1, 33, 1536 * 30}) {
    const Tensor g = f32_tensor(random_floats(n, 1, 4.0f), {n});
    const Tensor u = f32_tensor(random_floats(n, 2), {n});
    Tensor r = nan_tensor({n}), f = nan_tensor({n});
    gelu_tanh_mul_ref(g, u, r);
    gelu_tanh_mul(g, u, f, pool);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(f.data_as<float>()[i], r.data_as<float>()[i],
                  2e-6f * (1 + std::fabs(r.data_as<float>()[i])));
    }
  }
}

// PyTorch's gelu(x, approximate="tanh") in f64; the exact (erf) GELU differs
// from it by 1.5e-4 to 4e-4 at these points, far above the tolerance.
TEST(GeluTanhMul, KnownValuesAreTheTanhApproximation) {
  const Tensor g = f32_tensor({1.0f, -1.0f, 2.0f, -3.0f, 0.0f}, {5});
  const Tensor u = f32_tensor({1.0f, 1.0f, 1.0f, 1.0f, 7.0f}, {5});
  const double want[] = {0.8411919906082768, -0.15880800939172324, 1.954597694087775, -0.0036373920817729943,
                         0.0};
  ThreadPool pool(1);
  Tensor r = nan_tensor({5}), f = nan_tensor({5});
  gelu_tanh_mul_ref(g, u, r);
  gelu_tanh_mul(g, u, f, pool);
  for (int i = 0; i < 5; ++i) {
    EXPECT_NEAR(r.data_as<float>()[i], want[i], 1e-7) << i;
    EXPECT_NEAR(f.data_as<float>()[i], want[i], 1e-6) << i;
  }
}

}  // namespace
}  // namespace nanoserve
