#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "ops/matmul/matmul.h"
#include "ops/matmul/quant_blocks.h"
#include "ops/random_weights.h"

namespace nanoserve::quant {
namespace {

void expect_same(const std::vector<float>& x, const char* what) {
  const int64_t K = static_cast<int64_t>(x.size()), nb = K / kBlock;
  std::vector<BlockQ8Act> fast(static_cast<size_t>(nb)), plain(static_cast<size_t>(nb));
  std::memset(fast.data(), 0xa5, fast.size() * sizeof(BlockQ8Act));
  std::memset(plain.data(), 0x5a, plain.size() * sizeof(BlockQ8Act));
  quantize_row_q8(x.data(), K, fast.data());
  quantize_row_q8_scalar(x.data(), K, plain.data());
  for (int64_t b = 0; b < nb; ++b) {
    EXPECT_EQ(std::memcmp(&fast[b], &plain[b], sizeof(BlockQ8Act)), 0) << what << ", block " << b;
  }
}

TEST(QuantizeAct, SimdEqualsScalarOnRandomRows) {
  std::mt19937 rng(5);
  for (float spread : {1e-30f, 1e-3f, 1.0f, 1e4f, 1e30f}) {
    std::normal_distribution<float> dist(0.0f, spread);
    std::vector<float> x(1536);
    for (float& v : x) v = dist(rng);
    expect_same(x, "normal");
  }
}

TEST(QuantizeAct, SimdEqualsScalarOnAwkwardValues) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float denorm = std::numeric_limits<float>::denorm_min();
  // Block 0: exact halves at the rounding boundary (ties go to even), block 1
  // all zeros with a negative zero, block 2 a NaN among values, block 3 an
  // infinity, block 4 denormals only, block 5 all NaN.
  std::vector<float> x(6 * kBlock, 0.0f);
  for (int j = 0; j < kBlock; ++j) x[j] = (static_cast<float>(j) - 16.0f) * 0.5f * (127.0f / 8.0f) / 127.0f;
  x[kBlock] = -0.0f;
  for (int j = 0; j < kBlock; ++j) x[2 * kBlock + j] = static_cast<float>(j) * 0.37f - 5.0f;
  x[2 * kBlock + 7] = nan;
  for (int j = 0; j < kBlock; ++j) x[3 * kBlock + j] = static_cast<float>(j) - 3.0f;
  x[3 * kBlock + 11] = -inf;
  for (int j = 0; j < kBlock; ++j) x[4 * kBlock + j] = denorm * static_cast<float>(j % 5);
  for (int j = 0; j < kBlock; ++j) x[5 * kBlock + j] = nan;
  expect_same(x, "awkward");
}

TEST(QuantizeAct, ScalarMatchesDefinition) {
  // One block by hand: max |x| = 2.54, d = 0.02, q = round(x / d).
  std::vector<float> x(kBlock, 0.0f);
  x[0] = 2.54f;
  x[1] = -1.0f;
  x[2] = 0.03f;  // 1.5 steps: rounds to even, 2
  BlockQ8Act out;
  quantize_row_q8_scalar(x.data(), kBlock, &out);
  EXPECT_FLOAT_EQ(out.d, 2.54f / 127.0f);
  EXPECT_EQ(out.qs[0], 127);
  EXPECT_EQ(out.qs[1], -50);
  EXPECT_EQ(out.qs[3], 0);
  EXPECT_FLOAT_EQ(out.s, out.d * static_cast<float>(127 - 50 + out.qs[2]));
}

// The contract for non-finite input (quant_blocks.h), on the scalar definition
// itself: the block holding a NaN or an infinity gets d = s = NaN and q = 0;
// the other blocks of the row are quantized as if it were not there.
TEST(QuantizeAct, ScalarNonFiniteBlockIsNaN) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (float bad : {nan, -nan, inf, -inf}) {
    for (int at : {0, 13, kBlock - 1}) {
      std::vector<float> x(3 * kBlock);
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) - 3.0f;
      x[kBlock + at] = bad;
      BlockQ8Act out[3], alone;
      std::memset(out, 0x5a, sizeof out);
      quantize_row_q8_scalar(x.data(), 3 * kBlock, out);
      SCOPED_TRACE(::testing::Message() << "value " << bad << " at " << at);
      EXPECT_TRUE(std::isnan(out[1].d));
      EXPECT_TRUE(std::isnan(out[1].s));
      for (int j = 0; j < kBlock; ++j) ASSERT_EQ(out[1].qs[j], 0) << j;
      for (int b : {0, 2}) {
        quantize_row_q8_scalar(x.data() + b * kBlock, kBlock, &alone);
        EXPECT_EQ(std::memcmp(&out[b], &alone, sizeof alone), 0) << "block " << b;
        EXPECT_TRUE(std::isfinite(out[b].d));
      }
    }
  }
  // Every value NaN: the same.
  std::vector<float> all_nan(kBlock, nan);
  BlockQ8Act out;
  quantize_row_q8_scalar(all_nan.data(), kBlock, &out);
  EXPECT_TRUE(std::isnan(out.d));
}

// A scale below FLT_MIN has a reciprocal that can overflow to infinity (and
// infinity * 0 is NaN): such a block is all zeros. Just above, the values are
// quantized normally.
TEST(QuantizeAct, ScalarTinyScaleBlockIsZero) {
  for (float amax : {1e-37f, 3e-39f, 1e-44f, std::numeric_limits<float>::denorm_min()}) {
    std::vector<float> x(kBlock, 0.0f);
    x[3] = amax;
    x[4] = -amax / 2;
    BlockQ8Act out;
    std::memset(&out, 0x5a, sizeof out);
    quantize_row_q8_scalar(x.data(), kBlock, &out);
    EXPECT_EQ(out.d, 0.0f) << amax;
    EXPECT_EQ(out.s, 0.0f) << amax;
    for (int j = 0; j < kBlock; ++j) ASSERT_EQ(out.qs[j], 0) << amax << " at " << j;
  }
  std::vector<float> x(kBlock, 0.0f);
  x[3] = 2e-36f;  // d = 1.6e-38, a normal float
  BlockQ8Act out;
  quantize_row_q8_scalar(x.data(), kBlock, &out);
  EXPECT_EQ(out.d, 2e-36f / 127.0f);
  EXPECT_EQ(out.qs[3], 127);
  expect_same(x, "smallest normal scale");
}

// The contract where it matters: a token whose activations hold a NaN or an
// infinity gets a NaN in every output of a quantized matmul (the fast path
// quantizes x to 8 bits), never a finite number; the other tokens of the
// batch get what they get alone, bit for bit. T = 1 takes the gemv path,
// T = 5 the tiles. Float weights see x itself, so IEEE arithmetic decides.
TEST(QuantizeAct, NonFiniteActivationMakesMatmulRowNaN) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  ThreadPool pool(2);
  const int64_t N = 9, K = 96;
  const auto wv = testing::random_floats(N * K, 3, 0.5f);
  for (DType dt : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kF32, DType::kF16, DType::kBF16}) {
    const Tensor w = testing::encode(wv, N, K, dt);
    for (int64_t T : {1, 5}) {
      for (float bad : {nan, inf, -inf}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " T=" << T << " value " << bad);
        auto xv = testing::random_floats(T * K, 17);
        const int64_t bad_t = T - 1;
        xv[bad_t * K + 40] = bad;  // token T-1, block 1
        const Tensor x = testing::f32_tensor(xv, {T, K});
        Tensor y = testing::f32_tensor(std::vector<float>(static_cast<size_t>(T * N), 12345.0f), {T, N});
        std::vector<std::byte> scratch(static_cast<size_t>(matmul_scratch_bytes(T, K)));
        matmul(w, x, y, pool, scratch);
        for (int64_t o = 0; o < N; ++o) {
          const float v = y.data_as<float>()[bad_t * N + o];
          if (dt == DType::kQ8_0 || dt == DType::kQ4_0 || dt == DType::kQ4_1) {
            ASSERT_TRUE(std::isnan(v)) << "y[" << bad_t << "][" << o << "] = " << v;
          } else {
            ASSERT_FALSE(std::isfinite(v)) << "y[" << bad_t << "][" << o << "] = " << v;
          }
        }
        for (int64_t t = 0; t < bad_t; ++t) {
          const Tensor xt =
              testing::f32_tensor(std::vector<float>(xv.begin() + t * K, xv.begin() + (t + 1) * K), {1, K});
          Tensor yt = testing::f32_tensor(std::vector<float>(static_cast<size_t>(N), 0.0f), {1, N});
          matmul(w, xt, yt, pool, scratch);
          for (int64_t o = 0; o < N; ++o) {
            ASSERT_TRUE(std::isfinite(y.data_as<float>()[t * N + o]));
            ASSERT_EQ(y.data_as<float>()[t * N + o], yt.data_as<float>()[o]) << "y[" << t << "][" << o << "]";
          }
        }
      }
    }
  }
}

// ---- the K-quant activation blocks of 256 ----------------------------------

void expect_same_k(const std::vector<float>& x, const char* what) {
  const int64_t K = static_cast<int64_t>(x.size()), nsb = K / kSuperBlock;
  std::vector<BlockQ8KAct> fast(static_cast<size_t>(nsb)), plain(static_cast<size_t>(nsb));
  std::memset(fast.data(), 0xa5, fast.size() * sizeof(BlockQ8KAct));
  std::memset(plain.data(), 0x5a, plain.size() * sizeof(BlockQ8KAct));
  quantize_row_q8k(x.data(), K, fast.data());
  quantize_row_q8k_scalar(x.data(), K, plain.data());
  for (int64_t b = 0; b < nsb; ++b) {
    EXPECT_EQ(std::memcmp(&fast[b], &plain[b], sizeof(BlockQ8KAct)), 0) << what << ", super-block " << b;
  }
}

TEST(QuantizeActK, SimdEqualsScalar) {
  std::mt19937 rng(6);
  for (float spread : {1e-30f, 1e-3f, 1.0f, 1e4f, 1e30f}) {
    std::normal_distribution<float> dist(0.0f, spread);
    std::vector<float> x(2048);
    for (float& v : x) v = dist(rng);
    expect_same_k(x, "normal");
  }
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  // Super-block 0: max |x| = 127, so d = 1 and the others are exact halves
  // (ties, which go to even); 1: zeros; 2: a NaN; 3: an infinity; 4: denormals only.
  std::vector<float> x(5 * kSuperBlock, 0.0f);
  for (int j = 0; j < kSuperBlock; ++j) x[j] = static_cast<float>(j % 33) - 16.5f;
  x[0] = 127.0f;
  x[kSuperBlock + 5] = -0.0f;
  for (int j = 0; j < kSuperBlock; ++j) x[2 * kSuperBlock + j] = static_cast<float>(j) * 0.037f - 5.0f;
  x[2 * kSuperBlock + 200] = nan;
  for (int j = 0; j < kSuperBlock; ++j) x[3 * kSuperBlock + j] = static_cast<float>(j % 7) - 3.0f;
  x[3 * kSuperBlock + 31] = -inf;
  for (int j = 0; j < kSuperBlock; ++j)
    x[4 * kSuperBlock + j] = std::numeric_limits<float>::denorm_min() * static_cast<float>(j % 5);
  expect_same_k(x, "awkward");
}

// One super-block by hand: max |x| = 2.54 at value 300 - 256, d = 0.02,
// q = round(x / d), bsums the sums of q per 16; a NaN or an infinity makes its
// super-block d = NaN, q = 0, bsums = 0, and leaves the others as they are
// alone; a scale below FLT_MIN gives zeros.
TEST(QuantizeActK, ScalarMatchesDefinition) {
  std::vector<float> x(2 * kSuperBlock, 0.0f);
  x[256 + 44] = 2.54f;
  x[256 + 45] = -1.0f;
  x[256 + 46] = 0.03f;  // 1.5 steps: rounds to even, 2
  x[256 + 255] = 0.5f;
  x[3] = 1.0f;
  BlockQ8KAct out[2];
  quantize_row_q8k_scalar(x.data(), 2 * kSuperBlock, out);
  EXPECT_FLOAT_EQ(out[1].d, 2.54f / 127.0f);
  EXPECT_EQ(out[1].qs[44], 127);
  EXPECT_EQ(out[1].qs[45], -50);
  EXPECT_EQ(out[1].qs[46], 2);
  EXPECT_EQ(out[1].qs[255], 25);
  for (int i = 0; i < 16; ++i) {
    const int want = i == 2 ? 127 - 50 + 2 : i == 15 ? 25 : 0;
    EXPECT_EQ(out[1].bsums[i], want) << i;
  }
  EXPECT_EQ(out[0].qs[3], 127);
  EXPECT_EQ(out[0].bsums[0], 127);

  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (float bad : {nan, inf, -inf}) {
    std::vector<float> y(3 * kSuperBlock);
    for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(i % 7) - 3.0f;
    y[kSuperBlock + 100] = bad;
    BlockQ8KAct blocks[3], alone;
    std::memset(blocks, 0x5a, sizeof blocks);
    quantize_row_q8k_scalar(y.data(), 3 * kSuperBlock, blocks);
    EXPECT_TRUE(std::isnan(blocks[1].d)) << bad;
    for (int j = 0; j < kSuperBlock; ++j) ASSERT_EQ(blocks[1].qs[j], 0) << bad << " at " << j;
    for (int i = 0; i < 16; ++i) ASSERT_EQ(blocks[1].bsums[i], 0) << bad << " at " << i;
    for (int b : {0, 2}) {
      quantize_row_q8k_scalar(y.data() + b * kSuperBlock, kSuperBlock, &alone);
      EXPECT_EQ(std::memcmp(&blocks[b], &alone, sizeof alone), 0) << bad << ", super-block " << b;
    }
  }
  std::vector<float> tiny(kSuperBlock, 0.0f);
  tiny[7] = 1e-37f;
  BlockQ8KAct t;
  std::memset(&t, 0x5a, sizeof t);
  quantize_row_q8k_scalar(tiny.data(), kSuperBlock, &t);
  EXPECT_EQ(t.d, 0.0f);
  EXPECT_EQ(t.qs[7], 0);
  EXPECT_EQ(t.bsums[0], 0);
}

}  // namespace
}  // namespace nanoserve::quant
