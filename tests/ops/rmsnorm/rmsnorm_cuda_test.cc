// rmsnorm_cuda and add_rmsnorm_cuda against rmsnorm_ref (f64 sums over f32
// inputs), on fresh random rows: T = 1, 3, 17, 97, 300; dim 576, 4096, 8192 and
// 100 (16-byte path: dim % 4 == 0), 7 and 1001 (one element a thread), and 576
// through a misaligned x (scalar path). The bf16 output is held to NMSE 1e-5,
// half a bf16 ulp per element (plus 1e-6 of the row's scale) and no scale bias
// (cuda_op_check.h); the fused add must update x to exactly x + f32(delta)
// (one f32 add, as the host does it). A row's output must be bitwise the same
// whatever T is. Outputs are NaN-filled before each call.

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "ops/cuda_op_check.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "ops/rmsnorm/rmsnorm_cuda.cuh"

namespace nanoserve {
namespace {

using namespace nanoserve::testing;

constexpr float kEps = 1e-5f;

struct NormRun {
  std::vector<float> out;  // [T, dim], bf16 values
  std::vector<float> x;    // x after the call
};

// x, delta (bf16 bits; empty: plain rmsnorm), w on the device; x optionally
// 4 bytes off 16-byte alignment.
NormRun run_norm(const std::vector<float>& x, const std::vector<uint16_t>& delta, const std::vector<float>& w,
                 int64_t T, int64_t dim, bool misaligned) {
  const Tensor buf = poisoned(DType::kF32, {T * dim + 1});
  const Tensor xd = Tensor::view(buf.data_as<float>() + (misaligned ? 1 : 0), DType::kF32, {T, dim},
                                 buf.owner(), Device::kCUDA);
  cuda::copy_to_device(Tensor::view(const_cast<float*>(x.data()), DType::kF32, {T, dim}, nullptr), xd);
  const Tensor wd = upload(w, DType::kF32, {dim});
  const Tensor out = poisoned(DType::kBF16, {T, dim});
  if (delta.empty()) {
    rmsnorm_cuda(xd, wd, kEps, out, nullptr);
    cuda::synchronize();
  } else {
    const Tensor dd = upload(delta, DType::kBF16, {T, dim});
    add_rmsnorm_cuda(xd, dd, wd, kEps, out, nullptr);
    cuda::synchronize();
  }
  return {download_f32(out), download<float>(xd)};
}

void check_norm(int64_t T, int64_t dim, bool add, bool misaligned) {
  const uint64_t seed = fresh_seed();
  const std::string what = std::string(add ? "add_rmsnorm" : "rmsnorm") + " T " + std::to_string(T) +
                           " dim " + std::to_string(dim) + (misaligned ? " (x misaligned)" : "") + ", seed " +
                           std::to_string(seed);
  SCOPED_TRACE(what);
  // Rows of different scales (the residual stream grows over the layers).
  std::vector<float> x = uniform_floats(T * dim, seed, 1.0f);
  for (int64_t t = 0; t < T; ++t) {
    const float gain = std::exp2(static_cast<float>(t % 11) - 5.0f);
    for (int64_t i = 0; i < dim; ++i) x[static_cast<size_t>(t * dim + i)] *= gain;
  }
  std::vector<float> w = uniform_floats(dim, seed + 1, 0.5f);
  for (float& v : w) v += 1.0f;
  std::vector<uint16_t> delta;
  std::vector<float> x_after = x;
  if (add) {
    delta = to_bf16(uniform_floats(T * dim, seed + 2, 0.5f));
    for (size_t i = 0; i < x_after.size(); ++i) x_after[i] = x[i] + bf16_to_f32(delta[i]);
  }
  Tensor ref = Tensor::empty(DType::kF32, {T, dim});
  rmsnorm_ref(Tensor::view(x_after.data(), DType::kF32, {T, dim}, nullptr),
              Tensor::view(w.data(), DType::kF32, {dim}, nullptr), kEps, ref);
  const std::vector<float> ref_v(ref.data_as<float>(), ref.data_as<float>() + T * dim);

  const NormRun r = run_norm(x, delta, w, T, dim, misaligned);
  // Rows differ in scale; the output is normalised, so its scale is w's: ~1.
  expect_close_bf16(r.out, ref_v, 1e-6, what);
  if (add) {
    for (size_t i = 0; i < x_after.size(); ++i) {
      ASSERT_EQ(std::memcmp(&r.x[i], &x_after[i], 4), 0)
          << "x[" << i / dim << ", " << i % dim << "] = " << r.x[i] << " after the add, expected "
          << x_after[i];
    }
  } else {
    EXPECT_TRUE(std::memcmp(r.x.data(), x.data(), x.size() * 4) == 0) << "rmsnorm_cuda changed x";
  }

  // The last row alone: bitwise the same as in the batch.
  if (T > 1) {
    const int64_t last = T - 1;
    const std::vector<float> x1(x.begin() + last * dim, x.end());
    const std::vector<uint16_t> d1 =
        add ? std::vector<uint16_t>(delta.begin() + last * dim, delta.end()) : std::vector<uint16_t>{};
    const NormRun one = run_norm(x1, d1, w, 1, dim, misaligned);
    EXPECT_TRUE(std::memcmp(one.out.data(), r.out.data() + last * dim, dim * 4) == 0)
        << "row " << last << " differs alone and in a batch of " << T;
  }
}

TEST(RmsNormCuda, MatchesReference) {
  NS_SKIP_WITHOUT_GPU();
  for (int64_t T : {1, 3, 17, 97, 300}) {
    for (int64_t dim : {576, 4096, 100, 7, 1001}) check_norm(T, dim, false, false);
    check_norm(T, 576, false, true);
  }
  check_norm(17, 8192, false, false);
}

TEST(RmsNormCuda, FusedAddMatchesReference) {
  NS_SKIP_WITHOUT_GPU();
  for (int64_t T : {1, 3, 17, 97, 300}) {
    for (int64_t dim : {576, 4096, 100, 7, 1001}) check_norm(T, dim, true, false);
    check_norm(T, 576, true, true);
  }
  check_norm(17, 8192, true, false);
}

}  // namespace
}  // namespace nanoserve
