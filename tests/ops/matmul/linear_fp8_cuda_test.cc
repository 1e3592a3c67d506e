// linear_cuda with FP8 E4M3 weights (one scale per row) and the quantization
// that makes them (quantize_fp8_rows_cuda).
//
// - The quantization: every scale is max |w[n, :]| / 448 and every byte is
//   core/half.h's f32_to_f8e4m3 (itself checked against ml_dtypes) of
//   w / scale, bit for bit; a zero row gets scale 1 and zero bytes.
// - The product against an f64 reference over the dequantized weights
//   (byte value x scale) and tokens quantized on the host by the kernel's
//   rule (e4m3_tokens_round_trip: scale_x = max |x[m, :]| / 448, codes
//   f32_to_f8e4m3(x / scale_x), back to code x scale_x in f32),
//   on 160 sampled columns, for SmolLM2's and Llama-3-8B's linear shapes, at
//   M on both sides of the tiles' boundaries. Bounds: the bf16 NMSE, and an
//   element within 2^-8 of itself (the bf16 store) plus 2^-10 of its sum of
//   |products| (the tensor core's FP8 chain: ~5e-4 measured).
//   A 3% scale error, and a reference over unquantized tokens, are each far
//   over the NMSE bound (asserted).
// - Rows of any M are bitwise those of M = 1,030; every tile agrees bit for
//   bit; the SwiGLU input equals silu_mul then linear; a norm's FP8 tokens
//   equal its bf16 rows quantized by linear_cuda.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/half.h"
#include "ops/cuda_op_check.h"
#include "ops/fill/fill_cuda.cuh"
#include "ops/matmul/fp8_tokens.h"
#include "ops/matmul/linear_cuda.cuh"
#include "ops/rmsnorm/rmsnorm_cuda.cuh"
#include "ops/silu_mul/silu_mul_cuda.cuh"

namespace nanoserve {
namespace {

using namespace nanoserve::testing;

struct Fp8Weight {
  LinearWeight dev;
  std::vector<uint8_t> q;      // [N, K]
  std::vector<float> scale;    // [N]
  std::vector<uint16_t> bf16;  // [N, K] the weights before quantization
  int64_t N, K;
  double value(int64_t n, int64_t k) const {
    return static_cast<double>(f8e4m3_to_f32(q[static_cast<size_t>(n * K + k)])) * scale[static_cast<size_t>(n)];
  }
};

// Random bf16 weights (row 0 zero) quantized on the device, with both copies on the host.
Fp8Weight make_fp8_weight(int64_t N, int64_t K) {
  Tensor w = cuda::empty(DType::kBF16, {N, K});
  fill_uniform_cuda(w, fresh_seed(), 1.0f, nullptr);
  cuda::fill_bytes(w.slice_rows(0, 1), 0);
  Fp8Weight f{quantize_fp8_rows_cuda(w, nullptr), {}, {}, {}, N, K};
  cuda::synchronize();
  f.q = download<uint8_t>(f.dev.w);
  f.scale = download<float>(f.dev.scale);
  f.bf16 = download<uint16_t>(w);
  return f;
}

TEST(LinearFp8Cuda, QuantizationMatchesTheHostBitForBit) {
  NS_SKIP_WITHOUT_GPU();
  for (auto [N, K] : {std::pair<int64_t, int64_t>{976, 576}, {4096, 14336}}) {
    const Fp8Weight f = make_fp8_weight(N, K);
    ASSERT_EQ(f.dev.w.dtype(), DType::kF8E4M3);
    EXPECT_EQ(f.scale[0], 1.0f) << "a zero row";
    int64_t wrong_scales = 0, wrong_bytes = 0;
    for (int64_t n = 0; n < N; ++n) {
      float m = 0.0f;
      for (int64_t k = 0; k < K; ++k) m = std::max(m, std::fabs(bf16_to_f32(f.bf16[static_cast<size_t>(n * K + k)])));
      const float sc = m > 0.0f ? m / 448.0f : 1.0f;
      wrong_scales += f.scale[static_cast<size_t>(n)] != sc;
      for (int64_t k = 0; k < K; ++k) {
        const size_t i = static_cast<size_t>(n * K + k);
        wrong_bytes += f.q[i] != f32_to_f8e4m3(bf16_to_f32(f.bf16[i]) / sc);
      }
    }
    EXPECT_EQ(wrong_scales, 0) << N << " x " << K;
    EXPECT_EQ(wrong_bytes, 0) << N << " x " << K;
  }
}

double nmse(const std::vector<float>& out, const std::vector<float>& ref) {
  double e = 0.0, r = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    e += (static_cast<double>(out[i]) - ref[i]) * (static_cast<double>(out[i]) - ref[i]);
    r += static_cast<double>(ref[i]) * ref[i];
  }
  return e / r;
}

// The tokens as the kernel reads them: e4m3_tokens_round_trip, the host's
// statement of the rule (tests/ops/matmul/fp8_tokens_test.cc checks it).
std::vector<double> quantized_tokens(const std::vector<uint16_t>& x16, int64_t M, int64_t K) {
  std::vector<float> x(x16.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = bf16_to_f32(x16[i]);
  e4m3_tokens_round_trip(x.data(), M, K);
  return {x.begin(), x.end()};
}

void check_fp8_linear(const Fp8Weight& f, int64_t M) {
  const int64_t N = f.N, K = f.K;
  const uint64_t seed = fresh_seed();
  const std::string what = "fp8 y[" + std::to_string(M) + ", " + std::to_string(N) + "] K " + std::to_string(K) +
                           ", seed " + std::to_string(seed);
  SCOPED_TRACE(what);
  std::mt19937_64 rng(seed);
  const std::vector<uint16_t> x16 = to_bf16(uniform_floats(M * K, seed, 1.0f));
  const Tensor x = upload(x16, DType::kBF16, {M, K});
  const Tensor y = poisoned(DType::kBF16, {M, N});
  linear_cuda(x, f.dev, y, nullptr);
  cuda::synchronize();
  const std::vector<float> got = download_f32(y);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_FALSE(std::isnan(got[i])) << "y[" << i / N << ", " << i % N << "]";
  std::vector<int64_t> cols = {0, 1, N - 2, N - 1};
  std::uniform_int_distribution<int64_t> pick(0, N - 1);
  while (cols.size() < 160) cols.push_back(pick(rng));
  const std::vector<double> xq = quantized_tokens(x16, M, K);
  std::vector<float> ref, got_v, planted, unquantized;
  int64_t over = 0;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n : cols) {
      double acc = 0.0, mag = 0.0, plain = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const size_t i = static_cast<size_t>(m * K + k);
        acc += f.value(n, k) * xq[i];
        mag += std::fabs(f.value(n, k) * xq[i]);
        plain += f.value(n, k) * bf16_to_f32(x16[i]);
      }
      const float g = got[static_cast<size_t>(m * N + n)];
      if (std::fabs(g - acc) > 0x1p-8 * std::fabs(acc) + 0x1p-10 * mag) {
        if (over++ < 5) ADD_FAILURE() << "y[" << m << ", " << n << "] = " << g << ", reference " << acc << " (sum |products| " << mag << ")";
      }
      ref.push_back(static_cast<float>(acc));
      planted.push_back(static_cast<float>(acc * 1.03));
      unquantized.push_back(static_cast<float>(plain));
      got_v.push_back(g);
    }
  }
  EXPECT_EQ(over, 0) << "elements past the bound";
  EXPECT_LE(nmse(got_v, ref), kNmseBf16);
  // A 3% scale error has an NMSE of 0.03^2 / 1.03^2 = 8.5e-4: 85 times the bound.
  EXPECT_GT(nmse(got_v, planted), 50 * kNmseBf16) << "a 3% scale error would pass";
  // E4M3 tokens (3 mantissa bits) move y by ~2-3% rms: the reference must quantize them.
  EXPECT_GT(nmse(got_v, unquantized), 10 * kNmseBf16) << "unquantized tokens would pass";
}

TEST(LinearFp8Cuda, ShapesMatchTheDequantizedReference) {
  NS_SKIP_WITHOUT_GPU();
  for (auto [N, K] : {std::pair<int64_t, int64_t>{960, 576}, {3072, 576}, {576, 1536}, {6144, 4096},
                      {4096, 4096}, {28672, 4096}, {4096, 14336}}) {
    const Fp8Weight f = make_fp8_weight(N, K);
    for (int64_t M : {1, 8, 17, 33, 64, 65, 300}) check_fp8_linear(f, M);
  }
}

TEST(LinearFp8Cuda, RowsDoNotDependOnBatchSize) {
  NS_SKIP_WITHOUT_GPU();
  for (auto [N, K] : {std::pair<int64_t, int64_t>{4096, 4096}, {4096, 14336}, {976, 576}}) {
    const Fp8Weight f = make_fp8_weight(N, K);
    const int64_t max_m = 1030;
    const Tensor x = upload(to_bf16(uniform_floats(max_m * K, fresh_seed())), DType::kBF16, {max_m, K});
    const Tensor y_all = poisoned(DType::kBF16, {max_m, N});
    linear_cuda(x, f.dev, y_all, nullptr);
    cuda::synchronize();
    const std::vector<uint16_t> all = download<uint16_t>(y_all);
    for (int64_t M : {1, 2, 8, 9, 16, 17, 32, 33, 64, 65, 129, 257, 1029}) {
      const Tensor y = poisoned(DType::kBF16, {M, N});
      linear_cuda(x.slice_rows(0, M), f.dev, y, nullptr);
      cuda::synchronize();
      const std::vector<uint16_t> got = download<uint16_t>(y);
      EXPECT_EQ(std::memcmp(got.data(), all.data(), got.size() * 2), 0)
          << "N " << N << " K " << K << ": rows of M = " << M << " differ from the same rows of M = " << max_m;
    }
  }
}

TEST(LinearFp8Cuda, KernelsAgreeBitForBit) {
  NS_SKIP_WITHOUT_GPU();
  for (auto [N, K] : {std::pair<int64_t, int64_t>{6144, 4096}, {976, 576}, {4096, 14336}}) {
    const Fp8Weight f = make_fp8_weight(N, K);
    for (int64_t M : {1, 16, 40, 65, 130}) {
      const Tensor x = upload(to_bf16(uniform_floats(M * K, fresh_seed())), DType::kBF16, {M, K});
      std::vector<uint16_t> first;
      for (LinearPath p : {LinearPath::kStream, LinearPath::kTile64WholeK, LinearPath::kTile128x64,
                           LinearPath::kTile128x128, LinearPath::kTile128x128WholeK,
                           LinearPath::kTile128x64WholeK, LinearPath::kTile192x128WholeK}) {
        const Tensor y = poisoned(DType::kBF16, {M, N});
        linear_cuda(x, f.dev, y, nullptr, p);
        cuda::synchronize();
        const std::vector<uint16_t> got = download<uint16_t>(y);
        if (first.empty()) {
          first = got;
          continue;
        }
        size_t diff = 0;
        for (size_t i = 0; i < got.size(); ++i) diff += got[i] != first[i];
        EXPECT_EQ(diff, 0u) << "N " << N << " K " << K << " M " << M << ": path " << static_cast<int>(p)
                            << " differs from the decode tile in " << diff << " of " << got.size();
      }
    }
  }
}

TEST(LinearFp8Cuda, SwiGLUInputEqualsSiluMulThenLinear) {
  NS_SKIP_WITHOUT_GPU();
  const int64_t N = 4096, K = 14336;
  const Fp8Weight f = make_fp8_weight(N, K);
  for (int64_t M : {5, 40, 130}) {
    const Tensor gate_up = upload(to_bf16(uniform_floats(M * 2 * K, fresh_seed(), 4.0f)), DType::kBF16, {M, 2 * K});
    const Tensor act = poisoned(DType::kBF16, {M, K}), y_ref = poisoned(DType::kBF16, {M, N});
    silu_mul_cuda(gate_up, act, nullptr);
    linear_cuda(act, f.dev, y_ref, nullptr);
    const Tensor y = poisoned(DType::kBF16, {M, N});
    linear_swiglu_cuda(gate_up, f.dev, y, nullptr);
    cuda::synchronize();
    EXPECT_EQ(download<uint16_t>(y), download<uint16_t>(y_ref)) << "M " << M;
  }
}

// A norm that writes an FP8 linear's tokens (RmsNormOut::kFp8Tokens) and
// linear_cuda_fp8_tokens give bitwise what the norm's bf16 rows through
// linear_cuda give, for each of the three norms, and the same residual.
TEST(LinearFp8Cuda, NormWritesTheTokensLinearCudaQuantizes) {
  NS_SKIP_WITHOUT_GPU();
  for (auto [N, K] : {std::pair<int64_t, int64_t>{1024, 4096}, {976, 576}}) {
    const Fp8Weight f = make_fp8_weight(N, K);
    const Tensor norm_w = upload(uniform_floats(K, fresh_seed(), 2.0f), DType::kF32, {K});
    const Tensor post_w = upload(uniform_floats(K, fresh_seed(), 2.0f), DType::kF32, {K});
    for (int64_t M : {1, 7, 64, 130}) {
      const std::vector<float> x0 = uniform_floats(M * K, fresh_seed(), 3.0f);
      const Tensor delta = upload(to_bf16(uniform_floats(M * K, fresh_seed(), 3.0f)), DType::kBF16, {M, K});
      for (int kind = 0; kind < 3; ++kind) {  // rmsnorm, add + rmsnorm, post norm + add + rmsnorm
        auto norm = [&](const Tensor& x, const Tensor& out, RmsNormOut order) {
          if (kind == 0) rmsnorm_cuda(x, norm_w, 1e-5f, out, nullptr, order);
          if (kind == 1) add_rmsnorm_cuda(x, delta, norm_w, 1e-5f, out, nullptr, order);
          if (kind == 2) post_norm_add_rmsnorm_cuda(x, delta, post_w, norm_w, 1e-5f, out, nullptr, order);
        };
        const Tensor xa = upload(x0, DType::kF32, {M, K}), xb = upload(x0, DType::kF32, {M, K});
        const Tensor xn = poisoned(DType::kBF16, {M, K}), y_ref = poisoned(DType::kBF16, {M, N});
        norm(xa, xn, RmsNormOut::kNatural);
        linear_cuda(xn, f.dev, y_ref, nullptr);
        const Tensor scratch = poisoned(DType::kBF16, {linear_cuda_scratch_elems(M, K)});
        const Tensor y = poisoned(DType::kBF16, {M, N});
        norm(xb, scratch, RmsNormOut::kFp8Tokens);
        linear_cuda_fp8_tokens(scratch, f.dev, y, nullptr);
        cuda::synchronize();
        EXPECT_EQ(download<uint16_t>(y), download<uint16_t>(y_ref)) << "norm " << kind << ", M " << M << ", K " << K;
        EXPECT_EQ(download<float>(xb), download<float>(xa)) << "norm " << kind << ": the residual";
      }
    }
  }
}

TEST(LinearFp8Cuda, RefusesWhatItCannotRun) {
  NS_SKIP_WITHOUT_GPU();
  const LinearWeight w(cuda::empty(DType::kF8E4M3, {64, 128}), cuda::empty(DType::kF32, {64}));
  const Tensor x = cuda::empty(DType::kBF16, {3, 128});
  EXPECT_TRUE(linear_cuda_supports(x, w, cuda::empty(DType::kBF16, {3, 64})));
  EXPECT_FALSE(linear_cuda_supports(x, w, cuda::empty(DType::kF32, {3, 64})));  // FP8 writes bf16
  EXPECT_FALSE(linear_cuda_supports(x, LinearWeight(w.w), cuda::empty(DType::kBF16, {3, 64})));  // no scale
  EXPECT_FALSE(linear_cuda_supports(x, LinearWeight(w.w, cuda::empty(DType::kF32, {32})),
                                    cuda::empty(DType::kBF16, {3, 64})));  // a scale per row
}

}  // namespace
}  // namespace nanoserve
