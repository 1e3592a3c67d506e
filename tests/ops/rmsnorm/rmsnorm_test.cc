#include "ops/rmsnorm/rmsnorm.h"

#include <gtest/gtest.h>

#include <cmath>

#include "ops/random_weights.h"

namespace nanoserve {
namespace {

using testing::f32_tensor;
using testing::nan_tensor;
using testing::random_floats;

TEST(RmsNorm, FastMatchesReference) {
  ThreadPool pool(2);
  for (int64_t T : {1, 5, 300}) {
    for (int64_t D : {1, 17, 576}) {
      const Tensor x = f32_tensor(random_floats(T * D, 1, 3.0f), {T, D});
      const Tensor w = f32_tensor(random_floats(D, 2), {D});
      Tensor r = nan_tensor({T, D}), f = nan_tensor({T, D});
      rmsnorm_ref(x, w, 1e-5f, r);
      rmsnorm(x, w, 1e-5f, f, pool);
      for (int64_t i = 0; i < T * D; ++i) {
        ASSERT_NEAR(f.data_as<float>()[i], r.data_as<float>()[i], 2e-6f * (1 + std::fabs(r.data_as<float>()[i])))
            << "T=" << T << " D=" << D << " i=" << i;
      }
    }
  }
}

TEST(RmsNorm, ReferenceForAKnownRow) {
  // x = [3, 4]: mean square 12.5, so y = x / sqrt(12.5) * w.
  const Tensor x = f32_tensor({3, 4}, {1, 2});
  const Tensor w = f32_tensor({1, 2}, {2});
  Tensor y = nan_tensor({1, 2});
  rmsnorm_ref(x, w, 0.0f, y);
  EXPECT_NEAR(y.data_as<float>()[0], 3 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(y.data_as<float>()[1], 8 / std::sqrt(12.5), 1e-6);
}

TEST(RmsNorm, InPlaceMatchesOutOfPlace) {
  ThreadPool pool(3);
  const auto xv = random_floats(7 * 64, 5);
  const Tensor w = f32_tensor(random_floats(64, 6), {64});
  Tensor a = f32_tensor(xv, {7, 64}), b = nan_tensor({7, 64});
  rmsnorm(a, w, 1e-6f, b, pool);
  rmsnorm(a, w, 1e-6f, a, pool);
  for (int64_t i = 0; i < 7 * 64; ++i) ASSERT_EQ(a.data_as<float>()[i], b.data_as<float>()[i]);
}

}  // namespace
}  // namespace nanoserve
