// The mixture-of-experts forward on the GPU (Qwen3-MoE, Mixtral):
// - what CudaModel::supports refuses by name (shapes the expert GEMM does
//   not take, gpt-oss's too) and --quantization fp8 over experts;
// - a sequence's logits bitwise the same alone and batched with three
//   others, through a prefill (eager, 132 tokens) and 4 greedy decode steps
//   (CUDA graphs), on dummy weights of a small qwen3moe and mixtral shape;
// - GGUF (stacked ffn_*_exps) and HF (a tensor per expert) folders of the CPU
//   fixtures upload the same device experts, bit for bit;
// - against transformers: scripts/hf_oracle.py's qwen3moe and mixtral
//   folders under NS_HF_ORACLE_DIR (made by scripts/gpu-check), with
//   transformers' experts and weights forced on the forward, and the CPU
//   forward as a second witness.
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
// activations (transformers computes in f32) these tiny models' router
// logits move by more than many of their gaps between the k-th and
// (k+1)-th expert and, through exp, move the experts' weights by a few
// percent (hf_oracle.py's expert_choices): a token that takes another
// expert moves its logits far past the bound, and a weight 5% off does too.
// So the forward takes transformers' experts and weights
// (CudaModel::set_forced_routing) and every position is held to the bound:
// that checks everything but the router's logits and their softmax and
// top-k, which MoeCuda.RoutingMatchesCpu (against moe_route over the same
// logits) and MoeCuda.MatchesReference (the whole layer against moe_ffn_ref)
// check. The planted top-k - 1 must sit far. The CPU forward (f32, which
// routes as transformers does) is the second witness, to the same bound.
// The free-running forward is printed beside: its worst position and where
// its last layer's experts differ from the CPU's.
// The bound: the dense families' 1.5e-3, doubled for the experts' extra roundings.
constexpr double kPositionNmse = 3e-3;

void check_moe_family(const std::string& family, const std::string& dir) {
  SCOPED_TRACE(family);
  std::ifstream jf(dir + "/oracle.json");
  ASSERT_TRUE(jf.good()) << dir << "/oracle.json (scripts/hf_oracle.py make DIR --family " << family << ")";
  const nlohmann::json oracle = nlohmann::json::parse(jf);
  ASSERT_TRUE(oracle.contains("routing_weights") && oracle["routing"].size() == oracle["prompts"].size() &&
              oracle["routing_weights"].size() == oracle["prompts"].size())
      << "oracle.json without the routing and its weights: made by an older scripts/hf_oracle.py";
  const std::vector<float> ref = read_floats(dir + "/" + oracle["logits_file"].get<std::string>());
  const std::vector<float> planted =
      read_floats(dir + "/" + oracle["planted_logits_file"].get<std::string>());
  ModelSpec spec;
  spec.path = dir;
  auto source = open_model_source(spec);
  ASSERT_TRUE(source.ok()) << source.status().to_string();
  ASSERT_GT(source->config.n_experts, 0);
  ThreadPool pool(8);
  auto host = CpuModel::load(source->config, source->tensors, pool);
  ASSERT_TRUE(host.ok()) << host.status().to_string();
  auto gpu = CudaModel::upload((*host)->config(), (*host)->weights(), (*host)->inv_freq());
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  ASSERT_TRUE((*gpu)->allocate(CudaLimits{512, 1, 512, kBlocksPerSeq}, kBlocksPerSeq, kBlockSize).ok());
  const int64_t V = source->config.vocab_size, k = source->config.n_experts_used;
  size_t offset = 0;
  double worst = 0, planted_sum = 0, worst_vs_cpu = 0, cpu_vs_oracle = 0, free_worst = 0;
  int64_t total = 0;
  for (size_t p = 0; p < oracle["prompts"].size(); ++p) {
    const auto prompt = oracle["prompts"][p].get<std::vector<int32_t>>();
    const int64_t n = static_cast<int64_t>(prompt.size());
    ASSERT_LE(offset + static_cast<size_t>(n * V), ref.size());
    ForwardBatch b = batch_of({prompt}, {0}, {0});
    b.logits_rows.clear();
    for (int32_t t = 0; t < n; ++t) b.logits_rows.push_back(t);
    const auto routing = oracle["routing"][p].get<std::vector<std::vector<int32_t>>>();
    ASSERT_TRUE(routing.size() == static_cast<size_t>(source->config.n_layers) &&
                routing[0].size() == static_cast<size_t>(n * k));
    const auto routing_weights = oracle["routing_weights"][p].get<std::vector<std::vector<float>>>();
    ASSERT_TRUE((*gpu)->set_forced_routing(routing, routing_weights).ok());
    auto got = (*gpu)->forward(b);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    const std::vector<float> forced(got->data_as<const float>(), got->data_as<const float>() + n * V);
    ASSERT_TRUE((*gpu)->set_forced_routing({}, {}).ok());
    got = (*gpu)->forward(b);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    const std::vector<int32_t> gpu_ids = (*gpu)->last_expert_ids();
    ASSERT_EQ(static_cast<int64_t>(gpu_ids.size()), n * k);
    CpuKV cache = CpuKV::per_sequence((*host)->config(), 1, n, pool);
    Workspace ws = (*host)->make_workspace(n, n);
    auto cpu = (*host)->forward(b, cache, ws);
    ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
    // Where the free-running forward's last layer took other experts than the CPU's.
    std::string flipped;
    for (int64_t t = 0; t < n; ++t) {
      std::vector<int32_t> a(gpu_ids.begin() + t * k, gpu_ids.begin() + (t + 1) * k);
      std::vector<int32_t> c(ws.moe.routing.ids.begin() + t * k, ws.moe.routing.ids.begin() + (t + 1) * k);
      std::sort(a.begin(), a.end());
      std::sort(c.begin(), c.end());
      if (a != c) flipped += " " + std::to_string(t);
    }
    std::vector<double> errs;
    double free_prompt = 0;
    for (int64_t t = 0; t < n; ++t) {
      const float* g = forced.data() + t * V;
      const float* c = cpu->data_as<const float>() + t * V;
      const float* want = ref.data() + offset + t * V;
      errs.push_back(nmse(g, want, V));
      worst = std::max(worst, errs.back());
      worst_vs_cpu = std::max(worst_vs_cpu, nmse(g, c, V));
      cpu_vs_oracle = std::max(cpu_vs_oracle, nmse(c, want, V));
      free_prompt = std::max(free_prompt, nmse(got->data_as<const float>() + t * V, want, V));
      planted_sum += nmse(g, planted.data() + offset + t * V, V);
      ++total;
    }
    free_worst = std::max(free_worst, free_prompt);
    const auto at = std::max_element(errs.begin(), errs.end());
    std::vector<double> sorted = errs;
    std::nth_element(sorted.begin(), sorted.begin() + n / 2, sorted.end());
    const auto within = std::count_if(errs.begin(), errs.end(), [](double e) { return e <= kPositionNmse; });
    std::printf(
        "%s prompt %zu (%lld tokens): worst NMSE %.2e at position %lld, median %.2e, %lld within the bound; "
        "free-running: worst %.2e, last layer's experts differ from the CPU's at:%s\n",
        family.c_str(), p, static_cast<long long>(n), *at, static_cast<long long>(at - errs.begin()),
        sorted[static_cast<size_t>(n / 2)], static_cast<long long>(within), free_prompt,
        flipped.empty() ? " none" : flipped.c_str());
    offset += static_cast<size_t>(n * V);
  }
  const double planted_ratio = total > 0 ? planted_sum / static_cast<double>(total) / worst : 0.0;
  std::printf(
      "family %s: worst NMSE vs transformers %.2e over %lld of %lld positions, transformers' experts and weights "
      "forced; "
      "planted error (%s) %.1fx farther\n",
      family.c_str(), worst, static_cast<long long>(total), static_cast<long long>(total),
      oracle["planted"].get<std::string>().c_str(), planted_ratio);
  std::printf(
      "family %s: the GPU vs the CPU forward %.2e; the CPU forward vs transformers %.2e; free-running GPU vs "
      "transformers %.2e\n",
      family.c_str(), worst_vs_cpu, cpu_vs_oracle, free_worst);
  EXPECT_LE(worst, kPositionNmse);
  EXPECT_LE(worst_vs_cpu, kPositionNmse);
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
