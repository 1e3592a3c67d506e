// gpt-oss against transformers, in f32 (the CPU forward):
// tests/fixtures/families/gptoss{,_mxfp4}/ (make_gptoss.py) hold a tiny random
// GptOssForCausalLM (8 experts, top-2, layer 0 sliding over 4 positions,
// layer 1 full, YaRN x32, sinks, swiglu_limit 7 reached by most
// pre-activations) as transformers saved it (hf/: f32 experts, or MXFP4
// blocks and scales), as llama.cpp's converter wrote it (model.gguf: f32 or
// MXFP4 experts), and transformers' logits at every position of three
// prompts (12, 49 and 71 tokens), run here as whole prefills and as half a
// prefill then decode steps.
//
// Each token's 2nd router logit stands at least 0.01 above the 3rd in the
// fixtures, so f32 rounding picks transformers' experts. Figures in docs/moe.md.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "io/tensor_source.h"
#include "model/family_reference.h"
#include "model/kv_cpu.h"
#include "model/model_cpu.h"
#include "model/model_source.h"

namespace nanoserve {
namespace {

constexpr float kMaxAbs = 2e-3f;

const std::string kDir = testing::kFamiliesDir;

using testing::step;
using testing::worst_logit_error;

std::unique_ptr<CpuModel> load_model(const ModelConfig& c, std::shared_ptr<const TensorSource> t,
                                     ThreadPool& pool) {
  auto m = CpuModel::load(c, std::move(t), pool);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(m).value() : nullptr;
}

class GptOss : public ::testing::TestWithParam<const char*> {};

TEST_P(GptOss, GgufAndHfFolderMatchTransformers) {
  const std::string family = GetParam();
  const auto prompts = testing::load_family_prompts(family);
  ASSERT_EQ(prompts.size(), 3u);
  ThreadPool pool(2);
  for (const std::string& path : {kDir + family + "/model.gguf", kDir + family + "/hf"}) {
    ModelSource src = testing::open_family_source(path);
    ASSERT_NE(src.tensors, nullptr) << path;
    for (const auto& p : prompts) {
      EXPECT_EQ(src.tokenizer->encode(p.text, /*add_special=*/true, /*parse_special=*/true), p.ids) << path;
    }
    auto m = load_model(src.config, src.tensors, pool);
    ASSERT_NE(m, nullptr) << path;
    const float worst = worst_logit_error(*m, prompts);
    std::printf("%s %s (%s): max |logit - transformers| = %.3g\n", family.c_str(),
                path.substr(path.rfind('/') + 1).c_str(), m->config().to_string().c_str(), worst);
    EXPECT_LE(worst, kMaxAbs) << path;
  }
}

INSTANTIATE_TEST_SUITE_P(Oracle, GptOss, ::testing::Values("gptoss", "gptoss_mxfp4"),
                         [](const auto& info) { return std::string(info.param); });

TEST(GptOss, ConfigsCarryTheFamily) {
  for (const char* path : {"gptoss/model.gguf", "gptoss/hf", "gptoss_mxfp4/model.gguf", "gptoss_mxfp4/hf"}) {
    const ModelSource src = testing::open_family_source(kDir + path);
    const ModelConfig& c = src.config;
    EXPECT_EQ(c.arch, "gpt-oss") << path;
    EXPECT_EQ(c.n_experts, 8) << path;
    EXPECT_EQ(c.n_experts_used, 2) << path;
    EXPECT_EQ(c.expert_ffn_dim, 64) << path;
    EXPECT_EQ(c.layer_window(0), 4) << path;
    EXPECT_EQ(c.layer_window(1), 0) << path;
    EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kYarn) << path;
    EXPECT_EQ(c.rope_scaling.original_context_length, 64) << path;
    EXPECT_FALSE(c.rope_scaling.truncate) << path;
    EXPECT_NEAR(rope_attention_factor(c.rope_scaling), 0.1 * std::log(32.0) + 1.0, 1e-6) << path;
    EXPECT_FLOAT_EQ(c.swiglu_limit, 7.0f) << path;
    EXPECT_TRUE(c.arch_info().attn_sinks && c.arch_info().oss_experts && c.arch_info().o_bias) << path;
  }
}

// The source's attention sinks at -inf: exp(-inf) = 0, the sink ignored.
class NoSinks final : public TensorSource {
 public:
  explicit NoSinks(std::shared_ptr<const TensorSource> base) : base_(std::move(base)) {}
  std::string describe() const override { return base_->describe() + " (sinks ignored)"; }
  bool contains(std::string_view name) const override { return base_->contains(name); }
  StatusOr<Tensor> tensor(std::string_view name) const override {
    NS_ASSIGN_OR_RETURN(Tensor t, base_->tensor(name));
    if (!name.ends_with("attn_sinks.weight")) return t;
    Tensor out = Tensor::empty(DType::kF32, t.shape());
    for (int64_t i = 0; i < out.numel(); ++i) out.data_as<float>()[i] = -INFINITY;
    return out;
  }

 private:
  std::shared_ptr<const TensorSource> base_;
};

// Each planted error is far outside the tolerance: from the f32 GGUF, and
// from the MXFP4 HF folder.
TEST(GptOss, PlantedErrorsFail) {
  ThreadPool pool(2);
  for (const char* where : {"gptoss/model.gguf", "gptoss_mxfp4/hf"}) {
    const std::string path = where;
    const auto prompts = testing::load_family_prompts(path.substr(0, path.find('/')));
    const ModelSource src = testing::open_family_source(kDir + path);
    ASSERT_NE(src.tensors, nullptr);
    struct Planted {
      const char* what;
      ModelConfig config;
      std::shared_ptr<const TensorSource> tensors;
    };
    std::vector<Planted> planted;
    planted.push_back({"sink ignored", src.config, std::make_shared<NoSinks>(src.tensors)});
    for (const int64_t delta : {-1, 1}) {
      ModelConfig window = src.config;
      window.sliding_window += delta;
      planted.push_back({delta < 0 ? "window one short" : "window one over", window, src.tensors});
      ModelConfig topk = src.config;
      topk.n_experts_used += delta;
      planted.push_back({delta < 0 ? "router top-k one short" : "router top-k one over", topk, src.tensors});
    }
    ModelConfig limit = src.config;
    limit.swiglu_limit = 6.0f;
    planted.push_back({"clamp limit 6 for 7", limit, src.tensors});
    ModelConfig mscale = src.config;
    mscale.rope_scaling.attention_factor = 1.0f;
    planted.push_back({"YaRN attention factor missing", mscale, src.tensors});
    for (const Planted& p : planted) {
      auto m = load_model(p.config, p.tensors, pool);
      ASSERT_NE(m, nullptr) << p.what;
      const float worst = worst_logit_error(*m, prompts);
      std::printf("%s with %s: max |logit - transformers| = %.3g\n", where, p.what, worst);
      EXPECT_GT(worst, 50 * kMaxAbs) << where << ": " << p.what << " passes";
    }
  }
}

// Only the routed experts run, from the MXFP4 GGUF: a decode step runs
// top_k experts of one row in every layer, a prefill T * top_k rows, and a
// short prompt leaves some experts unread.
TEST(GptOss, RunsOnlyTheRoutedExperts) {
  ThreadPool pool(2);
  const ModelSource src = testing::open_family_source(kDir + "gptoss_mxfp4/model.gguf");
  auto m = load_model(src.config, src.tensors, pool);
  ASSERT_NE(m, nullptr);
  const ModelConfig& c = m->config();
  const std::vector<int32_t> ids = {5, 77, 200, 31};
  CpuKV cache = CpuKV::per_sequence(c, 1, 8, pool);
  Workspace ws = m->make_workspace(8, 8);
  step(*m, cache, ws, ids, 0, 3);
  int64_t unread = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    int64_t rows = 0;
    for (int64_t e = 0; e < c.n_experts; ++e) {
      rows += ws.expert_rows[l * c.n_experts + e];
      unread += ws.expert_rows[l * c.n_experts + e] == 0;
    }
    EXPECT_EQ(rows, 3 * c.n_experts_used) << "layer " << l;
  }
  EXPECT_GT(unread, 0);
  std::fill(ws.expert_rows.begin(), ws.expert_rows.end(), 0);
  step(*m, cache, ws, ids, 3, 4);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    int64_t ran = 0;
    for (int64_t e = 0; e < c.n_experts; ++e) ran += ws.expert_rows[l * c.n_experts + e];
    EXPECT_EQ(ran, c.n_experts_used) << "layer " << l;
  }
}

// A sequence's logits, bit for bit, alone and batched with two others
// (one sharing its start), through a prefill past the window and greedy
// decode steps, on the paged cache with the fused read; its greedy tokens
// are then the same too.
TEST(GptOss, SequenceDoesNotDependOnTheBatch) {
  ThreadPool pool(2);
  for (const std::string& path : {kDir + "gptoss/model.gguf", kDir + "gptoss_mxfp4/hf"}) {
    const ModelSource src = testing::open_family_source(path);
    auto m = load_model(src.config, src.tensors, pool);
    ASSERT_NE(m, nullptr);
    const int64_t V = m->config().vocab_size;
    const std::vector<std::vector<int32_t>> prompts = {
        {17, 250, 3, 99, 42, 8, 61}, {17, 250, 3, 99, 42, 8, 61, 300, 5}, {120, 64, 7}};
    auto argmax = [&](const float* row) {
      return static_cast<int32_t>(std::max_element(row, row + V) - row);
    };
    constexpr int kSteps = 4;
    std::vector<std::vector<float>> alone;
    {
      CpuKV cache = CpuKV::per_sequence(m->config(), 3, 32, pool);
      Workspace ws = m->make_workspace(32, 32);
      std::vector<int32_t> seq = prompts[0];
      for (int s = 0; s <= kSteps; ++s) {
        const auto begin = static_cast<int32_t>(s == 0 ? 0 : seq.size() - 1);
        std::vector<float> out = step(*m, cache, ws, seq, begin, static_cast<int32_t>(seq.size()));
        alone.emplace_back(out.end() - V, out.end());
        seq.push_back(argmax(alone.back().data()));
      }
    }
    CpuKVOptions o;
    o.num_blocks = 16;
    o.block_size = 4;
    o.max_context = 32;
    o.max_num_seqs = 3;
    auto cache = CpuKV::create(m->config(), o, pool);
    ASSERT_TRUE(cache.ok()) << cache.status().to_string();
    Workspace ws = m->make_workspace(32, 32);
    std::vector<std::vector<int32_t>> seqs = {prompts[1], prompts[0], prompts[2]};
    for (int s = 0; s <= kSteps; ++s) {
      ForwardBatch b;
      b.seq_starts = {0};
      for (int32_t i = 0; i < 3; ++i) {
        const auto& q = seqs[static_cast<size_t>(i)];
        const auto begin = static_cast<int32_t>(s == 0 ? 0 : q.size() - 1);
        for (auto t = begin; t < static_cast<int32_t>(q.size()); ++t) {
          b.tokens.push_back(q[static_cast<size_t>(t)]);
          b.positions.push_back(t);
          // Sequence i owns blocks [5i, 5i + 5): 20 positions.
          b.slot_mapping.push_back((5 * i + t / 4) * 4 + t % 4);
        }
        b.seq_starts.push_back(static_cast<int32_t>(b.tokens.size()));
        b.logits_rows.push_back(static_cast<int32_t>(b.tokens.size()) - 1);
        b.seq_ids.push_back(i);
        b.context_lens.push_back(static_cast<int32_t>(q.size()));
        for (int32_t k = 0; k < 5; ++k) b.block_tables.push_back(5 * i + k);
      }
      b.max_blocks_per_seq = 5;
      auto out = m->forward(b, **cache, ws);
      ASSERT_TRUE(out.ok()) << out.status().to_string();
      const float* row = out->data_as<const float>() + V;  // sequence 0's
      EXPECT_EQ(
          std::memcmp(row, alone[static_cast<size_t>(s)].data(), static_cast<size_t>(V) * sizeof(float)), 0)
          << path << ": step " << s;
      for (int32_t i = 0; i < 3; ++i)
        seqs[static_cast<size_t>(i)].push_back(argmax(out->data_as<const float>() + i * V));
    }
    std::vector<int32_t> greedy_alone = prompts[0];
    for (const auto& l : alone) greedy_alone.push_back(argmax(l.data()));
    EXPECT_EQ(seqs[1], greedy_alone) << path;
  }
}

}  // namespace
}  // namespace nanoserve
