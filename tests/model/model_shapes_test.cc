// Named model shapes: each validates, the default model's is exactly what its
// GGUF says, and the parameter counts are the published ones.

#include "model/model_shapes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "core/thread_pool.h"
#include "io/gguf.h"
#include "model/config_hf.h"
#include "model/dummy_weights.h"
#include "model/kv_cpu.h"
#include "model/model_cpu.h"
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
  // Gemma 3 12B's text model: the embedding 262208 x 3840 (tied) and 48
  // layers of q 4096 x 3840, k and v 2048 x 3840 each, o, GeGLU 3 x 15360 x
  // 3840, four norms of 3840 and the q/k norms of 256; the final norm.
  EXPECT_EQ(model_param_count(*model_shape("gemma-3-12b")),
            262208LL * 3840 +
                48 * (4096LL * 3840 * 2 + 2 * 2048LL * 3840 + 3 * 15360LL * 3840 + 4 * 3840 + 2 * 256) +
                3840);
}

// gemma-3-12b is what config_from_hf_json reads from its config.json's text
// part (the keys its published config sets; Gemma3TextConfig's defaults for the rest).
TEST(ModelShapes, Gemma3Of12bIsItsConfigJson) {
  const char* json = R"({"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
    "torch_dtype": "bfloat16", "text_config": {"model_type": "gemma3_text", "hidden_size": 3840,
    "intermediate_size": 15360, "num_hidden_layers": 48, "num_attention_heads": 16,
    "num_key_value_heads": 8, "head_dim": 256, "sliding_window": 1024, "query_pre_attn_scalar": 256,
    "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "vocab_size": 262208,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "rope_local_base_freq": 10000.0, "sliding_window_pattern": 6, "final_logit_softcapping": null,
    "attn_logit_softcapping": null}})";
  auto hf = config_from_hf_json(nlohmann::json::parse(json), "gemma-3-12b/config.json");
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  const ModelConfig shape = *model_shape("gemma-3-12b");
  EXPECT_EQ(shape.to_string(), hf->config.to_string());
  EXPECT_EQ(shape.sliding_layers, hf->config.sliding_layers);
  EXPECT_EQ(shape.embed_scale, hf->config.embed_scale);
  EXPECT_EQ(shape.embed_scale, 62.0f);  // sqrt(3840) = 61.97 in bf16
  EXPECT_EQ(shape.query_pre_attn_scalar, hf->config.query_pre_attn_scalar);
  EXPECT_EQ(shape.rope_local_theta, hf->config.rope_local_theta);
  EXPECT_EQ(shape.rope_scaling.type, hf->config.rope_scaling.type);
  EXPECT_EQ(shape.rope_scaling.factor, hf->config.rope_scaling.factor);
  EXPECT_EQ(shape.attn_softcap, 0.0f);
  EXPECT_EQ(shape.final_softcap, 0.0f);
  EXPECT_EQ(shape.tied_embeddings, hf->config.tied_embeddings);
}

// Dummy weights hold every tensor a Gemma 3 forward reads (the sandwich
// norms and q/k norms too): the 12B shape cut to 6 small layers loads on the
// CPU and runs a step to finite logits.
TEST(ModelShapes, Gemma3DummyWeightsRunOnTheCpu) {
  ModelConfig c = *model_shape("gemma-3-12b");
  c.n_layers = 6;
  c.sliding_layers.resize(6);
  c.dim = 128;
  c.ffn_dim = 256;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.vocab_size = 1000;
  ThreadPool pool(1);
  auto m = CpuModel::load(c, std::make_shared<DummyTensors>(c, "gemma-3-12b", 7), pool);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ((*m)->weights().layers[5].post_ffn_norm.numel(), 128);
  CpuKV cache = CpuKV::per_sequence(c, 1, 64, pool);
  Workspace ws = (*m)->make_workspace(64, 1);
  ForwardBatch b = testing::make_batch({{1, 2, 3, 4, 5}}, {0}, {0});
  auto logits = (*m)->forward(b, cache, ws);
  ASSERT_TRUE(logits.ok()) << logits.status().to_string();
  for (int64_t i = 0; i < c.vocab_size; ++i)
    ASSERT_TRUE(std::isfinite(logits->data_as<const float>()[i])) << i;
}

}  // namespace
}  // namespace nanoserve
