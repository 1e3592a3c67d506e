// The FP8 (E4M3) KV cache on the CPU: the element rule (core/kv_quant.h)
// against hand-derived codes (round to nearest even, saturation at +-448,
// NaN, subnormals, the scale), the paged write and gather through it, and
// the fused read over an fp8 pool against the gather path (attend_row over
// the dequantized history) bit for bit.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/kv_quant.h"
#include "core/thread_pool.h"
#include "ops/paged_attention/paged_attention.h"
#include "ops/paged_attention/paged_case.h"
#include "ops/paged_attention/paged_kv.h"

namespace nanoserve {
namespace {

TEST(KvQuant, QuantizeRoundsToNearestEvenSaturatesAndKeepsNaN) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    float x, scale;
    uint8_t want;
  };
  const Case cases[] = {
      {0.0f, 1.0f, 0x00},         {-0.0f, 1.0f, 0x80},   {1.0f, 1.0f, 0x38},  // 1.0: exponent 7, mantissa 0
      {-1.0f, 1.0f, 0xb8},        {1.0625f, 1.0f, 0x38},                      // tie 1 | 1.125: even (1)
      {1.1875f, 1.0f, 0x3a},                                                  // tie 1.125 | 1.25: even (1.25)
      {1.07f, 1.0f, 0x39},                                                    // above the tie: up
      {448.0f, 1.0f, 0x7e},       {463.0f, 1.0f, 0x7e},  {-1e6f, 1.0f, 0xfe},  // saturated, never NaN
      {inf, 1.0f, 0x7e},          {-inf, 1.0f, 0xfe},    {nan, 1.0f, 0x7f},
      {-nan, 1.0f, 0x7f},         {0x1p-9f, 1.0f, 0x01},  // the least subnormal
      {0x1p-10f, 1.0f, 0x00},                             // tie 0 | 2^-9: even (0)
      {3 * 0x1p-10f, 1.0f, 0x02},                         // tie 2^-9 | 2^-8: even
      {0x1p-6f, 1.0f, 0x08},                              // the least normal
      {10.0f, 0.5f, 0x5a},                                // 20 = 1.25 x 2^4
      {10.0f, 2.0f, 0x4a},                                // 5 = 1.25 x 2^2
      {300.0f, 0.5f, 0x7e},                               // 600 saturates
  };
  for (const Case& c : cases) {
    EXPECT_EQ(kv_f8_quantize(c.x, c.scale), c.want) << "x " << c.x << ", scale " << c.scale;
  }
  // Every finite code survives a round trip through a power-of-two scale (exact both ways).
  for (int q = 0; q < 256; ++q) {
    if ((q & 0x7f) == 0x7f) continue;
    for (float s : {1.0f, 0.125f, 4.0f}) {
      EXPECT_EQ(kv_f8_quantize(kv_f8_dequantize(static_cast<uint8_t>(q), s), s), q) << "code " << q;
    }
  }
  EXPECT_TRUE(std::isnan(kv_f8_dequantize(0x7f, 1.0f)));
  EXPECT_EQ(kv_f8_dequantize(0x7e, 0.5f), 224.0f);
}

// One step's K/V through paged_kv_write into fp8 pools: each written slot holds
// kv_f8_quantize of the bf16-rounded value with its pool's scale; the others
// keep their bytes; the gather reads kv_f8_dequantize back.
TEST(PagedKvFp8, WriteQuantizesAndGatherDequantizes) {
  constexpr int64_t kBlocks = 4, kBs = 4, kKv = 2, kHd = 8, kRow = kKv * kHd;
  const KvScales scales{0.37f, 2.5f};
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0.0f, 60.0f);    // some beyond 448 x scale
  const std::vector<int32_t> slots = {5, 6, 14, 9};  // the tokens' slots: blocks 1, 1, 3, 2
  const int32_t T = static_cast<int32_t>(slots.size());
  Tensor k = Tensor::empty(DType::kF32, {T, kKv, kHd}), v = Tensor::empty(DType::kF32, {T, kKv, kHd});
  for (int64_t i = 0; i < k.numel(); ++i) {
    k.data_as<float>()[i] = n(rng);
    v.data_as<float>()[i] = n(rng);
  }
  k.data_as<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  v.data_as<float>()[4] = -std::numeric_limits<float>::infinity();
  Tensor kp = Tensor::empty(DType::kF8E4M3, {kBlocks, kBs, kKv, kHd});
  Tensor vp = Tensor::empty(DType::kF8E4M3, {kBlocks, kBs, kKv, kHd});
  std::memset(kp.data(), 0x5c, static_cast<size_t>(kp.numel()));
  std::memset(vp.data(), 0x5c, static_cast<size_t>(vp.numel()));
  ForwardBatch b;
  b.seq_ids = {0, 1, 2};
  b.seq_starts = {0, 2, 3, 4};
  b.tokens = {1, 2, 3, 4};
  b.positions = {1, 2, 2, 1};
  b.slot_mapping = slots;
  b.context_lens = {3, 3, 2};
  b.max_blocks_per_seq = 1;
  b.block_tables = {1, 3, 2};
  // Sequence 0 at slots 4..6 (block 1), 1 at 12..14 (block 3), 2 at 8..9 (block 2).
  paged_kv_write(k, v, b, kp, vp, scales);
  const auto* kb = kp.data_as<const uint8_t>();
  const auto* vb = vp.data_as<const uint8_t>();
  std::vector<bool> written(static_cast<size_t>(kBlocks * kBs), false);
  for (int32_t t = 0; t < T; ++t) {
    written[static_cast<size_t>(slots[t])] = true;
    for (int64_t e = 0; e < kRow; ++e) {
      const float kx = bf16_to_f32(f32_to_bf16(k.data_as<float>()[t * kRow + e]));
      const float vx = bf16_to_f32(f32_to_bf16(v.data_as<float>()[t * kRow + e]));
      ASSERT_EQ(kb[slots[t] * kRow + e], kv_f8_quantize(kx, scales.k)) << "K token " << t << " elem " << e;
      ASSERT_EQ(vb[slots[t] * kRow + e], kv_f8_quantize(vx, scales.v)) << "V token " << t << " elem " << e;
    }
  }
  EXPECT_EQ(kb[slots[0] * kRow + 3], 0x7f);  // NaN stays NaN
  EXPECT_EQ(vb[slots[0] * kRow + 4], 0xfe);  // -inf saturates to -448
  for (int64_t s = 0; s < kBlocks * kBs; ++s) {
    if (written[static_cast<size_t>(s)]) continue;
    for (int64_t e = 0; e < kRow; ++e) ASSERT_EQ(kb[s * kRow + e], 0x5c) << "slot " << s << " written";
  }
  // The gather: sequence 1's history (block 3, positions 0..2) dequantized.
  ThreadPool pool(2);
  Tensor gk = Tensor::empty(DType::kF32, {8, kKv, kHd}), gv = Tensor::empty(DType::kF32, {8, kKv, kHd});
  KVHistory hist;
  std::vector<int64_t> scratch;
  paged_kv_gather(kp, vp, b, gk, gv, hist, pool, scratch, scales);
  for (int64_t p = 0; p < 3; ++p) {
    for (int64_t e = 0; e < kRow; ++e) {
      const int64_t slot = 3 * kBs + p;
      const float want_k = kv_f8_dequantize(kb[slot * kRow + e], scales.k);
      const float want_v = kv_f8_dequantize(vb[slot * kRow + e], scales.v);
      const float got_k = hist.k[1][p * hist.pos_stride + e], got_v = hist.v[1][p * hist.pos_stride + e];
      ASSERT_TRUE(std::memcmp(&got_k, &want_k, 4) == 0) << "position " << p << " elem " << e;
      ASSERT_TRUE(std::memcmp(&got_v, &want_v, 4) == 0) << "position " << p << " elem " << e;
    }
  }
}

// The fused read over fp8 pools equals the gather path over their dequantized
// values (attend_row, f32), bitwise: decodes, a causal chunk, a window.
TEST(PagedKvFp8, FusedReadEqualsGatherOverDequantizedPool) {
  testing::PagedCase c({{1, 1}, {40, 1}, {97, 9}, {200, 1}, {33, 33}}, 11);
  const KvScales scales{0.05f, 0.011f};  // |k| < 4: up to 80 in the code; |v| < 1: up to 91
  std::vector<uint8_t> k8(c.k.size()), v8(c.v.size());
  for (size_t i = 0; i < c.k.size(); ++i) {
    k8[i] = kv_f8_quantize(c.k[i], scales.k);
    v8[i] = kv_f8_quantize(c.v[i], scales.v);
    c.k[i] = kv_f8_dequantize(k8[i], scales.k);  // the gather's view: dequantized f32
    c.v[i] = kv_f8_dequantize(v8[i], scales.v);
  }
  ThreadPool pool(3);
  for (int32_t window : {0, 24}) {
    SCOPED_TRACE(window);
    std::vector<float> out(c.q.size(), std::numeric_limits<float>::quiet_NaN());
    PagedAttentionArgs a = c.args(out.data(), window, 0.0f);
    a.kv_dtype = DType::kF8E4M3;
    a.k_pool = a.v_pool = nullptr;
    a.k_pool8 = k8.data();
    a.v_pool8 = v8.data();
    a.k_scale = scales.k;
    a.v_scale = scales.v;
    std::vector<float> scores(static_cast<size_t>(pool.num_threads()) *
                              paged_attention_cpu_scores_stride(testing::PagedCase::kRep, 200));
    paged_attention_cpu(a, pool, scores.data(),
                        paged_attention_cpu_scores_stride(testing::PagedCase::kRep, 200));
    const std::vector<float> want = c.gather(window, 0.0f);
    ASSERT_EQ(std::memcmp(out.data(), want.data(), out.size() * sizeof(float)), 0)
        << "the fused fp8 read differs from the gather over the dequantized pool";
    // A wrong scale on the read (K read at twice its value) does not.
    a.k_scale = 2 * scales.k;
    paged_attention_cpu(a, pool, scores.data(),
                        paged_attention_cpu_scores_stride(testing::PagedCase::kRep, 200));
    EXPECT_NE(std::memcmp(out.data(), want.data(), out.size() * sizeof(float)), 0);
  }
}

}  // namespace
}  // namespace nanoserve
