// The default model's CUDA forward with an FP8 (E4M3) KV cache against the
// same model with the bf16 cache (bf16 weights in both):
//   - logits of four prompts' prefill and decode steps within kFp8KvMeanNmse
//     on average (the worst row printed), and a planted scale error (every
//     layer's K read at twice the scale it was written with) outside the mean
//     bound;
//   - greedy decoding agrees until the first step whose bf16 top-2 margin is
//     under kFp8KvNearTie;
//   - batch invariance with fp8 pools: a prompt chunked, and beside others,
//     gives its logits alone bit for bit;
//   - the pools hold twice the blocks of bf16 in the same bytes.
// Without a CUDA device every test reports SKIPPED with the runtime's reason.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/skip_without_gpu.h"
#include "model/model_cuda.h"
#include "model/model_fixture.h"
#include "ops/rope/rope_freqs.h"
#include "tokenizer/tokenizer.h"

namespace nanoserve {
namespace {

using testing::default_model;
using testing::nmse;

constexpr int32_t kBlockSize = 16;
constexpr int32_t kBlocksPerSeq = 32;  // 512 positions a sequence
constexpr int32_t kMaxSeqs = 8;
// The mean bound and the near-tie margin of the CPU's fp8-KV test
// (tests/model/kv_fp8_model_test.cc, where they are derived and measured on
// the same 48 rows): the element rule is the same on both devices, and the
// bf16 cache compared with here is 16 times finer than E4M3 (7 mantissa bits
// to 3), so it stands in for the CPU's f32. A row is not bounded here: a
// change of the arithmetic upstream moves which K/V elements round to which
// E4M3 code (steps of 6%), so the worst of 48 rows is one draw of a
// heavy-tailed error. On an H100 (2026-12-07) the worst row read 5.9e-2 with
// the tile arithmetic's bf16 products and 1.9e-1 with its f16 products (P
// rounded 8 times finer), while the other 47 rows' mean fell from 5.8e-3 to
// 5.2e-3; on the CPU, perturbing the fp8 model's attention output by 2e-6
// to 7e-5 (40 draws) moved the worst row over 1.7e-2 to 6.0e-2. The planted
// K x 2 lands at 8x the mean bound.
constexpr double kFp8KvMeanNmse = 0.03;
constexpr float kFp8KvNearTie = 1.0f;

void add_tables(ForwardBatch& b) {
  testing::add_slot_tables(b, kBlocksPerSeq, kBlockSize);
}

float margin(const float* row, int64_t n) {
  float a = -INFINITY, b = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    if (row[i] > a) {
      b = a;
      a = row[i];
    } else if (row[i] > b) {
      b = row[i];
    }
  }
  return a - b;
}

const char* kPrompts[] = {
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "Once upon a time, in a land far away, there lived",
    "The three primary colors are",
    "Water boils at a temperature of",
    "To make a cup of tea, first",
};

class CudaKvFp8 : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(default_model().model, nullptr) << "default model missing: " << testing::kDefaultModel;
    cpu_ = default_model().model.get();
  }
  std::unique_ptr<CudaModel> make_gpu(DType kv_dtype) {
    const ModelConfig& c = cpu_->config();
    const auto inv_freq = rope_inv_freqs(c.rope_dim, c.rope_theta, c.rope_scaling);
    auto m = CudaModel::upload(c, cpu_->weights(), inv_freq);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    if (!m.ok()) return nullptr;
    CudaLimits lim{512, kMaxSeqs, kMaxSeqs, kBlocksPerSeq};
    lim.kv_dtype = kv_dtype;
    const Status s = (*m)->allocate(lim, kMaxSeqs * kBlocksPerSeq, kBlockSize);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return std::move(m).value();
  }
  std::vector<int32_t> encode(const std::string& text) {
    auto tok = Tokenizer::from_gguf(*default_model().file);
    return (*tok)->encode(text, true, true);
  }
  const CpuModel* cpu_ = nullptr;
};

TEST_F(CudaKvFp8, PoolsHoldTwiceTheTokensInTheSameBytes) {
  NS_SKIP_WITHOUT_GPU();
  const ModelConfig& c = cpu_->config();
  EXPECT_EQ(2 * CudaModel::kv_bytes_per_block(c, kBlockSize, DType::kF8E4M3),
            CudaModel::kv_bytes_per_block(c, kBlockSize, DType::kBF16));
  auto gpu = make_gpu(DType::kF8E4M3);
  ASSERT_NE(gpu, nullptr);
  EXPECT_EQ(gpu->k_pool(0).dtype(), DType::kF8E4M3);
  EXPECT_EQ(gpu->k_pool(0).nbytes() * 2 * c.n_layers,
            CudaModel::kv_bytes_per_block(c, kBlockSize, DType::kF8E4M3) * gpu->num_blocks());
  ASSERT_EQ(gpu->kv_scales().size(), static_cast<size_t>(c.n_layers));
  EXPECT_EQ(gpu->kv_scales()[0].k, 1.0f);  // vLLM's default
  std::vector<KvScales> bad(static_cast<size_t>(c.n_layers));
  bad[3].v = 0.0f;
  EXPECT_FALSE(gpu->set_kv_scales(bad).ok());
}

// As the CPU's test: each of four prompts prefilled, then 11 decode steps fed
// the bf16 run's greedy tokens (both caches see the same inputs): 48 logits
// rows, their mean within kFp8KvMeanNmse, and the planted error's mean
// outside it.
TEST_F(CudaKvFp8, LogitsNearBf16KvAndFarFromAWrongScale) {
  NS_SKIP_WITHOUT_GPU();
  auto bf16 = make_gpu(DType::kBF16), fp8 = make_gpu(DType::kF8E4M3), planted = make_gpu(DType::kF8E4M3);
  ASSERT_TRUE(bf16 && fp8 && planted);
  const size_t L = static_cast<size_t>(cpu_->config().n_layers);
  ASSERT_TRUE(
      planted->set_kv_scales(std::vector<KvScales>(L), std::vector<KvScales>(L, KvScales{2.0f, 1.0f})).ok());
  const int64_t V = cpu_->config().vocab_size;
  constexpr int kSteps = 12;
  double worst = 0, mean = 0, planted_mean = 0;
  int rows = 0;
  for (int p = 0; p < 4; ++p) {
    const auto prompt = encode(kPrompts[p]);
    ForwardBatch b = testing::make_batch({prompt}, {0}, {p});
    int32_t pos = static_cast<int32_t>(prompt.size());
    for (int step = 0; step < kSteps; ++step) {
      add_tables(b);
      std::vector<float> ref;
      auto r = bf16->forward(b);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      ref.assign(r->data_as<const float>(), r->data_as<const float>() + V);
      auto g = fp8->forward(b);
      ASSERT_TRUE(g.ok()) << g.status().to_string();
      const float* gp = g->data_as<const float>();
      ASSERT_TRUE(std::all_of(gp, gp + V, [](float x) { return std::isfinite(x); })) << "step " << step;
      const double e = nmse(gp, ref.data(), V);
      auto pl = planted->forward(b);
      ASSERT_TRUE(pl.ok());
      const double pe = nmse(pl->data_as<const float>(), ref.data(), V);
      worst = std::max(worst, e);
      mean += e;
      planted_mean += pe;
      ++rows;
      b = testing::make_batch({{testing::argmax(ref.data(), V)}}, {pos++}, {p});
    }
  }
  mean /= rows;
  planted_mean /= rows;
  std::printf(
      "fp8 KV vs bf16 KV: logits NMSE mean %.2e (bound %.2e), worst row %.2e over %d rows; "
      "K read x2: mean %.2e\n",
      mean, kFp8KvMeanNmse, worst, rows, planted_mean);
  EXPECT_LE(mean, kFp8KvMeanNmse);
  EXPECT_GT(planted_mean, kFp8KvMeanNmse) << "K read at twice its scale passes the bound";
}

TEST_F(CudaKvFp8, GreedyAgreesWithBf16KvUntilANearTie) {
  NS_SKIP_WITHOUT_GPU();
  auto bf16 = make_gpu(DType::kBF16), fp8 = make_gpu(DType::kF8E4M3);
  ASSERT_TRUE(bf16 && fp8);
  const int64_t V = cpu_->config().vocab_size;
  int agree = 0, total = 0;
  for (int p = 0; p < 6; ++p) {
    const auto prompt = encode(kPrompts[p]);
    ForwardBatch b = testing::make_batch({prompt}, {0}, {p});
    int32_t pos = static_cast<int32_t>(prompt.size());
    constexpr int kSteps = 32;
    int same = kSteps;
    for (int i = 0; i < kSteps; ++i) {
      add_tables(b);
      auto ref = bf16->forward(b);
      ASSERT_TRUE(ref.ok());
      const int32_t want = testing::argmax(ref->data_as<const float>(), V);
      const float m = margin(ref->data_as<const float>(), V);
      ASSERT_TRUE(fp8->forward(b, false).ok());
      const int32_t got = fp8->argmax()[0];
      if (got != want) {
        same = i;
        std::printf("prompt %d: fp8 KV parts from bf16 KV at step %d, bf16 top-2 margin %.3f\n", p, i, m);
        EXPECT_LT(m, kFp8KvNearTie) << "prompt " << p << " parts at step " << i << " with a clear margin";
        break;
      }
      b = testing::make_batch({{want}}, {pos++}, {p});
    }
    agree += same;
    total += kSteps;
  }
  std::printf("greedy agreement fp8 KV vs bf16 KV: %d/%d tokens\n", agree, total);
}

// A prompt whole, in chunks of 7, and beside two others, through fp8 pools:
// its last logits bit for bit (quantization is per element with a per-layer
// scale, so a token's stored K/V never depend on its batch-mates).
TEST_F(CudaKvFp8, ChunkedAndBatchedPrefillMatchWhole) {
  NS_SKIP_WITHOUT_GPU();
  auto gpu = make_gpu(DType::kF8E4M3);
  ASSERT_NE(gpu, nullptr);
  const int64_t V = cpu_->config().vocab_size;
  std::vector<int32_t> prompt = encode(std::string(kPrompts[2]) + " " + kPrompts[3] + " " + kPrompts[5]);
  const int32_t n = static_cast<int32_t>(prompt.size());
  ForwardBatch whole = testing::make_batch({prompt}, {0}, {0});
  add_tables(whole);
  auto w = gpu->forward(whole);
  ASSERT_TRUE(w.ok());
  std::vector<float> ref(w->data_as<const float>(), w->data_as<const float>() + V);
  std::vector<float> chunked;
  for (int32_t s = 0; s < n; s += 7) {
    const int32_t e = std::min(n, s + 7);
    ForwardBatch b =
        testing::make_batch({std::vector<int32_t>(prompt.begin() + s, prompt.begin() + e)}, {s}, {1});
    add_tables(b);
    auto out = gpu->forward(b);
    ASSERT_TRUE(out.ok());
    chunked.assign(out->data_as<const float>(), out->data_as<const float>() + V);
  }
  EXPECT_EQ(std::memcmp(chunked.data(), ref.data(), V * sizeof(float)), 0)
      << "chunked prefill differs from the whole prompt's (NMSE " << nmse(chunked.data(), ref.data(), V)
      << ")";
  const auto a = encode(kPrompts[0]), c = encode(kPrompts[4]);
  ForwardBatch batch = testing::make_batch({a, prompt, c}, {0, 0, 0}, {3, 2, 4});
  add_tables(batch);
  auto out = gpu->forward(batch);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(std::memcmp(out->data_as<const float>() + V, ref.data(), V * sizeof(float)), 0)
      << "the prompt beside two others differs from it alone (NMSE "
      << nmse(out->data_as<const float>() + V, ref.data(), V) << ")";
}

}  // namespace
}  // namespace nanoserve
