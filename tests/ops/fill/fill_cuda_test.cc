// fill_uniform_cuda against fill_uniform_value on the host (bitwise: the value
// is integer hashing, one exact scaling and one f32 multiply), for f32 and bf16
// tensors of 1, 7 and 1000003 elements, with a sanity check that the values
// look uniform; convert_to_bf16_cuda against core/half.h, bitwise, on every
// f16 value and on f32 values that round, tie, overflow, underflow and are NaN.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/cuda_op_check.h"
#include "ops/fill/fill.h"
#include "ops/fill/fill_cuda.cuh"

namespace nanoserve {
namespace {

using namespace nanoserve::testing;

TEST(FillUniformCuda, MatchesHostValuesBitwise) {
  NS_SKIP_WITHOUT_GPU();
  for (int64_t n : {1, 7, 1000003}) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      const uint64_t seed = fresh_seed();
      const float scale = 0.02f;
      SCOPED_TRACE(std::string(dtype_name(dt)) + " n " + std::to_string(n) + ", seed " +
                   std::to_string(seed));
      const Tensor t = poisoned(dt, {n});
      fill_uniform_cuda(t, seed, scale, nullptr);
      cuda::synchronize();
      const std::vector<float> got = download_f32(t);
      // |v| <= scale, and rounding to nearest is monotonic.
      const float bound = dt == DType::kBF16 ? bf16_to_f32(f32_to_bf16(scale)) : scale;
      double sum = 0.0, sum2 = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        float want = fill_uniform_value(seed, static_cast<uint64_t>(i), scale);
        if (dt == DType::kBF16) want = bf16_to_f32(f32_to_bf16(want));
        ASSERT_EQ(std::memcmp(&got[i], &want, 4), 0) << "element " << i << ": " << got[i] << " vs " << want;
        ASSERT_LE(std::fabs(got[i]), bound) << "element " << i;
        sum += got[i];
        sum2 += static_cast<double>(got[i]) * got[i];
      }
      if (n > 1000) {                             // uniform on [-s, s): mean 0, variance s^2 / 3
        EXPECT_NEAR(sum / n, 0.0, 5e-3 * scale);  // 8.6 standard deviations of the mean
        EXPECT_NEAR(sum2 / n, scale * scale / 3.0, 1e-2 * scale * scale);
      }
    }
  }
}

TEST(FillUniformCuda, SeedsGiveDifferentValues) {
  NS_SKIP_WITHOUT_GPU();
  const Tensor a = cuda::empty(DType::kF32, {64}), b = cuda::empty(DType::kF32, {64});
  fill_uniform_cuda(a, 1, 1.0f, nullptr);
  fill_uniform_cuda(b, 2, 1.0f, nullptr);
  cuda::synchronize();
  const std::vector<float> va = download<float>(a), vb = download<float>(b);
  int same = 0;
  for (size_t i = 0; i < va.size(); ++i) same += va[i] == vb[i];
  EXPECT_LT(same, 2);
}

TEST(ConvertToBf16Cuda, EveryF16ValueMatchesHost) {
  NS_SKIP_WITHOUT_GPU();
  std::vector<uint16_t> f16(65536);
  for (uint32_t i = 0; i < 65536; ++i) f16[i] = static_cast<uint16_t>(i);
  const Tensor src = upload(f16, DType::kF16, {256, 256});
  const Tensor dst = poisoned(DType::kBF16, {65536});
  convert_to_bf16_cuda(src, dst, nullptr);
  cuda::synchronize();
  const std::vector<uint16_t> got = download<uint16_t>(dst);
  for (uint32_t i = 0; i < 65536; ++i) {
    const float x = fp16_to_f32(static_cast<uint16_t>(i));
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(bf16_to_f32(got[i]))) << "f16 0x" << std::hex << i;
    } else {
      ASSERT_EQ(got[i], f32_to_bf16(x)) << "f16 0x" << std::hex << i;
    }
  }
}

TEST(ConvertToBf16Cuda, F32RoundsToNearestEven) {
  NS_SKIP_WITHOUT_GPU();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -2.5f,
                          inf,
                          -inf,
                          std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::min(),
                          f32_from_bits(0x3f808000u),   // a tie, rounds down to even
                          f32_from_bits(0x3f818000u),   // a tie, rounds up to even
                          f32_from_bits(0x3f808001u)};  // just above a tie
  const std::vector<float> rnd = uniform_floats(100001, fresh_seed(), 1e4f);
  v.insert(v.end(), rnd.begin(), rnd.end());
  const int64_t n = static_cast<int64_t>(v.size());
  const Tensor src = upload(v, DType::kF32, {n});
  const Tensor dst = poisoned(DType::kBF16, {n});
  convert_to_bf16_cuda(src, dst, nullptr);
  cuda::synchronize();
  const std::vector<uint16_t> got = download<uint16_t>(dst);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], f32_to_bf16(v[i])) << "element " << i << " = " << v[i];

  // bf16 -> bf16 is a copy.
  const Tensor again = poisoned(DType::kBF16, {n});
  convert_to_bf16_cuda(dst, again, nullptr);
  cuda::synchronize();
  EXPECT_TRUE(download<uint16_t>(again) == got);
}

}  // namespace
}  // namespace nanoserve
