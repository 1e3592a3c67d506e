// Gemma 2 and Gemma 3 (text) against transformers, in f32.
//
// tests/fixtures/families/gemma{2,3}/ (made by make_gemma.py) hold a tiny
// random model of each as transformers saved it (hf/), the same model
// converted by llama.cpp's convert_hf_to_gguf.py (model.gguf, whose norm
// weights are 1 + w), and transformers' logits (eager attention) at every
// position of three prompts of 12 to 71 tokens. The windows (6 and 5) are
// shorter than every prompt and Gemma 2's soft-caps (attention 6, final 4)
// bite, so each piece of the arithmetic moves the logits: a planted error in
// any of them must miss transformers by far more than the tolerance.
//
// Tolerance. Measured worst |ours - transformers| (2026-12-05): see the
// printed lines; kMaxAbs = 2e-3 is families_oracle_test.cc's.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "io/safetensors.h"
#include "io/tensor_source.h"
#include "model/family_reference.h"
#include "model/kv_cpu.h"
#include "model/model_cpu.h"
#include "model/model_fixture.h"
#include "model/model_source.h"

namespace nanoserve {
namespace {

constexpr float kMaxAbs = 2e-3f;
const std::string kDir = testing::kFamiliesDir;

using Prompt = testing::FamilyPrompt;

std::vector<Prompt> load_prompts(const std::string& family) {
  return testing::load_family_prompts(family);
}

ModelSource open(const std::string& path) {
  return testing::open_family_source(path);
}

std::vector<std::string> paths(const std::string& family) {
  return {kDir + family + "/model.gguf", kDir + family + "/hf"};
}

using testing::step;
using testing::worst_logit_error;

class Gemma : public ::testing::TestWithParam<const char*> {};

TEST_P(Gemma, GgufAndHfFolderMatchTransformers) {
  const std::string family = GetParam();
  const std::vector<Prompt> prompts = load_prompts(family);
  ASSERT_EQ(prompts.size(), 3u);
  ThreadPool pool(2);
  for (const std::string& path : paths(family)) {
    ModelSource src = open(path);
    ASSERT_NE(src.tensors, nullptr) << path;
    for (const Prompt& p : prompts) {
      EXPECT_EQ(src.tokenizer->encode(p.text, /*add_special=*/true, /*parse_special=*/true), p.ids) << path;
    }
    auto m = CpuModel::load(src.config, src.tensors, pool);
    ASSERT_TRUE(m.ok()) << path << ": " << m.status().to_string();
    const float worst = worst_logit_error(**m, prompts);
    std::printf("%s %s (%s): max |logit - transformers| = %.3g\n", family.c_str(),
                path.ends_with(".gguf") ? "gguf" : "hf", (*m)->config().to_string().c_str(), worst);
    EXPECT_LE(worst, kMaxAbs) << path;
  }
}

INSTANTIATE_TEST_SUITE_P(Oracle, Gemma, ::testing::Values("gemma2", "gemma3"),
                         [](const auto& info) { return std::string(info.param); });

// Gemma3ForConditionalGeneration (gemma3_mm: the gemma3 model's text weights
// beside a tiny vision tower, saved by transformers under
// language_model.model.): its text part loads from config.json's text_config,
// skips the vision tensors, gives the text model's weights and transformers'
// logits (the multimodal model's, which make_gemma.py checks equal the text
// model's).
TEST(Gemma, MultimodalCheckpointsRunTheirTextPart) {
  const std::vector<Prompt> prompts = load_prompts("gemma3");  // make_gemma.py checks they are gemma3_mm's
  ASSERT_EQ(prompts.size(), 3u);
  ThreadPool pool(2);
  ModelSource mm = open(kDir + "gemma3_mm/hf"), text = open(kDir + "gemma3/hf");
  ASSERT_NE(mm.tensors, nullptr);
  ASSERT_NE(text.tensors, nullptr);
  EXPECT_EQ(mm.config.to_string(), text.config.to_string());
  for (const Prompt& p : prompts) EXPECT_EQ(mm.tokenizer->encode(p.text, true, true), p.ids);
  auto m = CpuModel::load(mm.config, mm.tensors, pool);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto t = CpuModel::load(text.config, text.tensors, pool);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const LayerWeights &a = (*m)->weights().layers[3], &b = (*t)->weights().layers[3];
  for (auto [x, y] :
       {std::pair{&a.wq, &b.wq}, {&a.q_norm, &b.q_norm}, {&a.post_ffn_norm, &b.post_ffn_norm}}) {
    ASSERT_EQ(x->nbytes(), y->nbytes());
    EXPECT_EQ(std::memcmp(x->data(), y->data(), x->nbytes()), 0);
  }
  const float worst = worst_logit_error(**m, prompts);
  std::printf("gemma3_mm hf: max |logit - transformers| = %.3g\n", worst);
  EXPECT_LE(worst, kMaxAbs);
}

// What each format says about the arithmetic, the same from both.
TEST(Gemma, ConfigsCarryTheFamilysArithmetic) {
  for (const std::string& path : paths("gemma2")) {
    const ModelConfig c = open(path).config;
    EXPECT_EQ(c.arch, "gemma2") << path;
    EXPECT_TRUE(c.arch_info().sandwich_norms && c.arch_info().norm_plus_one &&
                c.arch_info().scaled_embedding);
    EXPECT_FALSE(c.arch_info().qk_norm);
    EXPECT_EQ(std::string(c.arch_info().hidden_act), "gelu_pytorch_tanh");
    EXPECT_EQ(c.sliding_window, 6) << path;
    EXPECT_EQ(c.sliding_layers, (std::vector<uint8_t>{1, 0})) << path;
    EXPECT_EQ(c.attn_softcap, 6.0f) << path;
    EXPECT_EQ(c.final_softcap, 4.0f) << path;
    EXPECT_EQ(c.query_pre_attn_scalar, 16.0f) << path;
    EXPECT_EQ(c.rope_local_theta, 0.0f) << path;
    EXPECT_EQ(c.embed_scale, std::sqrt(32.0f)) << path;
    EXPECT_TRUE(c.tied_embeddings) << path;
  }
  for (const std::string& path : paths("gemma3")) {
    const ModelConfig c = open(path).config;
    EXPECT_EQ(c.arch, "gemma3") << path;
    EXPECT_TRUE(c.arch_info().qk_norm && c.arch_info().sandwich_norms);
    EXPECT_EQ(c.sliding_window, 5) << path;
    EXPECT_EQ(c.sliding_layers, (std::vector<uint8_t>{1, 1, 1, 1, 1, 0})) << path;
    EXPECT_EQ(c.attn_softcap, 0.0f) << path;
    EXPECT_EQ(c.final_softcap, 0.0f) << path;
    EXPECT_EQ(c.query_pre_attn_scalar, 24.0f) << path;
    EXPECT_EQ(c.rope_theta, 1000.0f) << path;
    EXPECT_EQ(c.rope_local_theta, 100.0f) << path;
    EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLinear) << path;
    EXPECT_EQ(c.rope_scaling.factor, 2.0f) << path;
    EXPECT_TRUE(c.tied_embeddings) << path;
    for (int64_t l = 0; l < 6; ++l) EXPECT_EQ(c.layer_window(l), l < 5 ? 5 : 0) << l;
  }
}

// The HF folder's w + 1 (added at load, in f32) and the GGUF's stored 1 + w
// are the same floats, as are every other weight after the rope permutation.
TEST(Gemma, BothFormatsGiveTheForwardIdenticalWeights) {
  ThreadPool pool(1);
  for (const char* family : {"gemma2", "gemma3"}) {
    ModelSource g = open(kDir + family + "/model.gguf"), h = open(kDir + family + "/hf");
    ASSERT_NE(g.tensors, nullptr);
    ASSERT_NE(h.tensors, nullptr);
    auto mg = CpuModel::load(g.config, g.tensors, pool), mh = CpuModel::load(h.config, h.tensors, pool);
    ASSERT_TRUE(mg.ok() && mh.ok());
    auto same = [&](const Tensor& a, const Tensor& b, const std::string& what) {
      ASSERT_EQ(a.shape(), b.shape()) << family << " " << what;
      ASSERT_EQ(a.dtype(), DType::kF32);
      ASSERT_EQ(b.dtype(), DType::kF32);
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0) << family << " " << what;
    };
    const ModelWeights &wg = (*mg)->weights(), &wh = (*mh)->weights();
    same(wg.tok_embd, wh.tok_embd, "token_embd");
    same(wg.output_norm, wh.output_norm, "output_norm");
    int norms_near_one = 0;
    for (size_t l = 0; l < wg.layers.size(); ++l) {
      const LayerWeights &a = wg.layers[l], &b = wh.layers[l];
      const std::string L = "layer " + std::to_string(l) + " ";
      for (auto [x, y, name] : {std::tuple{&a.attn_norm, &b.attn_norm, "attn_norm"},
                                {&a.post_attn_norm, &b.post_attn_norm, "post_attention_norm"},
                                {&a.ffn_norm, &b.ffn_norm, "ffn_norm"},
                                {&a.post_ffn_norm, &b.post_ffn_norm, "post_ffw_norm"},
                                {&a.wq, &b.wq, "attn_q"},
                                {&a.wk, &b.wk, "attn_k"},
                                {&a.wv, &b.wv, "attn_v"},
                                {&a.wo, &b.wo, "attn_output"},
                                {&a.w_gate, &b.w_gate, "ffn_gate"},
                                {&a.w_up, &b.w_up, "ffn_up"},
                                {&a.w_down, &b.w_down, "ffn_down"}}) {
        same(*x, *y, L + name);
      }
      if (std::string(family) == "gemma3") {
        same(a.q_norm, b.q_norm, L + "attn_q_norm");
        same(a.k_norm, b.k_norm, L + "attn_k_norm");
      }
      // The stored w are drawn around 0: the forward's weights are around 1.
      double mean = 0;
      for (int64_t i = 0; i < b.attn_norm.numel(); ++i) mean += b.attn_norm.data_as<const float>()[i];
      norms_near_one += std::fabs(mean / static_cast<double>(b.attn_norm.numel()) - 1.0) < 0.2;
    }
    EXPECT_EQ(norms_near_one, static_cast<int>(wg.layers.size())) << family;
  }
}

// A source whose norm weights lose the 1 that (1 + w) adds: the forward of a
// loader that forgot it.
class NormsWithoutPlusOne final : public TensorSource {
 public:
  explicit NormsWithoutPlusOne(std::shared_ptr<const TensorSource> inner) : inner_(std::move(inner)) {}
  std::string describe() const override { return inner_->describe() + " (norms without + 1)"; }
  bool contains(std::string_view name) const override { return inner_->contains(name); }
  StatusOr<Tensor> tensor(std::string_view name) const override {
    NS_ASSIGN_OR_RETURN(Tensor t, inner_->tensor(name));
    if (!name.ends_with("norm.weight") || t.dtype() != DType::kF32) return t;
    Tensor out = Tensor::empty(DType::kF32, t.shape());
    for (int64_t i = 0; i < t.numel(); ++i) out.data_as<float>()[i] = t.data_as<const float>()[i] - 1.0f;
    return out;
  }

 private:
  std::shared_ptr<const TensorSource> inner_;
};

struct Planted {
  const char* what;
  std::function<void(ModelConfig&)> change;
  bool drop_plus_one = false;
};

void expect_planted_errors_seen(const std::string& family, const std::vector<Planted>& planted) {
  const std::vector<Prompt> prompts = load_prompts(family);
  ThreadPool pool(2);
  for (const std::string& path : paths(family)) {
    const ModelSource src = open(path);
    ASSERT_NE(src.tensors, nullptr);
    for (const Planted& p : planted) {
      ModelConfig c = src.config;
      if (p.change) p.change(c);
      std::shared_ptr<const TensorSource> tensors = src.tensors;
      if (p.drop_plus_one) tensors = std::make_shared<NormsWithoutPlusOne>(tensors);
      auto m = CpuModel::load(c, tensors, pool);
      ASSERT_TRUE(m.ok()) << p.what << ": " << m.status().to_string();
      const float worst = worst_logit_error(**m, prompts);
      std::printf("%s %s, %s: max |logit - transformers| = %.3g\n", family.c_str(),
                  path.ends_with(".gguf") ? "gguf" : "hf", p.what, worst);
      EXPECT_GT(worst, 10 * kMaxAbs) << path << ": " << p.what << " passes";
    }
  }
}

TEST(Gemma, Gemma2PlantedErrorsAreSeen) {
  expect_planted_errors_seen(
      "gemma2",
      {{"no attention soft-cap", [](ModelConfig& c) { c.attn_softcap = 0; }},
       {"no final soft-cap", [](ModelConfig& c) { c.final_softcap = 0; }},
       {"window 7 for 6", [](ModelConfig& c) { c.sliding_window = 7; }},
       {"window 5 for 6", [](ModelConfig& c) { c.sliding_window = 5; }},
       {"every layer local", [](ModelConfig& c) { c.sliding_layers.clear(); }},
       {"(1 + w) forgotten", nullptr, true},
       {"embedding not scaled", [](ModelConfig& c) { c.embed_scale = 1.0f; }},
       {"embedding x sqrt(n_heads * head_dim)", [](ModelConfig& c) { c.embed_scale = 8.0f; }},
       {"attention scale of dim / n_heads", [](ModelConfig& c) { c.query_pre_attn_scalar = 8.0f; }}});
}

TEST(Gemma, Gemma3PlantedErrorsAreSeen) {
  expect_planted_errors_seen(
      "gemma3",
      {{"window 6 for 5", [](ModelConfig& c) { c.sliding_window = 6; }},
       {"window 4 for 5", [](ModelConfig& c) { c.sliding_window = 4; }},
       {"no layer local", [](ModelConfig& c) { c.sliding_window = 0; }},
       {"local layers on the global rope", [](ModelConfig& c) { c.rope_local_theta = 0; }},
       {"global layer unscaled", [](ModelConfig& c) { c.rope_scaling = RopeScaling{}; }},
       {"(1 + w) forgotten", nullptr, true},
       {"embedding not scaled", [](ModelConfig& c) { c.embed_scale = 1.0f; }},
       {"attention scale of dim / n_heads", [](ModelConfig& c) { c.query_pre_attn_scalar = 16.0f; }}});
}

// The paged cache's fused read and its gather give bitwise the same logits
// with Gemma's per-layer windows and soft-caps, and each sequence's logits
// are the same alone or batched with the others (prefills of uneven length
// in one step, then decodes together).
TEST(Gemma, PagedReadsAgreeAndBatchesAreInvariant) {
  ThreadPool pool(2);
  for (const char* family : {"gemma2", "gemma3"}) {
    const std::vector<Prompt> prompts = load_prompts(family);
    const ModelSource src = open(kDir + family + "/hf");
    ASSERT_NE(src.tensors, nullptr);
    auto m = CpuModel::load(src.config, src.tensors, pool);
    ASSERT_TRUE(m.ok());
    const CpuModel& model = **m;
    const int64_t V = model.config().vocab_size;
    constexpr int kDecodes = 6;
    // Logits per sequence: its prefill's last row, then one row per decode
    // step (token 7 + step, whatever was sampled).
    using Rows = std::vector<std::vector<float>>;
    auto run = [&](const std::vector<size_t>& which, bool fused) {
      auto cache = testing::make_paged_cache(model.config(), 4, 128, 3, 128, fused, pool);
      Workspace ws = model.make_workspace(256, 3);
      std::vector<int32_t> seqs, starts;
      std::vector<std::vector<int32_t>> segs;
      for (size_t i : which) {
        seqs.push_back(cache->add_sequence());
        segs.push_back(prompts[i].ids);
        starts.push_back(0);
      }
      Rows rows(which.size());
      for (int s = 0; s <= kDecodes; ++s) {
        auto out = testing::forward_paged(model, *cache, testing::make_batch(segs, starts, seqs), ws);
        EXPECT_TRUE(out.ok()) << out.status().to_string();
        if (!out.ok()) return rows;
        for (size_t b = 0; b < which.size(); ++b) {
          rows[b].insert(rows[b].end(), out->data_as<const float>() + b * V,
                         out->data_as<const float>() + (b + 1) * V);
          starts[b] += static_cast<int32_t>(segs[b].size());
          segs[b] = {7 + s};
        }
      }
      return rows;
    };
    const Rows fused = run({0, 1, 2}, true), gather = run({0, 1, 2}, false);
    for (size_t b = 0; b < 3; ++b) {
      ASSERT_EQ(static_cast<int64_t>(fused[b].size()), (kDecodes + 1) * V);
      ASSERT_EQ(gather[b].size(), fused[b].size());
      EXPECT_EQ(std::memcmp(gather[b].data(), fused[b].data(), fused[b].size() * 4), 0)
          << family << " sequence " << b << ": fused read vs gather";
      const Rows alone = run({b}, true);
      EXPECT_EQ(std::memcmp(alone[0].data(), fused[b].data(), fused[b].size() * 4), 0)
          << family << " sequence " << b << ": alone vs in a batch of three";
    }
    // The prefill rows are transformers' (the batch computes what the oracle checks).
    for (size_t b = 0; b < 3; ++b) {
      const Prompt& p = prompts[b];
      const float* want = p.logits.data() + (p.ids.size() - 1) * V;
      float worst = 0;
      for (int64_t i = 0; i < V; ++i) worst = std::max(worst, std::fabs(fused[b][i] - want[i]));
      EXPECT_LE(worst, kMaxAbs) << family << " sequence " << b;
    }
  }
}

}  // namespace
}  // namespace nanoserve
