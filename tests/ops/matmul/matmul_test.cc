#include "ops/matmul/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "ops/matmul/quant_blocks.h"
#include "ops/random_weights.h"

namespace nanoserve {
namespace {

using testing::encode;
using testing::f32_tensor;
using testing::nan_tensor;
using testing::random_floats;

constexpr DType kAllTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16,
                               DType::kQ8_0, DType::kQ4_0, DType::kQ4_1};

bool quantized(DType t) {
  return t == DType::kQ8_0 || t == DType::kQ4_0 || t == DType::kQ4_1;
}

// One pool per thread count for the whole test binary: starting threads per
// call would dominate the run time.
ThreadPool& pool_of(int threads) {
  static ThreadPool p1(1), p2(2), p3(3);
  return threads == 1 ? p1 : threads == 2 ? p2 : p3;
}

Tensor run_fast(const Tensor& w, const Tensor& x, int threads) {
  ThreadPool& pool = pool_of(threads);
  std::vector<std::byte> scratch(static_cast<size_t>(matmul_scratch_bytes(x.dim(0), x.dim(1))));
  Tensor y = nan_tensor({x.dim(0), w.dim(0)});
  matmul(w, x, y, pool, scratch);
  return y;
}

// The fast path rounds x to 8 bits per block of 32 (d = max|x| / 127), so each
// product w_i x_i moves by at most |w_i| d / 2. The tolerance is that bound,
// plus f32 rounding of the sums, per output element.
TEST(Matmul, FastMatchesReferenceEveryDtype) {
  for (DType dt : kAllTypes) {
    for (int64_t K : {32, 96, 576}) {
      for (int64_t N : {1, 7, 33}) {
        for (int64_t T : {1, 3, 7}) {
          SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " N=" << N << " K=" << K << " T=" << T);
          const auto wv = random_floats(N * K, 1 + static_cast<uint32_t>(N * K), 0.5f);
          const auto xv = random_floats(T * K, 7 + static_cast<uint32_t>(T * K));
          const Tensor w = encode(wv, N, K, dt);
          const Tensor x = f32_tensor(xv, {T, K});
          Tensor ref = nan_tensor({T, N});
          matmul_ref(w, x, ref);
          const Tensor fast = run_fast(w, x, 2);
          std::vector<float> wrow(static_cast<size_t>(K));
          for (int64_t o = 0; o < N; ++o) {
            quant::row_to_f32(dt, static_cast<const uint8_t*>(w.data()) + o * dtype_bytes(dt, K), wrow.data(),
                              K);
            for (int64_t t = 0; t < T; ++t) {
              double qbound = 0, mag = 0;
              for (int64_t b = 0; b < K / 32; ++b) {
                double amax = 0, wsum = 0;
                for (int j = 0; j < 32; ++j) {
                  amax = std::fmax(amax, std::fabs(xv[t * K + b * 32 + j]));
                  wsum += std::fabs(wrow[b * 32 + j]);
                  mag += std::fabs(wrow[b * 32 + j] * xv[t * K + b * 32 + j]);
                }
                qbound += amax / 127.0 / 2.0 * wsum;
              }
              const double tol = (quantized(dt) ? 1.01 * qbound : 0.0) + 2e-6 * mag + 1e-6;
              const float r = ref.data_as<float>()[t * N + o], f = fast.data_as<float>()[t * N + o];
              ASSERT_FALSE(std::isnan(f)) << "unwritten y[" << t << "][" << o << "]";
              ASSERT_NEAR(f, r, tol) << "y[" << t << "][" << o << "]";
            }
          }
        }
      }
    }
  }
}

TEST(Matmul, ReferenceMatchesPlainFloatMath) {
  // F32 weights: the reference is just a dot product.
  const int64_t N = 3, K = 5, T = 2;
  const auto wv = random_floats(N * K, 3), xv = random_floats(T * K, 4);
  Tensor y = nan_tensor({T, N});
  matmul_ref(f32_tensor(wv, {N, K}), f32_tensor(xv, {T, K}), y);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t o = 0; o < N; ++o) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += static_cast<double>(wv[o * K + k]) * xv[t * K + k];
      EXPECT_FLOAT_EQ(y.data_as<float>()[t * N + o], static_cast<float>(s));
    }
  }
}

TEST(Matmul, BitwiseIdenticalAcrossThreadCounts) {
  for (DType dt : kAllTypes) {
    const int64_t N = 101, K = 576, T = 5;
    const Tensor w = encode(random_floats(N * K, 11, 0.3f), N, K, dt);
    const Tensor x = f32_tensor(random_floats(T * K, 12), {T, K});
    const Tensor y1 = run_fast(w, x, 1);
    for (int threads : {2, 3}) {
      const Tensor yn = run_fast(w, x, threads);
      EXPECT_EQ(std::memcmp(y1.data(), yn.data(), static_cast<size_t>(y1.nbytes())), 0)
          << dtype_name(dt) << " with " << threads << " threads";
    }
  }
}

TEST(Matmul, TokenResultIndependentOfBatch) {
  for (DType dt : kAllTypes) {
    const int64_t N = 67, K = 192, T = 7;
    const Tensor w = encode(random_floats(N * K, 21, 0.3f), N, K, dt);
    const auto xv = random_floats(T * K, 22);
    const Tensor y7 = run_fast(w, f32_tensor(xv, {T, K}), 2);
    for (int64_t t = 0; t < T; ++t) {
      const std::vector<float> one(xv.begin() + t * K, xv.begin() + (t + 1) * K);
      const Tensor y1 = run_fast(w, f32_tensor(one, {1, K}), 3);
      EXPECT_EQ(std::memcmp(y1.data(), y7.data_as<float>() + t * N, static_cast<size_t>(N) * 4), 0)
          << dtype_name(dt) << " token " << t;
    }
  }
}

// The quantized kernels tile 4 rows x 4 tokens: a token's result must not
// depend on where the tile edges fall (T = 67 ends with a partial token tile,
// N = 67 with a partial row tile; a 5-token window shifts the token tiles).
// T = 1 has its own kernels (rows read in groups, no decoded tiles): each
// token alone, with 1, 2 or 3 threads (uneven row splits), must equal its row
// of the tiled batch, also at the down projection's K = 1536.
TEST(Matmul, TokenResultIndependentOfLargeBatchAcrossTiles) {
  for (DType dt : {DType::kQ4_1, DType::kQ8_0, DType::kQ4_0}) {
    for (int64_t K : {576, 1536}) {
      const int64_t N = 67, T = K == 576 ? 67 : 9;
      const Tensor w = encode(random_floats(N * K, 31, 0.3f), N, K, dt);
      const auto xv = random_floats(T * K, 32);
      const Tensor yt = run_fast(w, f32_tensor(xv, {T, K}), 2);
      for (int64_t t = 0; t < T; ++t) {
        const std::vector<float> one(xv.begin() + t * K, xv.begin() + (t + 1) * K);
        const Tensor y1 = run_fast(w, f32_tensor(one, {1, K}), 1 + static_cast<int>(t % 3));
        EXPECT_EQ(std::memcmp(y1.data(), yt.data_as<float>() + t * N, static_cast<size_t>(N) * 4), 0)
            << dtype_name(dt) << " K " << K << " token " << t;
      }
      if (K != 576) continue;
      const int64_t first = 5, n = 5;
      const std::vector<float> window(xv.begin() + first * K, xv.begin() + (first + n) * K);
      const Tensor yw = run_fast(w, f32_tensor(window, {n, K}), 3);
      EXPECT_EQ(std::memcmp(yw.data(), yt.data_as<float>() + first * N, static_cast<size_t>(n * N) * 4), 0)
          << dtype_name(dt) << " tokens " << first << ".." << first + n;
    }
  }
}

TEST(Matmul, PairsShareInputAndMatchSeparateCalls) {
  const int64_t K = 64, T = 3;
  const Tensor wa = encode(random_floats(5 * K, 31), 5, K, DType::kQ4_1);
  const Tensor wb = encode(random_floats(9 * K, 32), 9, K, DType::kQ8_0);
  const Tensor x = f32_tensor(random_floats(T * K, 33), {T, K});
  Tensor ya = nan_tensor({T, 5}), yb = nan_tensor({T, 9});
  ThreadPool pool(2);
  std::vector<std::byte> scratch(static_cast<size_t>(matmul_scratch_bytes(T, K)));
  const MatmulPair pairs[] = {{&wa, &ya}, {&wb, &yb}};
  matmul(pairs, x, pool, scratch);
  const Tensor ya1 = run_fast(wa, x, 1), yb1 = run_fast(wb, x, 1);
  EXPECT_EQ(std::memcmp(ya.data(), ya1.data(), static_cast<size_t>(ya.nbytes())), 0);
  EXPECT_EQ(std::memcmp(yb.data(), yb1.data(), static_cast<size_t>(yb.nbytes())), 0);
}

}  // namespace
}  // namespace nanoserve

// The 5-bit types and the K-quants: tests/ops/matmul/matmul_kquant_test.cc.
