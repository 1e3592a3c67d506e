// argmax_cuda against argmax_ref, exactly: fresh random rows of V = 49152
// (SmolLM2), 128256 (Llama 3), 152064 (Qwen2), 1000 (16-byte path), 1001 and 7
// (one float at a time), and 49152 through misaligned logits (scalar path);
// R = 1, 3, 17, 97, 300. Planted cases: the max repeated at far-apart
// positions and inside one 16-byte vector (the lowest index must win), the
// max at index 0 and at V - 1, NaN at the max's place, NaN scattered, a row of
// NaN (V - 1), a row of -inf (0), NaN with -inf, and +inf. out is poisoned
// (-1) before the call.

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "ops/argmax/argmax.h"
#include "ops/argmax/argmax_cuda.cuh"
#include "ops/cuda_op_check.h"

namespace nanoserve {
namespace {

using namespace nanoserve::testing;

void check_argmax(int64_t R, int64_t V, bool misaligned) {
  const uint64_t seed = fresh_seed();
  const std::string what = "R " + std::to_string(R) + " V " + std::to_string(V) +
                           (misaligned ? " (misaligned)" : "") + ", seed " + std::to_string(seed);
  SCOPED_TRACE(what);
  std::mt19937_64 rng(seed);
  std::vector<float> l = uniform_floats(R * V, seed, 10.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::uniform_int_distribution<int64_t> col(0, V - 1);
  for (int64_t r = 0; r < R; ++r) {
    float* row = l.data() + r * V;
    switch (r % 10) {
      case 0: break;  // plain random
      case 1: {       // ties far apart: the lowest index wins
        for (int i = 0; i < 3; ++i) row[col(rng)] = 20.0f;
        break;
      }
      case 2: {  // ties inside one 16-byte vector and its neighbour
        const int64_t c = std::min<int64_t>(col(rng) / 4 * 4, V - 1);
        for (int64_t j = c; j < std::min(V, c + 6); ++j) row[j] = 20.0f;
        break;
      }
      case 3: row[0] = 20.0f, row[V - 1] = 20.0f; break;
      case 4: row[V - 1] = 20.0f; break;
      case 5: {  // NaN where the max would be, and scattered
        row[col(rng)] = 30.0f;
        row[col(rng)] = nan;
        for (int64_t j = 0; j < V; j += 97) row[j] = nan;
        row[0] = nan;
        break;
      }
      case 6: std::fill(row, row + V, nan); break;
      case 7: std::fill(row, row + V, -inf); break;
      case 8: {
        std::fill(row, row + V, nan);
        row[col(rng)] = -inf;
        break;
      }
      case 9: row[col(rng)] = inf, row[col(rng)] = inf; break;
    }
  }
  std::vector<int32_t> want(static_cast<size_t>(R));
  argmax_ref(Tensor::view(l.data(), DType::kF32, {R, V}, nullptr), want);

  const Tensor buf = cuda::empty(DType::kF32, {R * V + 1});
  const Tensor logits = Tensor::view(buf.data_as<float>() + (misaligned ? 1 : 0), DType::kF32, {R, V},
                                     buf.owner(), Device::kCUDA);
  cuda::copy_to_device(Tensor::view(l.data(), DType::kF32, {R, V}, nullptr), logits);
  const Tensor out = poisoned(DType::kI32, {R});
  argmax_cuda(logits, out.data_as<int32_t>(), nullptr);
  cuda::synchronize();
  const std::vector<int32_t> got = download<int32_t>(out);
  for (int64_t r = 0; r < R; ++r) {
    ASSERT_EQ(got[r], want[r]) << "row " << r << " (case " << r % 10 << ")";
  }
}

TEST(ArgmaxCuda, MatchesReferenceExactly) {
  NS_SKIP_WITHOUT_GPU();
  for (int64_t R : {1, 3, 17, 97, 300}) {
    for (int64_t V : {49152, 1000, 1001, 7}) check_argmax(R, V, false);
    check_argmax(R, 49152, true);
  }
  for (int64_t R : {1, 3, 17}) {
    check_argmax(R, 128256, false);
    check_argmax(R, 152064, false);
  }
}

}  // namespace
}  // namespace nanoserve
