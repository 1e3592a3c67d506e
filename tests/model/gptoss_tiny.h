#pragma once
// Test helper: a tiny random gpt-oss whose heads the CUDA attention takes
// (head_dim 64; the committed fixtures' heads of 16 it refuses), for the CUDA
// forward against the CPU forward of the same weights (gptoss_cuda_test.cc)
// and its premise on the CPU (gptoss_tiny_test.cc). The CPU forward is the
// oracle: tests/model/gptoss_oracle_test.cc holds it to transformers.
//
// Shape: 2 layers of 128 (a window of 8 on layer 0, none on layer 1, as
// gpt-oss alternates; the fixtures' layers), 4 heads of 64 over 2 kv heads, 8 experts of
// 128 (top-2), YaRN x32 over an original 64 positions (attention factor
// 1.347), swiglu limit 7, vocab 512.
//
// Weights: DummyTensors' (uniform, fan-in scaled, norms 1) with what makes
// gpt-oss's departures show: sinks uniform in [-1, 3] (the scaled scores
// have a std of about 0.6, so a sink takes a large share of its softmax),
// q/k/v and o biases within +-0.5, the router 4x (logits of std ~2.3) with
// a bias within +-1, expert gate/up weights 16x (pre-activations of std ~9:
// most pass the limit, so the clamp bites) with biases within +-2, down
// biases within +-1. Every matrix but the router is rounded to bf16 values,
// so the device's bf16 copy of it is exact (the router and every vector
// upload as f32). Deterministic: a tensor's values depend on its name and
// the seed alone.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "core/half.h"
#include "core/thread_pool.h"
#include "model/dummy_weights.h"
#include "model/kv_cpu.h"
#include "model/model_cpu.h"
#include "model/model_fixture.h"

namespace nanoserve::testing {

inline ModelConfig tiny_gptoss_config() {
  ModelConfig c;
  c.arch = "gpt-oss";
  c.n_layers = 2;
  c.dim = 128;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 64;
  c.rope_dim = 64;
  c.ffn_dim = 128;
  c.vocab_size = 512;
  c.context_length = 4096;
  c.rope_theta = 150000.0f;
  c.norm_eps = 1e-5f;
  c.rope_scaling.type = RopeScaling::Type::kYarn;
  c.rope_scaling.factor = 32.0f;
  c.rope_scaling.original_context_length = 64;
  c.rope_scaling.truncate = false;
  c.sliding_window = 8;
  c.sliding_layers = {1, 0};
  c.n_experts = 8;
  c.n_experts_used = 2;
  c.expert_ffn_dim = 128;
  return c;
}

class TinyGptOssTensors final : public TensorSource {
 public:
  TinyGptOssTensors(const ModelConfig& config, uint64_t seed)
      : base_(config, "tiny gpt-oss", seed), seed_(seed) {}
  std::string describe() const override { return "tiny gpt-oss (seed " + std::to_string(seed_) + ")"; }
  bool contains(std::string_view name) const override { return base_.contains(name); }
  bool materializes() const override { return true; }
  StatusOr<Tensor> tensor(std::string_view name) const override {
    NS_ASSIGN_OR_RETURN(Tensor t, base_.tensor(name));
    auto ends = [&](std::string_view s) {
      return name.size() >= s.size() && name.substr(name.size() - s.size()) == s;
    };
    float* v = t.data_as<float>();
    const int64_t n = t.numel();
    uint64_t h = 0xCBF29CE484222325ull ^ seed_;  // FNV-1a of the name, from the seed
    for (char ch : name) h = (h ^ static_cast<uint8_t>(ch)) * 0x100000001B3ull;
    std::mt19937 rng(static_cast<uint32_t>(h ^ (h >> 32)));
    auto uniform = [&](float lo, float hi) {
      std::uniform_real_distribution<float> d(lo, hi);
      for (int64_t i = 0; i < n; ++i) v[i] = d(rng);
    };
    if (ends("attn_sinks.weight")) {
      uniform(-1.0f, 3.0f);
    } else if (ends("attn_q.bias") || ends("attn_k.bias") || ends("attn_v.bias") ||
               ends("attn_output.bias")) {
      uniform(-0.5f, 0.5f);
    } else if (ends("ffn_gate_inp.bias")) {
      uniform(-1.0f, 1.0f);
    } else if (ends("ffn_gate_exps.bias") || ends("ffn_up_exps.bias")) {
      uniform(-2.0f, 2.0f);
    } else if (ends("ffn_down_exps.bias")) {
      uniform(-1.0f, 1.0f);
    } else if (ends("ffn_gate_inp.weight")) {
      for (int64_t i = 0; i < n; ++i) v[i] *= 4.0f;
    } else if (t.ndim() >= 2) {
      const float gain = ends("ffn_gate_exps.weight") || ends("ffn_up_exps.weight") ? 16.0f : 1.0f;
      for (int64_t i = 0; i < n; ++i) v[i] = bf16_to_f32(f32_to_bf16(v[i] * gain));
    }
    return t;
  }

 private:
  DummyTensors base_;
  uint64_t seed_;
};

inline std::shared_ptr<const TensorSource> tiny_gptoss_tensors(uint64_t seed = 7) {
  return std::make_shared<TinyGptOssTensors>(tiny_gptoss_config(), seed);
}

// Prompts of random tokens: 1 position, 17, 97 (past the window and YaRN's
// original 64), and 600 (past 512: on the device, a row of several splits).
inline std::vector<std::vector<int32_t>> tiny_gptoss_prompts() {
  std::mt19937 rng(2026);
  std::vector<std::vector<int32_t>> prompts;
  for (int n : {1, 17, 97, 600}) {
    std::vector<int32_t> p;
    for (int i = 0; i < n; ++i) p.push_back(static_cast<int32_t>(rng() % 512));
    prompts.push_back(std::move(p));
  }
  return prompts;
}

// Each position's least router margin over the layers: the k-th largest
// router logit (bias included) minus the (k+1)-th, from the CPU forward. A
// position whose margin is small may route to another expert under another
// rounding (the device's bf16 activations); one whose margin is clear
// routes alike. Layer l's logits come from a model of the first l + 1 layers
// (the workspace holds its last layer's router logits).
inline std::vector<float> router_margins(const TensorSource& tensors, const ModelConfig& config,
                                         const std::vector<int32_t>& prompt, ThreadPool& pool) {
  const int64_t n = static_cast<int64_t>(prompt.size()), E = config.n_experts, k = config.n_experts_used;
  std::vector<float> least(static_cast<size_t>(n), INFINITY);
  auto shared = std::shared_ptr<const TensorSource>(&tensors, [](const TensorSource*) {});
  for (int64_t l = 0; l < config.n_layers; ++l) {
    ModelConfig c = config;
    c.n_layers = l + 1;
    c.sliding_layers.resize(static_cast<size_t>(l + 1));
    auto m = CpuModel::load(c, shared, pool);
    NS_CHECK(m.ok()) << m.status().to_string();
    CpuKV cache = CpuKV::per_sequence(c, 1, n, pool);
    Workspace ws = (*m)->make_workspace(n, 1);
    ForwardBatch b = make_batch({prompt}, {0}, {0});
    NS_CHECK((*m)->forward(b, cache, ws).ok());
    for (int64_t t = 0; t < n; ++t) {
      std::vector<float> row(ws.moe.logits.data_as<const float>() + t * E,
                             ws.moe.logits.data_as<const float>() + (t + 1) * E);
      std::sort(row.begin(), row.end(), std::greater<float>());
      least[static_cast<size_t>(t)] = std::min(least[static_cast<size_t>(t)], row[k - 1] - row[k]);
    }
  }
  return least;
}

}  // namespace nanoserve::testing
