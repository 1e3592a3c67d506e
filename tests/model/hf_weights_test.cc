// The Hugging Face weight map and q/k permutation: a tiny random
// LlamaForCausalLM loaded from its HF folder gives the logits of a plain
// forward that follows HF's modeling_llama (rotate_half RoPE) on the HF-layout
// weights, at every position, for f32 and bf16 checkpoints, tied and untied.

#include "model/hf_weights.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/half.h"
#include "io/safetensors_checkpoint.h"
#include "model/kv_cpu.h"
#include "model/config_hf.h"
#include "model/model_cpu.h"
#include "model/rope_layout.h"
#include "model/tiny_hf_model.h"

namespace nanoserve {
namespace {

namespace fs = std::filesystem;

TEST(HfWeights, NameMap) {
  EXPECT_EQ(*hf_llama_tensor_name("token_embd.weight"), "model.embed_tokens.weight");
  EXPECT_EQ(*hf_llama_tensor_name("output.weight"), "lm_head.weight");
  EXPECT_EQ(*hf_llama_tensor_name("output_norm.weight"), "model.norm.weight");
  EXPECT_EQ(*hf_llama_tensor_name("blk.3.attn_q.weight"), "model.layers.3.self_attn.q_proj.weight");
  EXPECT_EQ(*hf_llama_tensor_name("blk.12.attn_output.weight"), "model.layers.12.self_attn.o_proj.weight");
  EXPECT_EQ(*hf_llama_tensor_name("blk.0.attn_norm.weight"), "model.layers.0.input_layernorm.weight");
  EXPECT_EQ(*hf_llama_tensor_name("blk.0.ffn_norm.weight"), "model.layers.0.post_attention_layernorm.weight");
  EXPECT_EQ(*hf_llama_tensor_name("blk.7.ffn_down.weight"), "model.layers.7.mlp.down_proj.weight");
  for (const char* bad : {"blk.01.attn_q.weight", "blk.-1.attn_q.weight", "blk..attn_q.weight",
                          "blk.3.attn_qq.weight", "rope_freqs.weight", "blk.3", "",
                          "blk.0.attn_q.bias", "blk.0.attn_qkv.weight", "blk.0.attn_q_norm.weight"}) {
    EXPECT_FALSE(hf_llama_tensor_name(bad).has_value()) << bad;
  }
}

// llama.cpp's converter: w.reshape(n_head, 2, hd/2, K).swapaxes(1, 2). For
// head_dim 4 the rows of each head go 0, 2, 1, 3.
TEST(HfWeights, PermuteRopeRowsIsTheConvertersPermutation) {
  Tensor w = Tensor::empty(DType::kF32, {8, 3});
  for (int64_t r = 0; r < 8; ++r) {
    for (int64_t c = 0; c < 3; ++c) w.data_as<float>()[r * 3 + c] = static_cast<float>(10 * r + c);
  }
  Tensor p = permute_rope_rows(w, 2, 4);
  const int expect_rows[] = {0, 2, 1, 3, 4, 6, 5, 7};
  for (int64_t r = 0; r < 8; ++r) {
    for (int64_t c = 0; c < 3; ++c) {
      EXPECT_EQ(p.data_as<float>()[r * 3 + c], static_cast<float>(10 * expect_rows[r] + c)) << r << "," << c;
    }
  }
}

class TinyHfModel : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ns_tinyhf_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Loads the folder as the engine does and returns the logits of every position.
  StatusOr<std::vector<std::vector<float>>> engine_logits(const std::vector<int32_t>& tokens) {
    NS_ASSIGN_OR_RETURN(HfModelConfig hf, config_from_hf_file((dir_ / "config.json").string()));
    NS_ASSIGN_OR_RETURN(auto ckpt, SafetensorsCheckpoint::open(dir_.string()));
    NS_ASSIGN_OR_RETURN(auto src, HfLlamaTensors::create(ckpt, hf.config));
    NS_ASSIGN_OR_RETURN(auto model, CpuModel::load(hf.config, src, pool_));
    return run(*model, tokens);
  }
  static std::vector<std::vector<float>> run(const CpuModel& model, const std::vector<int32_t>& tokens) {
    const auto T = static_cast<int32_t>(tokens.size());
    CpuKV cache = CpuKV::per_sequence(model.config(), 1, T, model.pool());
    Workspace ws = model.make_workspace(T, T);
    ForwardBatch b;
    b.tokens = tokens;
    for (int32_t t = 0; t < T; ++t) b.positions.push_back(t), b.logits_rows.push_back(t);
    b.seq_starts = {0, T};
    b.seq_ids = {0};
    b.context_lens = {T};
    auto out = model.forward(b, cache, ws);
    EXPECT_TRUE(out.ok()) << out.status().to_string();
    std::vector<std::vector<float>> rows;
    if (!out.ok()) return rows;
    const int64_t V = model.config().vocab_size;
    for (int32_t t = 0; t < T; ++t) {
      rows.emplace_back(out->data_as<const float>() + t * V, out->data_as<const float>() + (t + 1) * V);
    }
    return rows;
  }
  static double max_err(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
    double e = 0;
    for (size_t t = 0; t < a.size(); ++t) {
      for (size_t i = 0; i < a[t].size(); ++i)
        e = std::max(e, std::fabs(static_cast<double>(a[t][i]) - b[t][i]));
    }
    return e;
  }
  fs::path dir_;
  ThreadPool pool_{2};
  // 40 positions: past the original context of 32, so every rope band matters.
  std::vector<int32_t> tokens_ = [] {
    std::vector<int32_t> t;
    for (int i = 0; i < 40; ++i) t.push_back((i * 37 + 11) % 300);
    return t;
  }();
};

TEST_F(TinyHfModel, F32MatchesHfReferenceAtEveryPosition) {
  for (bool tied : {false, true}) {
    const testing::TinyHf m = testing::make_tiny_hf(tied);
    testing::write_tiny_hf_folder(m, dir_);
    auto got = engine_logits(tokens_);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    const auto want = testing::hf_reference_logits(m, tokens_);
    ASSERT_EQ(got->size(), want.size());
    EXPECT_LT(max_err(*got, want), 2e-4) << "tied " << tied;  // logits are O(1..10)
    fs::remove_all(dir_);
  }
}

TEST_F(TinyHfModel, Bf16MatchesHfReferenceForTheSameRoundedWeights) {
  testing::TinyHf m = testing::make_tiny_hf(false, 5);
  for (auto& [name, v] : m.w) {
    for (float& f : v) f = bf16_to_f32(f32_to_bf16(f));  // the checkpoint holds exactly these
  }
  testing::write_tiny_hf_folder(m, dir_, "BF16");
  auto got = engine_logits(tokens_);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_LT(max_err(*got, testing::hf_reference_logits(m, tokens_)), 2e-4);
}

// Negative control: the same weights without the q/k permutation give other
// logits, so the test above would catch a loader that forgot it.
TEST_F(TinyHfModel, WithoutThePermutationTheLogitsDiffer) {
  const testing::TinyHf m = testing::make_tiny_hf(false);
  testing::write_tiny_hf_folder(m, dir_);
  auto ckpt = SafetensorsCheckpoint::open(dir_.string());
  ASSERT_TRUE(ckpt.ok());
  struct Unpermuted final : TensorSource {
    std::shared_ptr<const SafetensorsCheckpoint> c;
    std::string describe() const override { return "unpermuted"; }
    bool contains(std::string_view n) const override {
      auto hf = hf_llama_tensor_name(n);
      return hf && c->find_tensor(*hf) != nullptr;
    }
    StatusOr<Tensor> tensor(std::string_view n) const override { return c->tensor(*hf_llama_tensor_name(n)); }
  };
  auto src = std::make_shared<Unpermuted>();
  src->c = *ckpt;
  auto model = CpuModel::load(m.config, src, pool_);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_GT(max_err(run(**model, tokens_), testing::hf_reference_logits(m, tokens_)), 1e-2);
}

TEST_F(TinyHfModel, UnusedTensorsAndMissingLmHeadAreRefused) {
  testing::TinyHf m = testing::make_tiny_hf(false);
  m.w["model.layers.0.self_attn.q_proj.bias"] = std::vector<float>(64, 0.0f);
  m.shape["model.layers.0.self_attn.q_proj.bias"] = {64};
  testing::write_tiny_hf_folder(m, dir_);
  auto got = engine_logits(tokens_);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(
      got.status().message().find("'model.layers.0.self_attn.q_proj.bias' is not one the llama forward"),
      std::string::npos)
      << got.status().message();

  fs::remove_all(dir_);
  m = testing::make_tiny_hf(false);
  m.w.erase("lm_head.weight");
  m.shape.erase("lm_head.weight");
  testing::write_tiny_hf_folder(m, dir_);  // config.json still says tie_word_embeddings false
  got = engine_logits(tokens_);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kNotFound);
  EXPECT_NE(got.status().message().find("no tensor 'lm_head.weight'"), std::string::npos)
      << got.status().message();
}

TEST_F(TinyHfModel, WrongShapeNamesTheTensor) {
  testing::TinyHf m = testing::make_tiny_hf(false);
  m.w["model.layers.1.mlp.up_proj.weight"].resize(95 * 64);
  m.shape["model.layers.1.mlp.up_proj.weight"] = {95, 64};
  testing::write_tiny_hf_folder(m, dir_);
  auto got = engine_logits(tokens_);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(
      got.status().message().find(
          "tensor 'model.layers.1.mlp.up_proj.weight (blk.1.ffn_up.weight)' has shape [95, 64], the config "
          "implies [96, 64]"),
      std::string::npos)
      << got.status().message();
}

}  // namespace
}  // namespace nanoserve
