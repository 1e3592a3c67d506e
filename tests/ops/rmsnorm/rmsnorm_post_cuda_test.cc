// post_norm_add_rmsnorm_cuda (Gemma's sandwich norm fused into the residual
// add and the next norm) against rmsnorm_ref (f64 sums over f32 inputs) as
// the CPU forward composes it: x += rmsnorm(delta) * post_w, then out =
// rmsnorm(x) * w. T = 1, 3, 17, 97; dim 2304 (gemma-2-2b), 3840 (gemma-3-12b)
// and 1152 (gemma-3-1b) on the 16-byte path, 7 and 1001 (one element a
// thread) and 2304 through a misaligned x (the scalar path). x after the call
// within f32 rounding of the reference (the delta's scale from rsqrtf, a few
// ulps), out to the bf16 tolerance (cuda_op_check.h); a row bitwise the same
// alone; and the plain add (no post norm, the planted error) far outside.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ops/cuda_op_check.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "ops/rmsnorm/rmsnorm_cuda.cuh"

namespace nanoserve {
namespace {

using namespace nanoserve::testing;

constexpr float kEps = 1e-6f;

struct PostRun {
  std::vector<float> out, x;
};

PostRun run_post(const std::vector<float>& x, const std::vector<uint16_t>& delta,
                 const std::vector<float>& post_w, const std::vector<float>& w, int64_t T, int64_t dim,
                 bool misaligned, bool plain_add = false) {
  const Tensor buf = poisoned(DType::kF32, {T * dim + 1});
  const Tensor xd = Tensor::view(buf.data_as<float>() + (misaligned ? 1 : 0), DType::kF32, {T, dim},
                                 buf.owner(), Device::kCUDA);
  cuda::copy_to_device(Tensor::view(const_cast<float*>(x.data()), DType::kF32, {T, dim}, nullptr), xd);
  const Tensor pd = upload(post_w, DType::kF32, {dim}), wd = upload(w, DType::kF32, {dim});
  const Tensor dd = upload(delta, DType::kBF16, {T, dim});
  const Tensor out = poisoned(DType::kBF16, {T, dim});
  if (plain_add) {
    add_rmsnorm_cuda(xd, dd, wd, kEps, out, nullptr);
  } else {
    post_norm_add_rmsnorm_cuda(xd, dd, pd, wd, kEps, out, nullptr);
  }
  cuda::synchronize();
  return {download_f32(out), download<float>(xd)};
}

void check_post(int64_t T, int64_t dim, bool misaligned) {
  const uint64_t seed = fresh_seed();
  const std::string what = "T " + std::to_string(T) + " dim " + std::to_string(dim) +
                           (misaligned ? " (x misaligned)" : "") + ", seed " + std::to_string(seed);
  SCOPED_TRACE(what);
  std::vector<float> x = uniform_floats(T * dim, seed, 4.0f);
  std::vector<uint16_t> delta = to_bf16(uniform_floats(T * dim, seed + 1, 1.0f));
  for (int64_t t = 0; t < T; ++t) {  // deltas of different scales: the post norm takes them out
    const float gain = std::exp2(static_cast<float>(t % 7) - 3.0f);
    for (int64_t i = 0; i < dim; ++i) {
      const size_t k = static_cast<size_t>(t * dim + i);
      delta[k] = f32_to_bf16(bf16_to_f32(delta[k]) * gain);
    }
  }
  std::vector<float> post_w = uniform_floats(dim, seed + 2, 0.5f), w = uniform_floats(dim, seed + 3, 0.5f);
  for (float& v : post_w) v += 1.0f;
  for (float& v : w) v += 1.0f;
  // The reference: the delta's norm, the add in f32, the next norm.
  const std::vector<float> df = from_bf16(delta);
  Tensor normed = Tensor::empty(DType::kF32, {T, dim});
  rmsnorm_ref(Tensor::view(const_cast<float*>(df.data()), DType::kF32, {T, dim}, nullptr),
              Tensor::view(post_w.data(), DType::kF32, {dim}, nullptr), kEps, normed);
  std::vector<float> x_after(x.size());
  for (size_t i = 0; i < x.size(); ++i) x_after[i] = x[i] + normed.data_as<float>()[i];
  Tensor ref = Tensor::empty(DType::kF32, {T, dim});
  rmsnorm_ref(Tensor::view(x_after.data(), DType::kF32, {T, dim}, nullptr),
              Tensor::view(w.data(), DType::kF32, {dim}, nullptr), kEps, ref);
  const std::vector<float> ref_v(ref.data_as<float>(), ref.data_as<float>() + T * dim);

  const PostRun r = run_post(x, delta, post_w, w, T, dim, misaligned);
  // x: the normed delta's error (rsqrtf's 2 ulps, two product roundings:
  // ~4e-7 relative on terms up to ~2.3) where x cancels it to near 0: 3e-6
  // absolute, 1e-6 relative.
  expect_close(r.x, x_after, kNmseF32, 1e-6, 3e-6, what + ": x");
  expect_close_bf16(r.out, ref_v, 1e-6, what + ": out");

  if (T > 1) {  // the last row alone: bitwise the same as in the batch
    const int64_t last = T - 1;
    const PostRun one = run_post(std::vector<float>(x.begin() + last * dim, x.end()),
                                 std::vector<uint16_t>(delta.begin() + last * dim, delta.end()), post_w, w, 1,
                                 dim, misaligned);
    EXPECT_TRUE(std::memcmp(one.out.data(), r.out.data() + last * dim, dim * 4) == 0 &&
                std::memcmp(one.x.data(), r.x.data() + last * dim, dim * 4) == 0)
        << "row " << last << " differs alone and in a batch of " << T;
  }
}

TEST(RmsNormCuda, PostNormAddMatchesReference) {
  NS_SKIP_WITHOUT_GPU();
  for (int64_t T : {1, 3, 17, 97}) {
    for (int64_t dim : {2304, 3840, 1152, 7, 1001}) check_post(T, dim, false);
    check_post(T, 2304, true);
  }
}

// The planted error: the sublayer's output added without its norm.
TEST(RmsNormCuda, PostNormLeftOutFails) {
  NS_SKIP_WITHOUT_GPU();
  const int64_t T = 17, dim = 2304;
  std::vector<float> x = uniform_floats(T * dim, 5, 4.0f);
  const std::vector<uint16_t> delta = to_bf16(uniform_floats(T * dim, 6, 8.0f));
  const std::vector<float> ones(static_cast<size_t>(dim), 1.0f);
  const PostRun with = run_post(x, delta, ones, ones, T, dim, false);
  const PostRun without = run_post(x, delta, ones, ones, T, dim, false, /*plain_add=*/true);
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < with.x.size(); ++i) {
    err += (without.x[i] - double{with.x[i]}) * (without.x[i] - double{with.x[i]});
    norm += double{with.x[i]} * with.x[i];
  }
  EXPECT_GT(err / norm, 1e-2) << "x with and without the post norm are alike";
}

}  // namespace
}  // namespace nanoserve
