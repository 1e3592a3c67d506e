// The whole Llama forward on the GPU against the CPU forward of the same
// default model (Q4_1 weights; the GPU holds them dequantized to bf16).
// Without a CUDA device every test reports SKIPPED with the runtime's reason.

#include "model/model_cuda.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/cuda/device_memory.cuh"
#include "core/skip_without_gpu.h"
#include "model/kv_cpu.h"
#include "model/model_fixture.h"
#include "ops/rope/rope_freqs.h"
#include "tokenizer/tokenizer.h"

namespace nanoserve {
namespace {

using testing::argmax;
using testing::nmse;

using testing::default_model;

constexpr int32_t kBlockSize = 16;
constexpr int32_t kBlocksPerSeq = 32;  // 512 positions a sequence
constexpr int32_t kMaxSeqs = 32;
// FP8 (W8A8: E4M3 weights with a scale a channel, E4M3 tokens with a scale a
// token) against bf16 on the default model. E4M3's 3 mantissa bits err by up
// to 6% a weight and a token; this small model (30 layers of 576, from a
// Q4_1 file) carries that to logits NMSE of up to 0.62 at one position (the
// H100, 2026-12-07; 0.26 with bf16 tokens), while a prompt's mean over its
// positions stays lower. The bound is on that mean: it tells a working FP8
// path from a broken one (every scale twice its value: a mean near 1 or
// more); the finer plants are caught against transformers over the same FP8
// weights and token codes (CudaHfOracle) and against the CPU in the same
// arithmetic (HfFp8Cuda).
constexpr double kFp8MeanNmse = 0.2;
// Greedy FP8 decoding may part from bf16 only where FP8's own noise can
// explain it: the bf16 top-2 margin under kFp8NoiseTies standard deviations
// of the difference of two logits' FP8 errors (sqrt 2 x the RMS of the
// FP8 - bf16 logits at that step).
constexpr double kFp8NoiseTies = 3.0;

// Sequence slot s owns blocks [s * kBlocksPerSeq, (s + 1) * kBlocksPerSeq), in order.
void add_tables(ForwardBatch& b) {
  testing::add_slot_tables(b, kBlocksPerSeq, kBlockSize);
}

// Top-1 minus top-2 of a row.
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

class LlamaCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(default_model().model, nullptr) << "default model missing: " << testing::kDefaultModel;
    cpu_ = default_model().model.get();
  }
  std::unique_ptr<CudaModel> make_gpu(bool cuda_graphs = true, bool fp8 = false) {
    const ModelConfig& c = cpu_->config();
    const auto inv_freq = rope_inv_freqs(c.rope_dim, c.rope_theta, c.rope_scaling);
    auto m = CudaModel::upload(c, cpu_->weights(), inv_freq);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    if (!m.ok()) return nullptr;
    if (fp8) {
      const Status q = (*m)->quantize_fp8();
      EXPECT_TRUE(q.ok()) << q.to_string();
    }
    CudaLimits lim{512, kMaxSeqs, kMaxSeqs, kBlocksPerSeq};
    lim.cuda_graphs = cuda_graphs;
    const Status s = (*m)->allocate(lim, kMaxSeqs * kBlocksPerSeq, kBlockSize);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return std::move(m).value();
  }
  std::vector<int32_t> encode(const std::string& text) {
    auto tok = Tokenizer::from_gguf(*default_model().file);
    return (*tok)->encode(text, true, true);
  }
  void check_chunked_and_batched(bool fp8);
  const CpuModel* cpu_ = nullptr;
};

const char* kPrompts[] = {
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "Once upon a time, in a land far away, there lived",
    "The three primary colors are",
    "Water boils at a temperature of",
    "To make a cup of tea, first",
    "The largest planet in the solar system is",
    "In 1969, the first humans to walk on the moon were",
};

// Logits of the whole prompt's every position: GPU (bf16) vs CPU (Q4_1 x Q8 dot products).
TEST_F(LlamaCuda, PrefillLogitsMatchCpuAtEveryPosition) {
  NS_SKIP_WITHOUT_GPU();
  auto gpu = make_gpu();
  ASSERT_NE(gpu, nullptr);
  const int64_t V = cpu_->config().vocab_size;
  for (int p = 0; p < 4; ++p) {
    const auto prompt = encode(kPrompts[p]);
    const int32_t n = static_cast<int32_t>(prompt.size());
    ForwardBatch b = testing::make_batch({prompt}, {0}, {p});
    b.logits_rows.clear();
    for (int32_t t = 0; t < n; ++t) b.logits_rows.push_back(t);
    add_tables(b);
    CpuKV cache = CpuKV::per_sequence(cpu_->config(), kMaxSeqs, 512, cpu_->pool());
    Workspace ws = cpu_->make_workspace(512, 512);
    auto ref = cpu_->forward(b, cache, ws);
    ASSERT_TRUE(ref.ok()) << ref.status().to_string();
    auto got = gpu->forward(b);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    double worst = 0;
    for (int32_t t = 0; t < n; ++t) {
      const float* r = ref->data_as<const float>() + t * V;
      const float* g = got->data_as<const float>() + t * V;
      worst = std::max(worst, nmse(g, r, V));
      ASSERT_TRUE(std::all_of(g, g + V, [](float v) { return std::isfinite(v); })) << "row " << t;
      // Where the CPU's choice is clear, the GPU makes the same one.
      if (margin(r, V) > 1.0f) {
        EXPECT_EQ(testing::argmax(g, V), testing::argmax(r, V)) << "prompt " << p << " row " << t;
      }
      EXPECT_EQ(gpu->argmax()[static_cast<size_t>(t)], testing::argmax(g, V)) << "device argmax, row " << t;
    }
    std::printf("prompt %d: %d positions, worst logits NMSE vs CPU %.2e\n", p, n, worst);
    // bf16 weights and activations against the CPU's Q4_1 x Q8 products,
    // whose activations are quantized to 8 bits a block, by whichever kernel
    // the host's CPU takes: measured 1.0e-3 to 9.3e-3 over these prompts on
    // the H200's host, 1.2e-3 to 2.2e-2 on the H100's (2026-12-05), while the
    // GPU's error against transformers stayed 9.8e-4 on both (the oracle test
    // is the tight check of the GPU path). A wrong rope pairing, norm or
    // scale gives NMSE near 1.
    EXPECT_LT(worst, 4e-2) << "prompt " << p;
  }
}

// Greedy decoding of several prompts on both devices: where they part, the
// CPU's top-2 margin must be small.
TEST_F(LlamaCuda, GreedyAgreesWithCpu) {
  NS_SKIP_WITHOUT_GPU();
  auto gpu = make_gpu();
  ASSERT_NE(gpu, nullptr);
  const int64_t V = cpu_->config().vocab_size;
  int agree = 0, total = 0;
  for (int p = 0; p < 8; ++p) {
    CpuKV cache = CpuKV::per_sequence(cpu_->config(), kMaxSeqs, 512, cpu_->pool());
    Workspace ws = cpu_->make_workspace(512, 1);
    const auto prompt = encode(kPrompts[p]);
    ForwardBatch b = testing::make_batch({prompt}, {0}, {0});
    int32_t pos = static_cast<int32_t>(prompt.size());
    int diverged_at = -1;
    float div_margin = 0;
    constexpr int kSteps = 32;
    for (int i = 0; i < kSteps; ++i) {
      add_tables(b);
      auto ref = cpu_->forward(b, cache, ws);
      ASSERT_TRUE(ref.ok());
      auto got = gpu->forward(b, false);
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      const int32_t c = testing::argmax(ref->data_as<const float>(), V);
      const int32_t g = gpu->argmax()[0];
      if (c != g) {
        diverged_at = i;
        div_margin = margin(ref->data_as<const float>(), V);
        break;
      }
      b = testing::make_batch({{c}}, {pos++}, {0});
    }
    const int same = diverged_at < 0 ? kSteps : diverged_at;
    agree += same;
    total += kSteps;
    std::printf("prompt %d: %2d/%d greedy tokens agree%s", p, same, kSteps, diverged_at < 0 ? "\n" : "");
    if (diverged_at >= 0) {
      std::printf(", then parts where the CPU's top-2 margin is %.3f\n", div_margin);
      EXPECT_LT(div_margin, 0.5f) << "prompt " << p << " parts at step " << diverged_at
                                  << " with a clear margin";
    }
  }
  std::printf("greedy agreement GPU vs CPU: %d/%d tokens\n", agree, total);
}

// Prefill in chunks (as the scheduler's chunked prefill does) gives the
// logits of one whole prefill, and a batch of sequences of uneven lengths
// gives each its logits alone (to the bf16 GEMM's rounding: the GEMM's
// algorithm may change with the row count).
TEST_F(LlamaCuda, ChunkedAndBatchedPrefillMatchWhole) {
  NS_SKIP_WITHOUT_GPU();
  for (const bool fp8 : {false, true}) {
    SCOPED_TRACE(fp8 ? "FP8 weights" : "bf16 weights");
    check_chunked_and_batched(fp8);
  }
}

void LlamaCuda::check_chunked_and_batched(bool fp8) {
  auto gpu = make_gpu(true, fp8);
  ASSERT_NE(gpu, nullptr);
  const int64_t V = cpu_->config().vocab_size;
  std::vector<int32_t> prompt = encode(std::string(kPrompts[2]) + " " + kPrompts[3] + " " + kPrompts[6]);
  const int32_t n = static_cast<int32_t>(prompt.size());
  ForwardBatch whole = testing::make_batch({prompt}, {0}, {0});
  add_tables(whole);
  auto w = gpu->forward(whole);
  ASSERT_TRUE(w.ok());
  std::vector<float> ref(w->data_as<const float>(), w->data_as<const float>() + V);
  // Chunks of 7 into slot 1.
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
  // Every op's order depends on the row alone (linear_cuda, per-row norms and
  // rope, attention split by the row's own context): bitwise equal.
  EXPECT_EQ(std::memcmp(chunked.data(), ref.data(), V * sizeof(float)), 0)
      << "chunked prefill differs from the whole prompt's (NMSE " << nmse(chunked.data(), ref.data(), V)
      << ")";
  // The same prompt in slot 2 beside two others.
  const auto a = encode(kPrompts[0]), c = encode(kPrompts[5]);
  ForwardBatch batch = testing::make_batch({a, prompt, c}, {0, 0, 0}, {3, 2, 4});
  add_tables(batch);
  auto out = gpu->forward(batch);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(std::memcmp(out->data_as<const float>() + V, ref.data(), V * sizeof(float)), 0)
      << "the prompt beside two others differs from it alone (NMSE "
      << nmse(out->data_as<const float>() + V, ref.data(), V) << ")";
}

// FP8 weights (quantize_fp8: the four linears of every layer, one scale per
// output channel, tokens quantized per token) against the bf16 weights they
// came from, logits at every position of four prompts: each prompt's mean
// NMSE over its positions within the bound, and every scale twice its value
// at least 3x the bound away.
TEST_F(LlamaCuda, Fp8LogitsNearBf16AndFarFromAWrongScale) {
  NS_SKIP_WITHOUT_GPU();
  auto bf16 = make_gpu(), fp8 = make_gpu(true, true), planted = make_gpu(true, true);
  ASSERT_NE(bf16, nullptr);
  ASSERT_NE(fp8, nullptr);
  ASSERT_NE(planted, nullptr);
  ASSERT_TRUE(fp8->fp8());
  EXPECT_LT(fp8->weight_bytes(), bf16->weight_bytes());
  for (const CudaLayer& L : planted->weights().layers) {
    for (const LinearWeight* lw : {&L.wqkv, &L.wo, &L.w_gate_up, &L.w_down}) {
      Tensor host = Tensor::empty(DType::kF32, {lw->scale.numel()});
      cuda::copy_to_host(lw->scale, host);
      for (int64_t i = 0; i < host.numel(); ++i) host.data_as<float>()[i] *= 2.0f;
      cuda::copy_to_device(host, lw->scale);
    }
  }
  const int64_t V = cpu_->config().vocab_size;
  double worst_mean = 0, worst = 0, planted_least = 1e30;
  for (int p = 0; p < 4; ++p) {
    const auto prompt = encode(kPrompts[p]);
    const int32_t n = static_cast<int32_t>(prompt.size());
    ForwardBatch b = testing::make_batch({prompt}, {0}, {p});
    b.logits_rows.clear();
    for (int32_t t = 0; t < n; ++t) b.logits_rows.push_back(t);
    add_tables(b);
    std::vector<float> ref, got;
    for (auto* m : {bf16.get(), fp8.get()}) {
      auto out = m->forward(b);
      ASSERT_TRUE(out.ok()) << out.status().to_string();
      (m == bf16.get() ? ref : got).assign(out->data_as<const float>(), out->data_as<const float>() + n * V);
    }
    auto pl = planted->forward(b);
    ASSERT_TRUE(pl.ok());
    double mean = 0, w = 0, pm = 0;
    for (int32_t t = 0; t < n; ++t) {
      const double e = nmse(got.data() + t * V, ref.data() + t * V, V);
      mean += e / n;
      w = std::max(w, e);
      pm += nmse(pl->data_as<const float>() + t * V, ref.data() + t * V, V) / n;
    }
    std::printf(
        "prompt %d: %d positions, FP8 vs bf16 logits NMSE mean %.2e, worst %.2e; scales x 2: mean %.2e\n", p,
        n, mean, w, pm);
    worst_mean = std::max(worst_mean, mean);
    worst = std::max(worst, w);
    planted_least = std::min(planted_least, pm);
  }
  std::printf(
      "FP8 vs bf16: a prompt's mean NMSE up to %.2e (bound %.2e), a position's up to %.2e; "
      "scales x 2 %.1fx the bound\n",
      worst_mean, kFp8MeanNmse, worst, planted_least / kFp8MeanNmse);
  EXPECT_LE(worst_mean, kFp8MeanNmse);
  EXPECT_GT(planted_least, 3 * kFp8MeanNmse) << "every scale twice its value lands within 3x the bound";
}

// Greedy decoding with FP8 weights follows the bf16 weights' until a step
// where the bf16 top-2 margin is within FP8's noise (kFp8NoiseTies).
TEST_F(LlamaCuda, Fp8GreedyAgreesWithBf16UntilANearTie) {
  NS_SKIP_WITHOUT_GPU();
  auto bf16 = make_gpu(), fp8 = make_gpu(true, true);
  ASSERT_NE(bf16, nullptr);
  ASSERT_NE(fp8, nullptr);
  const int64_t V = cpu_->config().vocab_size;
  int agree = 0, total = 0;
  for (int p = 0; p < 8; ++p) {
    const auto prompt = encode(kPrompts[p]);
    ForwardBatch b = testing::make_batch({prompt}, {0}, {p});
    int32_t pos = static_cast<int32_t>(prompt.size());
    constexpr int kSteps = 32;
    int same = kSteps;
    for (int i = 0; i < kSteps; ++i) {
      add_tables(b);
      auto ref = bf16->forward(b);
      ASSERT_TRUE(ref.ok());
      const float* r = ref->data_as<const float>();
      const int32_t want = testing::argmax(r, V);
      auto out = fp8->forward(b);
      ASSERT_TRUE(out.ok());
      const int32_t got = fp8->argmax()[0];
      if (got != want) {
        same = i;
        const float* g = out->data_as<const float>();
        double sum = 0, sq = 0;  // the difference's spread about its mean (a shift moves no argmax)
        for (int64_t v = 0; v < V; ++v) {
          const double d = double{g[v]} - r[v];
          sum += d;
          sq += d * d;
        }
        const double mean = sum / static_cast<double>(V);
        const double sigma = std::sqrt(2.0 * (sq / static_cast<double>(V) - mean * mean));
        const float m = margin(r, V);
        std::printf(
            "prompt %d: FP8 parts from bf16 at step %d, bf16 top-2 margin %.3f, FP8 noise of a "
            "difference %.3f\n",
            p, i, m, sigma);
        EXPECT_LT(m, kFp8NoiseTies * sigma)
            << "prompt " << p << " parts at step " << i << " with a clear margin";
        break;
      }
      b = testing::make_batch({{want}}, {pos++}, {p});
    }
    agree += same;
    total += kSteps;
  }
  std::printf("greedy agreement FP8 vs bf16: %d/%d tokens\n", agree, total);
}

// Decode steps replayed from CUDA graphs give the logits of the same steps
// launched eagerly, bit for bit, including after the attention plan changes.
TEST_F(LlamaCuda, GraphReplayEqualsEagerLaunch) {
  NS_SKIP_WITHOUT_GPU();
  auto graphed = make_gpu(true), eager = make_gpu(false);
  ASSERT_NE(graphed, nullptr);
  ASSERT_NE(eager, nullptr);
  const int64_t V = cpu_->config().vocab_size;
  std::vector<std::vector<int32_t>> prompts = {encode(kPrompts[0]), encode(kPrompts[1]), encode(kPrompts[4])};
  std::vector<int32_t> pos(prompts.size(), 0), last(prompts.size());
  ForwardBatch pre = testing::make_batch(prompts, {0, 0, 0}, {0, 1, 2});
  add_tables(pre);
  for (CudaModel* m : {graphed.get(), eager.get()}) ASSERT_TRUE(m->forward(pre).ok());
  for (size_t i = 0; i < prompts.size(); ++i) {
    pos[i] = static_cast<int32_t>(prompts[i].size());
    last[i] = graphed->argmax()[i];
  }
  // 300 steps: contexts grow past 256, where the attention plan changes (a new key).
  for (int step = 0; step < 300; ++step) {
    ForwardBatch b = testing::make_batch({{last[0]}, {last[1]}, {last[2]}}, pos, {0, 1, 2});
    add_tables(b);
    auto g = graphed->forward(b);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    const std::vector<float> got(g->data_as<const float>(), g->data_as<const float>() + 3 * V);
    auto e = eager->forward(b);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    ASSERT_EQ(std::memcmp(got.data(), e->data_as<const float>(), 3 * V * sizeof(float)), 0)
        << "step " << step << ": the graph's logits differ from the eager launch's";
    for (size_t i = 0; i < 3; ++i) {
      ASSERT_EQ(graphed->argmax()[i], eager->argmax()[i]);
      last[i] = graphed->argmax()[i];
      ++pos[i];
    }
  }
  EXPECT_GT(graphed->graph_captures(), 0);
  EXPECT_EQ(eager->graph_captures(), 0);
  std::printf("graph captures over 300 decode steps: %lld\n",
              static_cast<long long>(graphed->graph_captures()));
}

// The CUDA model's limits refuse what would read or write outside its
// buffers and pools (the engine validates every step against them once).
TEST_F(LlamaCuda, StepLimitsRefuseBadBatches) {
  NS_SKIP_WITHOUT_GPU();
  auto gpu = make_gpu();
  ASSERT_NE(gpu, nullptr);
  const StepLimits lim = gpu->step_limits();
  ForwardBatch b = testing::make_batch({{1, 2, 3}}, {0}, {0});
  add_tables(b);
  b.tokens[1] = static_cast<int32_t>(cpu_->config().vocab_size);
  EXPECT_FALSE(b.validate(lim).ok());
  b.tokens[1] = 2;
  b.block_tables[0] = kMaxSeqs * kBlocksPerSeq;  // outside the pool
  EXPECT_FALSE(b.validate(lim).ok());
  b.block_tables[0] = 0;
  ASSERT_TRUE(b.validate(lim).ok());
  EXPECT_TRUE(gpu->forward(b).ok());
}

}  // namespace
}  // namespace nanoserve
