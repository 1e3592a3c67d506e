// The 5-bit and K-quant weight types through the fast matmul
// (src/ops/matmul/matmul_cpu_kquant.cc, and the Q5 rows of matmul_cpu.cc),
// held to the reference on random stored blocks.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "ops/matmul/matmul.h"
#include "ops/matmul/matmul_cpu_internal.h"
#include "ops/matmul/quant_blocks.h"
#include "ops/random_weights.h"

namespace nanoserve {
namespace {

using testing::f32_tensor;
using testing::f32_to_f16;
using testing::nan_tensor;
using testing::random_floats;

constexpr DType kDirect[] = {DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K,
                             DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

// Byte offsets of the f16 scale fields of one block.
std::vector<int> f16_fields(DType dt) {
  switch (dt) {
    case DType::kQ5_0: return {0};
    case DType::kQ5_1: return {0, 2};
    case DType::kQ2_K: return {80, 82};
    case DType::kQ3_K: return {108};
    case DType::kQ4_K:
    case DType::kQ5_K: return {0, 2};
    case DType::kQ6_K: return {208};
    default: return {};
  }
}

// Random stored blocks: random quant and sub-block scale bytes (every bit
// pattern), finite f16 scales of either sign.
Tensor random_blocks(DType dt, int64_t N, int64_t K, uint32_t seed) {
  Tensor w = Tensor::empty(dt, {N, K});
  std::mt19937 rng(seed);
  auto* p = static_cast<uint8_t*>(w.data());
  for (int64_t i = 0; i < w.nbytes(); ++i) p[i] = static_cast<uint8_t>(rng());
  std::normal_distribution<float> dist(0.0f, dtype_info(dt).block_elems == 32 ? 0.05f : 0.004f);
  const int64_t bb = dtype_info(dt).block_bytes;
  for (int64_t b = 0; b < w.nbytes() / bb; ++b) {
    for (int off : f16_fields(dt)) {
      const uint16_t h = f32_to_f16(dist(rng));
      std::memcpy(p + b * bb + off, &h, 2);
    }
  }
  return w;
}

ThreadPool& pool_of(int threads) {
  static ThreadPool p1(1), p2(2), p3(3);
  return threads == 1 ? p1 : threads == 2 ? p2 : p3;
}

Tensor run_fast(const Tensor& w, const Tensor& x, int threads) {
  std::vector<std::byte> scratch(static_cast<size_t>(matmul_scratch_bytes(x.dim(0), x.dim(1))));
  Tensor y = nan_tensor({x.dim(0), w.dim(0)});
  matmul(w, x, y, pool_of(threads), scratch);
  return y;
}

// x as the fast path sees it: the 32-value types round each block of 32, the
// K-quants each super-block of 256 (quant_blocks.h), to d * q (8-bit).
std::vector<float> act_quantized(const std::vector<float>& x, int64_t T, int64_t K, DType dt) {
  std::vector<float> out(x.size());
  if (dtype_info(dt).block_elems == quant::kSuperBlock) {
    const int64_t nsb = K / quant::kSuperBlock;
    std::vector<quant::BlockQ8KAct> blocks(static_cast<size_t>(nsb));
    for (int64_t t = 0; t < T; ++t) {
      quant::quantize_row_q8k_scalar(x.data() + t * K, K, blocks.data());
      for (int64_t b = 0; b < nsb; ++b) {
        for (int j = 0; j < quant::kSuperBlock; ++j)
          out[static_cast<size_t>(t * K + b * quant::kSuperBlock + j)] =
              blocks[b].d * static_cast<float>(blocks[b].qs[j]);
      }
    }
    return out;
  }
  const int64_t nb = K / 32;
  std::vector<quant::BlockQ8Act> blocks(static_cast<size_t>(nb));
  for (int64_t t = 0; t < T; ++t) {
    quant::quantize_row_q8_scalar(x.data() + t * K, K, blocks.data());
    for (int64_t b = 0; b < nb; ++b) {
      for (int j = 0; j < 32; ++j)
        out[static_cast<size_t>(t * K + b * 32 + j)] = blocks[b].d * static_cast<float>(blocks[b].qs[j]);
    }
  }
  return out;
}

// |got - want| <= f32 rounding of a sum of nb scaled block dots into 8 lanes:
// (nb + 16) roundings of at most 2^-23 of the magnitude sum |w| . |x|.
void expect_close(const Tensor& got, const Tensor& want, const Tensor& w, const std::vector<float>& x,
                  int64_t T, const std::string& what) {
  const int64_t N = w.dim(0), K = w.dim(1);
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t o = 0; o < N; ++o) {
    quant::row_to_f32(w.dtype(), static_cast<const uint8_t*>(w.data()) + o * dtype_bytes(w.dtype(), K),
                      row.data(), K);
    for (int64_t t = 0; t < T; ++t) {
      double mag = 0;
      for (int64_t k = 0; k < K; ++k) mag += std::fabs(static_cast<double>(row[k]) * x[t * K + k]);
      const double tol = static_cast<double>(K / 32 + 16) * 1.2e-7 * mag + 1e-6;
      const float g = got.data_as<float>()[t * N + o], r = want.data_as<float>()[t * N + o];
      ASSERT_FALSE(std::isnan(g)) << what << ": unwritten y[" << t << "][" << o << "]";
      ASSERT_NEAR(g, r, tol) << what << ": y[" << t << "][" << o << "]";
    }
  }
}

// The kernels compute w . (x rounded to 8-bit blocks) exactly but for
// f32 rounding, so the reference gets the same rounded x (per 32 values for
// Q5_0 / Q5_1, per 256 for the K-quants) and the tolerance is rounding only
// (a wrong scale, min or bit moves outputs by far more).
TEST(MatmulKQuant, KernelsMatchReferenceWithQuantizedActivations) {
  for (DType dt : kDirect) {
    for (int64_t K : {256, 768, 1536}) {
      for (int64_t N : {1, 5, 33}) {
        for (int64_t T : {1, 2, 5, 9}) {
          const std::string what = std::string(dtype_name(dt)) + " N=" + std::to_string(N) +
                                   " K=" + std::to_string(K) + " T=" + std::to_string(T);
          const Tensor w = random_blocks(dt, N, K, static_cast<uint32_t>(N * K + T));
          const auto xv = random_floats(T * K, 7 + static_cast<uint32_t>(T * K));
          const auto xq = act_quantized(xv, T, K, dt);
          Tensor ref = nan_tensor({T, N});
          matmul_ref(w, f32_tensor(xq, {T, K}), ref);
          expect_close(run_fast(w, f32_tensor(xv, {T, K}), 2), ref, w, xq, T, what);
        }
      }
    }
  }
}

// The scalar kernel (the path of a build without AVX2) against the same truth.
TEST(MatmulKQuant, ScalarKernelMatchesReference) {
  for (DType dt : {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    const int64_t N = 7, K = 768, T = 10, nsb = K / quant::kSuperBlock;
    const Tensor w = random_blocks(dt, N, K, 41);
    const auto xv = random_floats(T * K, 42);
    const auto xq = act_quantized(xv, T, K, dt);
    std::vector<quant::BlockQ8KAct> blocks(static_cast<size_t>(T * nsb));
    for (int64_t t = 0; t < T; ++t)
      quant::quantize_row_q8k_scalar(xv.data() + t * K, K, blocks.data() + t * nsb);
    Tensor got = nan_tensor({T, N});
    matmul_cpu::kquant_rows_scalar(dt, static_cast<const uint8_t*>(w.data()), dtype_bytes(dt, K),
                                   {blocks.data(), nsb}, T, got.data_as<float>(), N, 0, N);
    Tensor ref = nan_tensor({T, N});
    matmul_ref(w, f32_tensor(xq, {T, K}), ref);
    expect_close(got, ref, w, xq, T, std::string("scalar ") + dtype_name(dt));
  }
}

// Batch invariance: each token alone (T = 1: 4-row single-token tiles, with 1,
// 2 or 3 threads) equals its row of a batch (2-row x 4-token tiles and their
// remainders), bit for bit; so do thread counts for the batch.
TEST(MatmulKQuant, TokenResultIndependentOfBatchAndThreads) {
  for (DType dt : kDirect) {
    for (int64_t K : {512, 1536}) {
      const int64_t N = 67, T = 11;
      const Tensor w = random_blocks(dt, N, K, 51);
      const auto xv = random_floats(T * K, 52);
      const Tensor yt = run_fast(w, f32_tensor(xv, {T, K}), 2);
      for (int threads : {1, 3}) {
        const Tensor yn = run_fast(w, f32_tensor(xv, {T, K}), threads);
        EXPECT_EQ(std::memcmp(yt.data(), yn.data(), static_cast<size_t>(yt.nbytes())), 0)
            << dtype_name(dt) << " K " << K << " with " << threads << " threads";
      }
      for (int64_t t = 0; t < T; ++t) {
        const std::vector<float> one(xv.begin() + t * K, xv.begin() + (t + 1) * K);
        const Tensor y1 = run_fast(w, f32_tensor(one, {1, K}), 1 + static_cast<int>(t % 3));
        EXPECT_EQ(std::memcmp(y1.data(), yt.data_as<float>() + t * N, static_cast<size_t>(N) * 4), 0)
            << dtype_name(dt) << " K " << K << " token " << t;
      }
      const int64_t first = 3, n = 6;  // shifts the token tiles
      const std::vector<float> window(xv.begin() + first * K, xv.begin() + (first + n) * K);
      const Tensor yw = run_fast(w, f32_tensor(window, {n, K}), 2);
      EXPECT_EQ(std::memcmp(yw.data(), yt.data_as<float>() + first * N, static_cast<size_t>(n * N) * 4), 0)
          << dtype_name(dt) << " K " << K << " tokens " << first << ".." << first + n;
    }
  }
}

// Against the f32 product (x not rounded), which is what a model wants: the
// only difference is the activation rounding per 256 values. Its step
// d = max|x| / 127 is ~2.3% of a Gaussian x's std (max|x| of 256 values is
// ~2.9 std), its errors are independent with a std of d / sqrt(12), so the
// outputs' RMS error is ~0.7% of their RMS (measured 2026-12-01: 0.63-0.73%
// over the five types). The bound, 1.5%, fails any output error of 3% (a
// scale, a min or a sub-block off by that much), which the per-32 rounding
// would not have hidden either.
TEST(MatmulKQuant, CloseToFloatMatmul) {
  constexpr double kMaxRelRms = 0.015;
  for (DType dt : {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    const int64_t N = 48, K = 2048, T = 3;
    const Tensor w = random_blocks(dt, N, K, 71);
    const auto xv = random_floats(T * K, 72);
    Tensor ref = nan_tensor({T, N});
    matmul_ref(w, f32_tensor(xv, {T, K}), ref);
    const Tensor got = run_fast(w, f32_tensor(xv, {T, K}), 2);
    double err2 = 0, ref2 = 0;
    for (int64_t i = 0; i < T * N; ++i) {
      const double g = got.data_as<float>()[i], r = ref.data_as<float>()[i];
      ASSERT_TRUE(std::isfinite(g)) << dtype_name(dt) << " y[" << i << "]";
      err2 += (g - r) * (g - r);
      ref2 += r * r;
    }
    const double rel = std::sqrt(err2 / ref2);
    EXPECT_LT(rel, kMaxRelRms) << dtype_name(dt);
    std::printf("%s: RMS error against f32 %.4f of the RMS output\n", dtype_name(dt), rel);
  }
}

// One call whose weights need both activation roundings (per 32 for Q5_0 and
// Q4_1, per 256 for the K-quants), as a layer's q, k, v can: each product
// equals its own call's, bit for bit.
TEST(MatmulKQuant, MixedTypesInOneCall) {
  const int64_t K = 512;
  for (int64_t T : {1, 6}) {
    const auto xv = random_floats(T * K, 81);
    const Tensor x = f32_tensor(xv, {T, K});
    const Tensor wa = random_blocks(DType::kQ5_K, 9, K, 82), wb = random_blocks(DType::kQ5_0, 7, K, 83),
                 wc = random_blocks(DType::kQ6_K, 5, K, 84);
    Tensor ya = nan_tensor({T, 9}), yb = nan_tensor({T, 7}), yc = nan_tensor({T, 5});
    const MatmulPair pairs[] = {{&wa, &ya}, {&wb, &yb}, {&wc, &yc}};
    std::vector<std::byte> scratch(static_cast<size_t>(matmul_scratch_bytes(T, K)));
    matmul(pairs, x, pool_of(2), scratch);
    for (const auto& [w, y] : {std::pair{&wa, &ya}, std::pair{&wb, &yb}, std::pair{&wc, &yc}}) {
      const Tensor alone = run_fast(*w, x, 1);
      EXPECT_EQ(std::memcmp(alone.data(), y->data(), static_cast<size_t>(y->nbytes())), 0)
          << dtype_name(w->dtype()) << " T " << T;
    }
  }
}

// A non-finite activation block poisons every output that reads it, as for the
// other quantized types.
TEST(MatmulKQuant, NanActivationGivesNan) {
  for (DType dt : kDirect) {
    const int64_t N = 6, K = 512;
    const Tensor w = random_blocks(dt, N, K, 61);
    auto xv = random_floats(K, 62);
    xv[300] = NAN;
    const Tensor y = run_fast(w, f32_tensor(xv, {1, K}), 2);
    for (int64_t o = 0; o < N; ++o)
      EXPECT_TRUE(std::isnan(y.data_as<float>()[o])) << dtype_name(dt) << " " << o;
  }
}

}  // namespace
}  // namespace nanoserve
