// The mixture-of-experts forward on the GPU (Qwen3-MoE, Mixtral):
// - what CudaModel::supports refuses by name (shapes the expert GEMM does
//   not take, gpt-oss's too) and --quantization fp8 over experts;
// - a sequence's logits bitwise the same alone and batched with three
//   others, through a prefill (eager, 132 tokens) and 4 greedy decode steps
//   (CUDA graphs), on dummy weights of a small qwen3moe and mixtral shape;
// - GGUF (stacked ffn_*_exps) and HF (a tensor per expert) folders of the CPU
//   fixtures upload the same device experts, bit for bit;
// - against transformers: scripts/hf_oracle.py's qwen3moe and mixtral
//   folders under NS_HF_ORACLE_DIR (made by scripts/gpu-check), over
//   prompts drawn so that no position's routing is near a tie.
// Without a CUDA device the device tests report SKIPPED.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/cuda/device_memory.cuh"
#include "core/skip_without_gpu.h"
#include "core/thread_pool.h"
#include "model/model_cpu.h"
#include "model/model_cuda.h"
#include "model/model_fixture.h"
#include "model/model_shapes.h"
#include "model/model_source.h"
#include "model/runner_cuda.h"
#include "ops/rope/rope_freqs.h"

namespace nanoserve {
namespace {

using testing::nmse;

constexpr int32_t kBlockSize = 16, kBlocksPerSeq = 32;

// A small shape of the family: 3 layers of 512, heads of 64, experts of 128.
ModelConfig small_moe(bool mixtral) {
  ModelConfig c = model_shape("qwen3-30b-a3b").value();
  c.n_layers = 3;
  c.dim = 512;
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.head_dim = 64;
  c.rope_dim = 64;
  c.ffn_dim = 1024;
  c.vocab_size = 4096;
  c.expert_ffn_dim = 128;
  c.n_experts = mixtral ? 8 : 32;
  c.n_experts_used = mixtral ? 2 : 4;
  if (mixtral) c.arch = "llama";
  return c;
}

std::unique_ptr<CudaModel> make_dummy(const ModelConfig& c) {
  auto m = CudaModel::dummy(c, rope_inv_freqs(c.rope_dim, c.rope_theta, c.rope_scaling), 0x5eed);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return nullptr;
  const Status s = (*m)->allocate(CudaLimits{512, 8, 8, kBlocksPerSeq}, 8 * kBlocksPerSeq, kBlockSize);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return std::move(m).value();
}

// Sequence id s owns blocks [s * kBlocksPerSeq, (s + 1) * kBlocksPerSeq).
ForwardBatch batch_of(const std::vector<std::vector<int32_t>>& segs, const std::vector<int32_t>& starts,
                      const std::vector<int32_t>& ids) {
  ForwardBatch b = testing::make_batch(segs, starts, ids);
  b.max_blocks_per_seq = kBlocksPerSeq;
  for (int32_t i = 0; i < b.num_seqs(); ++i) {
    for (int32_t j = 0; j < kBlocksPerSeq; ++j) b.block_tables.push_back(b.seq_ids[i] * kBlocksPerSeq + j);
    for (int32_t t = b.seq_starts[i]; t < b.seq_starts[i + 1]; ++t)
      b.slot_mapping.push_back(b.seq_ids[i] * kBlocksPerSeq * kBlockSize + b.positions[t]);
  }
  return b;
}

TEST(MoeCudaModel, SupportsRefusesByName) {
  EXPECT_TRUE(CudaModel::supports(model_shape("qwen3-30b-a3b").value()).ok());
  EXPECT_TRUE(CudaModel::supports(small_moe(true)).ok());
  // gpt-oss runs (gptoss_cuda_test.cc), its shape the others' limits.
  ModelConfig c = small_moe(false);
  c.arch = "gpt-oss";
  EXPECT_TRUE(CudaModel::supports(c).ok());
  c.expert_ffn_dim = 96;
  const Status oss = CudaModel::supports(c);
  EXPECT_EQ(oss.code(), StatusCode::kUnimplemented);
  EXPECT_NE(oss.message().find("gpt-oss"), std::string::npos) << oss.to_string();
  c = small_moe(false);
  c.expert_ffn_dim = 96;  // not a multiple of 64
  EXPECT_EQ(CudaModel::supports(c).code(), StatusCode::kUnimplemented);
  c = small_moe(false);
  c.n_experts = 1024;
  EXPECT_EQ(CudaModel::supports(c).code(), StatusCode::kUnimplemented);
}

// Until the transformers oracle passes, the runner refuses Qwen3-MoE and
// Mixtral over real weights by name (no device needed to ask), and lets the
// dummy shape through to the device check.
TEST(MoeCudaModel, RunnerRefusesRealWeightsUntilTheOraclePasses) {
  ThreadPool pool(1);
  for (const std::string family : {"qwen3moe", "mixtral"}) {
    SCOPED_TRACE(family);
    ModelSpec spec;
    spec.path = std::string(NS_SOURCE_DIR) + "/tests/fixtures/families/" + family + "/model.gguf";
    auto source = open_model_source(spec);
    ASSERT_TRUE(source.ok()) << source.status().to_string();
    const auto runner = make_cuda_runner(*source, CudaRunnerOptions{}, pool);
    ASSERT_FALSE(runner.ok());
    EXPECT_EQ(runner.status().code(), StatusCode::kUnimplemented) << runner.status().to_string();
    EXPECT_NE(runner.status().message().find("does not yet match transformers"), std::string::npos)
        << runner.status().to_string();
    source->format = LoadFormat::kDummy;
    const auto dummy = make_cuda_runner(*source, CudaRunnerOptions{}, pool);
    if (!dummy.ok()) {
      EXPECT_EQ(dummy.status().message().find("does not yet match transformers"), std::string::npos)
          << dummy.status().to_string();
    }
  }
}

TEST(MoeCudaModel, Fp8IsRefusedOverExperts) {
  NS_SKIP_WITHOUT_GPU();
  const ModelConfig c = small_moe(false);
  auto m = CudaModel::dummy(c, rope_inv_freqs(c.rope_dim, c.rope_theta, c.rope_scaling), 1);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ((*m)->quantize_fp8().code(), StatusCode::kUnimplemented);
}

// Alone, then the four together: each sequence's logits rows bitwise equal,
// at the prefill and at each of 4 greedy steps.
TEST(MoeCudaModel, GreedyAloneEqualsBatched) {
  NS_SKIP_WITHOUT_GPU();
  for (const bool mixtral : {false, true}) {
    SCOPED_TRACE(mixtral ? "mixtral shape" : "qwen3moe shape");
    const ModelConfig c = small_moe(mixtral);
    std::unique_ptr<CudaModel> gpu = make_dummy(c);
    ASSERT_NE(gpu, nullptr);
    const int64_t V = c.vocab_size;
    std::mt19937 rng(42);
    std::vector<std::vector<int32_t>> prompts;
    for (int n : {5, 17, 40, 70}) {
      std::vector<int32_t> p;
      for (int i = 0; i < n; ++i) p.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(V)));
      prompts.push_back(p);
    }
    constexpr int kSteps = 4;
    const int S = static_cast<int>(prompts.size());
    // alone[s][step]: the logits row; tokens[s]: its greedy tokens.
    std::vector<std::vector<std::vector<float>>> alone(static_cast<size_t>(S));
    std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(S));
    for (int s = 0; s < S; ++s) {
      int32_t pos = 0;
      std::vector<int32_t> seg = prompts[static_cast<size_t>(s)];
      for (int step = 0; step <= kSteps; ++step) {
        auto out = gpu->forward(batch_of({seg}, {pos}, {s}));
        ASSERT_TRUE(out.ok()) << out.status().to_string();
        const float* row = out->data_as<const float>();
        ASSERT_TRUE(std::all_of(row, row + V, [](float v) { return std::isfinite(v); }));
        alone[static_cast<size_t>(s)].emplace_back(row, row + V);
        const int32_t next = gpu->argmax()[0];
        EXPECT_EQ(next, testing::argmax(row, V));
        tokens[static_cast<size_t>(s)].push_back(next);
        pos += static_cast<int32_t>(seg.size());
        seg = {next};
      }
    }
    std::vector<int32_t> starts(static_cast<size_t>(S), 0), ids;
    std::vector<std::vector<int32_t>> segs = prompts;
    for (int s = 0; s < S; ++s) ids.push_back(s);
    for (int step = 0; step <= kSteps; ++step) {
      auto out = gpu->forward(batch_of(segs, starts, ids));
      ASSERT_TRUE(out.ok()) << out.status().to_string();
      for (int s = 0; s < S; ++s) {
        const auto& want = alone[static_cast<size_t>(s)][static_cast<size_t>(step)];
        EXPECT_EQ(std::memcmp(out->data_as<const float>() + s * V, want.data(), static_cast<size_t>(V) * 4),
                  0)
            << "sequence " << s << " step " << step << ": batched logits differ from alone";
        starts[static_cast<size_t>(s)] += static_cast<int32_t>(segs[static_cast<size_t>(s)].size());
        segs[static_cast<size_t>(s)] = {tokens[static_cast<size_t>(s)][static_cast<size_t>(step)]};
      }
    }
    std::printf("%s: 4 sequences, prefill + %d greedy steps, batched logits bitwise equal to alone\n",
                mixtral ? "mixtral" : "qwen3moe", kSteps);
  }
}

// The GGUF's stacked experts and the HF folder's per-expert tensors go up
// as the same device bytes (the CPU fixtures: heads too small for the CUDA
// attention, but the upload does not run it).
TEST(MoeCudaModel, GgufAndHfFoldersUploadTheSameExperts) {
  NS_SKIP_WITHOUT_GPU();
  ThreadPool pool(1);
  auto bytes = [](const Tensor& t) {
    const Tensor host = cuda::to_host(t);
    const auto* p = static_cast<const uint8_t*>(host.data());
    return std::vector<uint8_t>(p, p + host.nbytes());
  };
  for (const char* family : {"qwen3moe", "mixtral"}) {
    SCOPED_TRACE(family);
    const std::string base = std::string(NS_SOURCE_DIR) + "/tests/fixtures/families/" + family;
    std::unique_ptr<CudaModel> up[2];
    for (int i = 0; i < 2; ++i) {
      ModelSpec spec;
      spec.path = i == 0 ? base + "/model.gguf" : base + "/hf";
      auto source = open_model_source(spec);
      ASSERT_TRUE(source.ok()) << source.status().to_string();
      auto host = CpuModel::load(source->config, source->tensors, pool);
      ASSERT_TRUE(host.ok()) << host.status().to_string();
      auto gpu = CudaModel::upload((*host)->config(), (*host)->weights(), (*host)->inv_freq());
      ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
      up[i] = std::move(*gpu);
    }
    const CudaWeights &g = up[0]->weights(), &h = up[1]->weights();
    ASSERT_EQ(g.layers.size(), h.layers.size());
    for (size_t l = 0; l < g.layers.size(); ++l) {
      const CudaLayer &a = g.layers[l], &b = h.layers[l];
      ASSERT_TRUE(a.router.defined() && a.exp_gate_up.defined() && a.exp_down.defined());
      EXPECT_EQ(bytes(a.router), bytes(b.router)) << "layer " << l;
      EXPECT_EQ(bytes(a.exp_gate_up), bytes(b.exp_gate_up)) << "layer " << l;
      EXPECT_EQ(bytes(a.exp_down), bytes(b.exp_down)) << "layer " << l;
    }
  }
}

std::vector<float> read_floats(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  std::vector<float> v(static_cast<size_t>(f.tellg()) / 4);
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  return v;
}

// Per position: NMSE of our logits against transformers'. With bf16
// activations (transformers computes in f32) a token whose k-th and
// (k+1)-th router logits nearly tie may take the other expert. That moves
// its own logits far, and every later position's a little, through
// attention. So the oracle's prompts are drawn token by token with every
// position's least gap over the layers at least kClearMargin (many times the
// router logits' bf16 error), and every position is held to the bound. The
// planted top-k - 1 must sit far. (Not passing on the H100 yet, with no
// near-tie anywhere: a defect, docs/moe.md; the runner refuses the two
// families over real weights until it passes.)
// The bound: the dense families' 1.5e-3, doubled for the experts' extra roundings.
constexpr double kPositionNmse = 3e-3;
// hf_oracle.py's ROUTER_MARGIN.
constexpr double kClearMargin = 0.1;

void check_moe_family(const std::string& family, const std::string& dir) {
  SCOPED_TRACE(family);
  std::ifstream jf(dir + "/oracle.json");
  ASSERT_TRUE(jf.good()) << dir << "/oracle.json (scripts/hf_oracle.py make DIR --family " << family << ")";
  const nlohmann::json oracle = nlohmann::json::parse(jf);
  ASSERT_TRUE(oracle.contains("router_margins") &&
              oracle["router_margins"].size() == oracle["prompts"].size())
      << "oracle.json without router_margins: made by an older scripts/hf_oracle.py";
  const std::vector<float> ref = read_floats(dir + "/" + oracle["logits_file"].get<std::string>());
  const std::vector<float> planted =
      read_floats(dir + "/" + oracle["planted_logits_file"].get<std::string>());
  ModelSpec spec;
  spec.path = dir;
  auto source = open_model_source(spec);
  ASSERT_TRUE(source.ok()) << source.status().to_string();
  ASSERT_GT(source->config.n_experts, 0);
  ThreadPool pool(1);
  auto host = CpuModel::load(source->config, source->tensors, pool);
  ASSERT_TRUE(host.ok()) << host.status().to_string();
  auto gpu = CudaModel::upload((*host)->config(), (*host)->weights(), (*host)->inv_freq());
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  ASSERT_TRUE((*gpu)->allocate(CudaLimits{512, 1, 512, kBlocksPerSeq}, kBlocksPerSeq, kBlockSize).ok());
  const int64_t V = source->config.vocab_size;
  size_t offset = 0;
  double worst = 0, planted_sum = 0, least_margin = 1e9;
  int64_t total = 0;
  for (size_t p = 0; p < oracle["prompts"].size(); ++p) {
    const auto prompt = oracle["prompts"][p].get<std::vector<int32_t>>();
    const auto margins = oracle["router_margins"][p].get<std::vector<double>>();
    const int64_t n = static_cast<int64_t>(prompt.size());
    ASSERT_EQ(static_cast<int64_t>(margins.size()), n);
    ASSERT_LE(offset + static_cast<size_t>(n * V), ref.size());
    for (double m : margins) least_margin = std::min(least_margin, m);
    ForwardBatch b = batch_of({prompt}, {0}, {0});
    b.logits_rows.clear();
    for (int32_t t = 0; t < n; ++t) b.logits_rows.push_back(t);
    auto got = (*gpu)->forward(b);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    // Per prompt: the worst position and the median, to tell an error that
    // grows along the prompt (or only in long steps) from one at every token.
    std::vector<double> errs;
    for (int64_t t = 0; t < n; ++t) {
      const float* g = got->data_as<const float>() + t * V;
      errs.push_back(nmse(g, ref.data() + offset + t * V, V));
      worst = std::max(worst, errs.back());
      planted_sum += nmse(g, planted.data() + offset + t * V, V);
      ++total;
    }
    const auto at = std::max_element(errs.begin(), errs.end());
    std::vector<double> sorted = errs;
    std::nth_element(sorted.begin(), sorted.begin() + n / 2, sorted.end());
    const auto within = std::count_if(errs.begin(), errs.end(), [](double e) { return e <= kPositionNmse; });
    std::printf(
        "%s prompt %zu (%lld tokens): worst NMSE %.2e at position %lld, median %.2e, position 0 %.2e, %lld "
        "within the bound\n",
        family.c_str(), p, static_cast<long long>(n), *at, static_cast<long long>(at - errs.begin()),
        sorted[static_cast<size_t>(n / 2)], errs[0], static_cast<long long>(within));
    offset += static_cast<size_t>(n * V);
  }
  const double planted_ratio = total > 0 ? planted_sum / static_cast<double>(total) / worst : 0.0;
  std::printf(
      "family %s: worst NMSE vs transformers %.2e over %lld of %lld positions, every routing gap >= %.2f "
      "(least %.3f); planted error (%s) %.1fx farther\n",
      family.c_str(), worst, static_cast<long long>(total), static_cast<long long>(total), kClearMargin,
      least_margin, oracle["planted"].get<std::string>().c_str(), planted_ratio);
  ASSERT_GE(least_margin, kClearMargin) << "oracle.json's prompts route near a tie: made by an older hf_oracle.py";
  EXPECT_LE(worst, kPositionNmse);
  EXPECT_GT(planted_ratio, 2.5) << "the tolerance would not see the planted error";
}

TEST(MoeCudaHfOracle, QwenMoeAndMixtralMatchTransformers) {
  NS_SKIP_WITHOUT_GPU();
  const char* dir = std::getenv("NS_HF_ORACLE_DIR");
  if (dir == nullptr)
    GTEST_SKIP() << "NS_HF_ORACLE_DIR is not set (scripts/gpu-check makes it with scripts/hf_oracle.py)";
  for (const char* family : {"qwen3moe", "mixtral"})
    check_moe_family(family, std::string(dir) + "/" + family);
}

}  // namespace
}  // namespace nanoserve
