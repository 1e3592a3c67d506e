// Named model shapes: each validates, the default model's is exactly what its
// GGUF says, and the parameter counts are the published ones.

#include "model/model_shapes.h"

#include <gtest/gtest.h>

#include "io/gguf.h"
#include "model/model_fixture.h"

namespace nanoserve {
namespace {

TEST(ModelShapes, EachValidates) {
  for (const std::string& name : model_shape_names()) {
    auto c = model_shape(name);
    ASSERT_TRUE(c.ok()) << name;
    EXPECT_TRUE(c->validate().ok()) << name << ": " << c->validate().to_string();
  }
  auto bad = model_shape("llama-4-400b");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("llama-3-8b, llama-3.2-1b, smollm2-135m"), std::string::npos);
}

TEST(ModelShapes, Smollm2IsTheDefaultModel) {
  auto file = GgufFile::open(testing::kDefaultModel);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  auto want = config_from_gguf(**file);
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(model_shape("smollm2-135m")->to_string(), want->to_string());
}

TEST(ModelShapes, Llama3Shapes) {
  const ModelConfig c = *model_shape("llama-3-8b");
  EXPECT_EQ(c.dim, 4096);
  EXPECT_EQ(c.n_layers, 32);
  EXPECT_EQ(c.n_heads, 32);
  EXPECT_EQ(c.n_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.ffn_dim, 14336);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(c.rope_scaling.factor, 8.0f);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, 1.0f);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(c.rope_scaling.original_context_length, 8192);
  EXPECT_EQ(c.norm_eps, 1e-5f);
  EXPECT_FALSE(c.tied_embeddings);
  const ModelConfig s = *model_shape("llama-3.2-1b");
  EXPECT_EQ(s.dim, 2048);
  EXPECT_EQ(s.n_layers, 16);
  EXPECT_EQ(s.ffn_dim, 8192);
  EXPECT_EQ(s.head_dim, 64);
  EXPECT_EQ(s.rope_scaling.factor, 32.0f);
  EXPECT_TRUE(s.tied_embeddings);
}

// Published sizes: Llama-3-8B 8,030,261,248 parameters; Llama-3.2-1B
// 1,235,814,400; SmolLM2-135M 134,515,008.
TEST(ModelShapes, ParameterCounts) {
  EXPECT_EQ(model_param_count(*model_shape("llama-3-8b")), 8030261248);
  EXPECT_EQ(model_param_count(*model_shape("llama-3.2-1b")), 1235814400);
  EXPECT_EQ(model_param_count(*model_shape("smollm2-135m")), 134515008);
  // Qwen3-30B-A3B: 30.5B, every expert counted.
  EXPECT_EQ(model_param_count(*model_shape("qwen3-30b-a3b")), 30532122624);
  // gpt-oss-20b as transformers counts it (num_parameters() of the dequantized
  // model: every bias and sink included), the "21B" of its model card.
  EXPECT_EQ(model_param_count(*model_shape("gpt-oss-20b")), 20914757184);
}

}  // namespace
}  // namespace nanoserve
