#include "ops/embedding/embedding.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/random_weights.h"

namespace nanoserve {
namespace {

using testing::encode;
using testing::nan_tensor;
using testing::random_floats;

TEST(Embedding, FastMatchesReferenceEveryDtype) {
  ThreadPool pool(2);
  const int64_t V = 50, D = 96;
  const auto tv = random_floats(V * D, 9);
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
    const Tensor table = encode(tv, V, D, dt);
    std::vector<int32_t> tokens;
    for (int i = 0; i < 70; ++i) tokens.push_back((i * 37) % V);
    const int64_t T = static_cast<int64_t>(tokens.size());
    Tensor r = nan_tensor({T, D}), f = nan_tensor({T, D});
    embedding_ref(table, tokens, r);
    embedding(table, tokens, f, pool);
    for (int64_t i = 0; i < T * D; ++i) ASSERT_EQ(f.data_as<float>()[i], r.data_as<float>()[i]) << dtype_name(dt);
    // The stored rows decode close to what was encoded (Q4 is coarse: step max-min / 15).
    const float tol = dt == DType::kF32 ? 0.0f : (dt == DType::kQ4_0 || dt == DType::kQ4_1) ? 0.6f : 0.05f;
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t d = 0; d < D; ++d) {
        ASSERT_NEAR(r.data_as<float>()[t * D + d], tv[tokens[t] * D + d], tol) << dtype_name(dt);
      }
    }
  }
}

}  // namespace
}  // namespace nanoserve
