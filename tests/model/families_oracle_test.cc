// Every architecture family against transformers, in f32.
//
// tests/fixtures/families/<family>/ (made by make_families.py) holds a tiny
// random model of the family as transformers saved it (hf/), the same model
// converted by llama.cpp's convert_hf_to_gguf.py (model.gguf), and
// transformers' f32 logits at every position of three prompts. Both formats
// are loaded as the engine loads them (open_model_source) and run through the
// CPU forward: once as one prefill of each whole prompt, once as a prefill of
// half the prompt followed by one decode step per token.
//
// mistral_window (make_window.py) is the mistral model with a sliding window
// of 5 positions, shorter than every prompt: its logits are transformers'
// with the window, and a window one longer (an off-by-one) must miss them.
//
// Tolerance. The logits spread with a std of about 1.5 (qwen2, tied: 8).
// Measured worst |ours - transformers| (2026-12-01): 6e-6 to 1.1e-5, 4.2e-5
// for qwen2, the same from GGUF and HF. kMaxAbs = 2e-3 sits 50x above that
// and far below what a small error does: the attention scale off by 1%
// gives 0.087 to 0.51, by 3% 0.25 to 1.5, in every family.

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "io/safetensors.h"
#include "model/kv_cpu.h"
#include "model/model_cpu.h"
#include "model/model_source.h"
#include "ops/rope/rope_freqs.h"

namespace nanoserve {
namespace {

constexpr float kMaxAbs = 2e-3f;
constexpr float kInvFreqRel = 1e-6f;

const std::string kDir = NS_SOURCE_DIR "/tests/fixtures/families/";

struct Prompt {
  std::string text;
  std::vector<int32_t> ids;
  std::vector<float> logits;  // [len, vocab]
};

struct Reference {
  std::vector<Prompt> prompts;
  std::vector<float> inv_freq;  // llama3 only
  std::string architecture;
};

Reference load_reference(const std::string& family) {
  Reference ref;
  std::ifstream in(kDir + family + "/reference.json");
  EXPECT_TRUE(in.good()) << family;
  if (!in.good()) return ref;
  const nlohmann::json j = nlohmann::json::parse(in);
  ref.architecture = j["architecture"].get<std::string>();
  if (j.contains("inv_freq")) ref.inv_freq = j["inv_freq"].get<std::vector<float>>();
  auto logits = SafetensorsFile::open(kDir + family + "/reference.safetensors");
  EXPECT_TRUE(logits.ok()) << logits.status().to_string();
  for (size_t i = 0; i < j["prompts"].size(); ++i) {
    Prompt p;
    p.text = j["prompts"][i]["text"].get<std::string>();
    p.ids = j["prompts"][i]["ids"].get<std::vector<int32_t>>();
    if (logits.ok()) {
      auto t = (*logits)->tensor("logits." + std::to_string(i));
      EXPECT_TRUE(t.ok()) << t.status().to_string();
      if (t.ok()) p.logits.assign(t->data_as<const float>(), t->data_as<const float>() + t->numel());
    }
    ref.prompts.push_back(std::move(p));
  }
  return ref;
}

struct Loaded {
  ModelSource source;
  std::unique_ptr<CpuModel> model;
};

Loaded load(const std::string& path, ThreadPool& pool) {
  Loaded l;
  ModelSpec spec;
  spec.path = path;
  auto src = open_model_source(spec);
  EXPECT_TRUE(src.ok()) << path << ": " << src.status().to_string();
  if (!src.ok()) return l;
  l.source = std::move(src).value();
  auto model = CpuModel::load(l.source.config, l.source.tensors, pool);
  EXPECT_TRUE(model.ok()) << path << ": " << model.status().to_string();
  if (model.ok()) l.model = std::move(model).value();
  return l;
}

// Logits of tokens [begin, end) of `ids`, the cache already holding [0, begin).
StatusOr<std::vector<float>> step(const CpuModel& m, CpuKV& cache, Workspace& ws,
                                  const std::vector<int32_t>& ids, int32_t begin, int32_t end) {
  ForwardBatch b;
  for (int32_t t = begin; t < end; ++t) {
    b.tokens.push_back(ids[t]);
    b.positions.push_back(t);
    b.logits_rows.push_back(t - begin);
  }
  b.seq_starts = {0, end - begin};
  b.seq_ids = {0};
  b.context_lens = {end};
  NS_ASSIGN_OR_RETURN(Tensor out, m.forward(b, cache, ws));
  return std::vector<float>(out.data_as<const float>(), out.data_as<const float>() + out.numel());
}

// The worst |ours - transformers| over every position of every prompt, run
// as whole prefills and as half prefill + decode steps.
float worst_logit_error(const CpuModel& m, const Reference& ref) {
  const int64_t V = m.config().vocab_size;
  float worst = 0;
  for (const Prompt& p : ref.prompts) {
    const auto T = static_cast<int32_t>(p.ids.size());
    EXPECT_EQ(static_cast<int64_t>(p.logits.size()), T * V);
    if (static_cast<int64_t>(p.logits.size()) != T * V) return INFINITY;
    for (const bool decode : {false, true}) {
      CpuKV cache = CpuKV::per_sequence(m.config(), 1, T, m.pool());
      Workspace ws = m.make_workspace(T, T);
      std::vector<float> ours;
      const int32_t first = decode ? T / 2 : T;
      auto pre = step(m, cache, ws, p.ids, 0, first);
      EXPECT_TRUE(pre.ok()) << pre.status().to_string();
      if (!pre.ok()) return INFINITY;
      ours = *pre;
      for (int32_t t = first; t < T; ++t) {
        auto one = step(m, cache, ws, p.ids, t, t + 1);
        EXPECT_TRUE(one.ok()) << one.status().to_string();
        if (!one.ok()) return INFINITY;
        ours.insert(ours.end(), one->begin(), one->end());
      }
      for (size_t i = 0; i < ours.size(); ++i) worst = std::max(worst, std::fabs(ours[i] - p.logits[i]));
    }
  }
  return worst;
}

class Families : public ::testing::TestWithParam<const char*> {};

TEST_P(Families, GgufAndHfFolderMatchTransformers) {
  const std::string family = GetParam();
  const Reference ref = load_reference(family);
  ASSERT_EQ(ref.prompts.size(), 3u);
  ThreadPool pool(2);
  for (const std::string& path : {kDir + family + "/model.gguf", kDir + family + "/hf"}) {
    Loaded l = load(path, pool);
    ASSERT_NE(l.model, nullptr) << path;
    // The engine's tokenizer of each format gives transformers' prompt ids.
    for (const Prompt& p : ref.prompts) {
      EXPECT_EQ(l.source.tokenizer->encode(p.text, /*add_special=*/true, /*parse_special=*/true), p.ids)
          << path << ": " << p.text;
    }
    const float worst = worst_logit_error(*l.model, ref);
    std::printf("%s %s (%s): max |logit - transformers| = %.3g over %zu prompts\n", family.c_str(),
                path.ends_with(".gguf") ? "gguf" : "hf", l.model->config().to_string().c_str(), worst,
                ref.prompts.size());
    EXPECT_LE(worst, kMaxAbs) << path;
  }
}

INSTANTIATE_TEST_SUITE_P(Oracle, Families,
                         ::testing::Values("llama3", "mistral", "mistral_window", "qwen2", "qwen3", "phi3"),
                         [](const auto& info) { return std::string(info.param); });

// The window read from each format, and an off-by-one window (6 for 5, or
// none) far outside the tolerance: the fixture's prompts do exercise it.
TEST(Families, SlidingWindowIsReadAndAnOffByOneIsSeen) {
  const Reference ref = load_reference("mistral_window");
  ThreadPool pool(2);
  for (const std::string& path : {kDir + "mistral_window/model.gguf", kDir + "mistral_window/hf"}) {
    ModelSpec spec;
    spec.path = path;
    auto src = open_model_source(spec);
    ASSERT_TRUE(src.ok()) << path << ": " << src.status().to_string();
    EXPECT_EQ(src->config.sliding_window, 5) << path;
    for (const int64_t wrong : {int64_t{6}, int64_t{4}, int64_t{0}}) {
      ModelConfig c = src->config;
      c.sliding_window = wrong;
      auto m = CpuModel::load(c, src->tensors, pool);
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      const float worst = worst_logit_error(**m, ref);
      std::printf("%s with a window of %lld for 5: max |logit - transformers| = %.3g\n", path.c_str(),
                  static_cast<long long>(wrong), worst);
      EXPECT_GT(worst, 10 * kMaxAbs) << path << ": a window of " << wrong << " passes";
    }
  }
}

// The families exercise what they are meant to.
TEST(Families, ConfigsCarryTheirArchitecture) {
  ThreadPool pool(1);
  struct Want {
    const char* family;
    const char* arch;
    bool qkv_bias, qk_norm, fused, tied;
  };
  for (const Want& w :
       {Want{"llama3", "llama", false, false, false, false},
        Want{"mistral", "llama", false, false, false, false},
        Want{"qwen2", "qwen2", true, false, false, true}, Want{"qwen3", "qwen3", false, true, false, false},
        Want{"phi3", "phi3", false, false, true, false}}) {
    for (const std::string& path : {kDir + w.family + "/model.gguf", kDir + w.family + "/hf"}) {
      ModelSpec spec;
      spec.path = path;
      auto src = open_model_source(spec);
      ASSERT_TRUE(src.ok()) << path << ": " << src.status().to_string();
      const ModelConfig& c = src->config;
      EXPECT_EQ(c.arch, w.arch) << path;
      EXPECT_EQ(c.arch_info().qkv_bias, w.qkv_bias) << path;
      EXPECT_EQ(c.arch_info().qk_norm, w.qk_norm) << path;
      EXPECT_EQ(c.arch_info().fused_qkv_gate_up, w.fused) << path;
      EXPECT_EQ(c.tied_embeddings, w.tied) << path;
    }
  }
}

// Llama-3 rope frequencies (rope_scaling llama3) against transformers' own
// inv_freq: from config.json through rope_inv_freqs, and from the GGUF,
// whose converter stores the blend as rope_freqs.weight.
TEST(Families, Llama3RopeFrequenciesMatchTransformers) {
  const Reference ref = load_reference("llama3");
  ASSERT_EQ(ref.inv_freq.size(), 8u);  // head_dim 16
  ThreadPool pool(1);
  for (const std::string& path : {kDir + "llama3/hf", kDir + "llama3/model.gguf"}) {
    Loaded l = load(path, pool);
    ASSERT_NE(l.model, nullptr);
    const std::vector<float>& ours = l.model->inv_freq();
    ASSERT_EQ(ours.size(), ref.inv_freq.size());
    int scaled = 0, blended = 0;
    for (size_t i = 0; i < ours.size(); ++i) {
      const float plain = std::pow(10000.0f, -static_cast<float>(2 * i) / 16.0f);
      EXPECT_NEAR(ours[i], ref.inv_freq[i], kInvFreqRel * ref.inv_freq[i]) << path << " frequency " << i;
      const float ratio = ref.inv_freq[i] / plain;
      scaled += std::fabs(ratio - 1.0f / 8.0f) < 1e-4f;
      blended += ratio > 1.0f / 8.0f + 1e-3f && ratio < 1.0f - 1e-3f;
    }
    // The fixture covers all three regimes: kept, blended, divided by the factor.
    EXPECT_GE(blended, 1) << path;
    EXPECT_GE(scaled, 1) << path;
  }
}

}  // namespace
}  // namespace nanoserve
