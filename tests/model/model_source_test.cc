// Where a model comes from: format detection, the HF folder as a whole
// (config + weights + tokenizer + end ids), and dummy weights.

#include "model/model_source.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "model/dummy_weights.h"
#include "model/kv_cpu.h"
#include "model/model_cpu.h"
#include "model/model_fixture.h"
#include "model/model_shapes.h"
#include "model/tiny_hf_model.h"

namespace nanoserve {
namespace {

namespace fs = std::filesystem;

class ModelSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ns_src_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(ModelSourceTest, DetectsTheFormatFromThePath) {
  EXPECT_EQ(*detect_load_format(testing::kDefaultModel), LoadFormat::kGguf);
  EXPECT_EQ(detect_load_format((dir_ / "missing").string()).status().code(), StatusCode::kNotFound);
  auto no_config = detect_load_format(dir_.string());
  EXPECT_EQ(no_config.status().code(), StatusCode::kNotFound);
  EXPECT_NE(no_config.status().message().find("no config.json"), std::string::npos);
  std::ofstream(dir_ / "config.json") << "{}";
  EXPECT_EQ(*detect_load_format(dir_.string()), LoadFormat::kSafetensors);
  std::ofstream(dir_ / "model.safetensors") << "x";
  EXPECT_EQ(detect_load_format((dir_ / "model.safetensors").string()).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(ModelSourceTest, LoadFormatNames) {
  for (const char* n : {"auto", "gguf", "safetensors", "dummy"})
    EXPECT_EQ(load_format_name(*parse_load_format(n)), std::string(n));
  auto bad = parse_load_format("pt");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--load-format: 'pt'"), std::string::npos);
}

TEST_F(ModelSourceTest, HfFolderGivesConfigTensorsTokenizerAndEndIds) {
  const testing::TinyHf m = testing::make_tiny_hf(true);
  testing::write_tiny_hf_folder(m, dir_);
  ModelSpec spec;
  spec.path = dir_.string();
  auto src = open_model_source(spec);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  EXPECT_EQ(src->format, LoadFormat::kSafetensors);
  EXPECT_EQ(src->config.to_string(), m.config.to_string());
  EXPECT_TRUE(src->tensors->contains("blk.1.attn_k.weight"));
  EXPECT_FALSE(src->tensors->contains("output.weight"));  // tied
  EXPECT_EQ(src->tokenizer->bos_id(), 256);               // from config.json: the tokenizer gives none
  EXPECT_TRUE(src->tokenizer->is_eos(256));               // config.json's eos_token_id [256, 257]
  EXPECT_TRUE(src->tokenizer->is_eos(257));
  EXPECT_EQ(src->tokenizer->encode("hello", false, true), (std::vector<int32_t>{260, 'o'}));

  // generation_config.json adds its own end ids.
  std::ofstream(dir_ / "generation_config.json") << R"({"eos_token_id": [258]})";
  auto again = open_model_source(spec);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_TRUE(again->tokenizer->is_eos(258));

  spec.format = LoadFormat::kGguf;  // a folder is not a GGUF file
  EXPECT_FALSE(open_model_source(spec).ok());
  spec.format = LoadFormat::kSafetensors;
  spec.path = testing::kDefaultModel;  // nor the reverse
  auto wrong = open_model_source(spec);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("is not a folder"), std::string::npos);
}

TEST_F(ModelSourceTest, ShapeWithoutDummyIsRefused) {
  ModelSpec spec;
  spec.path = testing::kDefaultModel;
  spec.model_shape = "llama-3-8b";
  auto src = open_model_source(spec);
  ASSERT_FALSE(src.ok());
  EXPECT_NE(src.status().message().find("needs --load-format dummy"), std::string::npos);
}

TEST(DummyWeights, DeterministicShapedAndTied) {
  const ModelConfig c = *model_shape("llama-3.2-1b");
  DummyTensors a(c, "llama-3.2-1b", 0), same(c, "llama-3.2-1b", 0), other(c, "llama-3.2-1b", 1);
  EXPECT_FALSE(a.contains("output.weight"));
  EXPECT_FALSE(a.contains("blk.16.attn_q.weight"));  // 16 layers: 0..15
  EXPECT_FALSE(a.contains("rope_freqs.weight"));
  auto k = a.tensor("blk.3.attn_k.weight");
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->shape(), (std::vector<int64_t>{512, 2048}));
  const auto* x = k->data_as<const float>();
  auto same_k = same.tensor("blk.3.attn_k.weight");
  ASSERT_TRUE(same_k.ok());
  const auto* y = same_k->data_as<const float>();
  auto z = other.tensor("blk.3.attn_k.weight");
  auto v = a.tensor("blk.3.attn_v.weight");
  const float bound = 1.0f / std::sqrt(2048.0f);
  double mean = 0;
  int64_t same_count = 0, other_same = 0, v_same = 0;
  for (int64_t i = 0; i < k->numel(); ++i) {
    ASSERT_LE(std::fabs(x[i]), bound);
    mean += x[i];
    same_count += x[i] == y[i];
    other_same += x[i] == z->data_as<const float>()[i];
    v_same += x[i] == v->data_as<const float>()[i];
  }
  EXPECT_EQ(same_count, k->numel());
  EXPECT_LT(other_same, k->numel() / 100);
  EXPECT_LT(v_same, k->numel() / 100);
  EXPECT_LT(std::fabs(mean / static_cast<double>(k->numel())), bound * 0.01);
  auto norm = a.tensor("blk.0.ffn_norm.weight");
  ASSERT_TRUE(norm.ok());
  EXPECT_EQ(norm->data_as<const float>()[7], 1.0f);
  EXPECT_EQ(a.tensor("blk.0.attn_bias").status().code(), StatusCode::kNotFound);
}

// The smollm2-135m shape with the default model's tokenizer: it loads and
// gives finite logits; a larger vocabulary than the tokenizer's is fine.
TEST(DummyWeights, SmallShapeRunsOnTheCpu) {
  ModelSpec spec;
  spec.path = testing::kDefaultModel;
  spec.format = LoadFormat::kDummy;
  spec.model_shape = "smollm2-135m";
  spec.tokenizer_path = testing::kDefaultModel;
  auto src = open_model_source(spec);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  EXPECT_EQ(src->tokenizer->n_vocab(), 49152);
  ThreadPool pool(2);
  auto model = CpuModel::load(src->config, src->tensors, pool);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  CpuKV cache = CpuKV::per_sequence((*model)->config(), 1, 8, (*model)->pool());
  Workspace ws = (*model)->make_workspace(8, 1);
  auto logits = (*model)->forward(testing::make_batch({{1, 2, 3, 4}}, {0}, {0}), cache, ws);
  ASSERT_TRUE(logits.ok()) << logits.status().to_string();
  for (int64_t i = 0; i < 49152; ++i) ASSERT_TRUE(std::isfinite(logits->data_as<const float>()[i])) << i;
  EXPECT_EQ(src->tokenizer->decode(std::vector<int32_t>{100000, 120000}), "");  // ids past the tokenizer
}

// The window and expert shapes of the speed table open as dummies, with
// their families' extra tensors: sandwich norms (1), q/k norms, attention
// sinks and biases (0, so that a dummy's routing and attention are those of
// its matrices alone).
TEST(DummyWeights, WindowAndExpertShapesOpenWithTheirExtraTensors) {
  for (const char* shape : {"gemma-3-12b", "gpt-oss-20b", "qwen3-30b-a3b"}) {
    SCOPED_TRACE(shape);
    ModelSpec spec;
    spec.path = testing::kDefaultModel;
    spec.format = LoadFormat::kDummy;
    spec.model_shape = shape;
    spec.tokenizer_path = testing::kDefaultModel;
    auto src = open_model_source(spec);
    ASSERT_TRUE(src.ok()) << src.status().to_string();
    EXPECT_EQ(src->config.sliding_window > 0, std::string(shape) != "qwen3-30b-a3b");
  }
  const ModelConfig g = *model_shape("gemma-3-12b");
  DummyTensors gemma(g, "gemma-3-12b", 0);
  for (const char* name :
       {"blk.0.post_attention_norm.weight", "blk.0.post_ffw_norm.weight", "blk.0.attn_q_norm.weight"}) {
    auto t = gemma.tensor(name);
    ASSERT_TRUE(t.ok()) << name << ": " << t.status().to_string();
    EXPECT_EQ(t->data_as<const float>()[0], 1.0f) << name;
  }
  const ModelConfig o = *model_shape("gpt-oss-20b");
  DummyTensors oss(o, "gpt-oss-20b", 0);
  for (const char* name : {"blk.1.attn_sinks.weight", "blk.1.attn_output.bias", "blk.1.ffn_gate_inp.bias",
                           "blk.1.ffn_down_exps.bias"}) {
    auto t = oss.tensor(name);
    ASSERT_TRUE(t.ok()) << name << ": " << t.status().to_string();
    const float* v = t->data_as<const float>();
    EXPECT_TRUE(std::all_of(v, v + t->numel(), [](float x) { return x == 0.0f; })) << name;
  }
  EXPECT_EQ(oss.tensor("blk.1.ffn_up_exps.bias")->shape(), (std::vector<int64_t>{32, 2880}));
}

TEST(DummyWeights, TooLargeForMemoryIsRefusedWithTheSizes) {
  const ModelConfig c = *model_shape("llama-3-8b");
  const int64_t need = model_param_count(c) * 4;
  if (available_memory_bytes() >= need) GTEST_SKIP() << "this machine has room for 32 GB of f32 weights";
  ThreadPool pool(1);
  auto model = CpuModel::load(c, std::make_shared<DummyTensors>(c, "llama-3-8b", 0), pool);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(model.status().message().find("dummy llama-3-8b (seed 0): the f32 weights need 30633 MiB"),
            std::string::npos)
      << model.status().message();
  EXPECT_NE(model.status().message().find("--model-shape"), std::string::npos);
}

}  // namespace
}  // namespace nanoserve
