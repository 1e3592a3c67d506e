// Gemma's config keys, from config.json and from GGUF metadata, with the
// config classes' and llama.cpp's defaults where a file leaves a key out
// (the fixtures of families_gemma_test.cc cover what transformers 5 and
// llama.cpp's converter write; these cover the older and rarer forms).

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "io/gguf.h"
#include "io/gguf_builder.h"
#include "model/config.h"
#include "model/config_hf.h"

namespace nanoserve {
namespace {

using nlohmann::json;
using testing::GgufBuilder;

// google/gemma-3-4b-it's text part as a Gemma3ForCausalLM config.json of
// transformers 4 (rope_theta, rope_local_base_freq, rope_scaling, the pattern).
json gemma3_4b() {
  return json::parse(R"({
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_size": 2560,
    "intermediate_size": 10240, "num_hidden_layers": 34, "num_attention_heads": 8, "num_key_value_heads": 4,
    "head_dim": 256, "vocab_size": 262208, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
    "sliding_window": 1024, "sliding_window_pattern": 6, "final_logit_softcapping": null,
    "attn_logit_softcapping": null, "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16"})");
}

// google/gemma-2-27b-it's config.json (transformers 4).
json gemma2_27b() {
  return json::parse(R"({
    "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "hidden_size": 4608,
    "intermediate_size": 36864, "num_hidden_layers": 46, "num_attention_heads": 32, "num_key_value_heads": 16,
    "head_dim": 128, "vocab_size": 256000, "query_pre_attn_scalar": 144, "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0, "sliding_window": 4096, "final_logit_softcapping": 30.0,
    "attn_logit_softcapping": 50.0, "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
    "max_position_embeddings": 8192, "torch_dtype": "bfloat16"})");
}

TEST(GemmaConfig, Gemma3FromTransformers4Keys) {
  auto r = config_from_hf_json(gemma3_4b(), "config.json");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const ModelConfig& c = r->config;
  EXPECT_EQ(c.arch, "gemma3");
  EXPECT_EQ(c.sliding_window, 1024);
  ASSERT_EQ(c.sliding_layers.size(), 34u);
  for (int64_t l = 0; l < 34; ++l) EXPECT_EQ(c.sliding_layers[l], (l + 1) % 6 != 0) << l;
  EXPECT_EQ(c.rope_theta, 1e6f);
  EXPECT_EQ(c.rope_local_theta, 1e4f);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_EQ(c.rope_scaling.factor, 8.0f);
  EXPECT_EQ(c.attn_softcap, 0.0f);
  EXPECT_EQ(c.final_softcap, 0.0f);
  EXPECT_EQ(c.attention_scale(), 1.0f / 16.0f);
  // sqrt(2560) = 50.596 rounded to bf16, as transformers' normalizer in bf16.
  EXPECT_EQ(c.embed_scale, 50.5f);
  EXPECT_TRUE(c.tied_embeddings);  // the class default
  EXPECT_TRUE(c.layer_local_rope(0));
  EXPECT_FALSE(c.layer_local_rope(5));
}

// google/gemma-3-4b-it's own config.json: the text_config gives only what
// differs from Gemma3TextConfig's defaults; dtype and token ids are top-level.
TEST(GemmaConfig, MultimodalConfigReadsItsTextConfig) {
  const json j = json::parse(R"({
    "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999, "eoi_token_index": 256000,
    "eos_token_id": [1, 106], "image_token_index": 262144, "mm_tokens_per_image": 256, "model_type": "gemma3",
    "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                    "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                    "sliding_window": 1024},
    "torch_dtype": "bfloat16", "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model"}})");
  auto r = config_from_hf_json(j, "config.json");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto want = config_from_hf_json(gemma3_4b(), "config.json");
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(r->config.to_string(), want->config.to_string());
  EXPECT_EQ(r->config.sliding_layers, want->config.sliding_layers);
  EXPECT_EQ(r->eos_ids, (std::vector<int32_t>{1, 106}));
  EXPECT_EQ(r->config.embed_scale, 50.5f);
}

TEST(GemmaConfig, Gemma2DefaultsAndItsOwnScale) {
  auto r = config_from_hf_json(gemma2_27b(), "config.json");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const ModelConfig& c = r->config;
  EXPECT_EQ(c.arch, "gemma2");
  for (int64_t l = 0; l < 46; ++l) EXPECT_EQ(c.layer_window(l), l % 2 == 0 ? 4096 : 0) << l;
  EXPECT_FALSE(c.layer_local_rope(0));  // one rope for every layer
  EXPECT_EQ(c.attn_softcap, 50.0f);
  EXPECT_EQ(c.final_softcap, 30.0f);
  EXPECT_EQ(c.attention_scale(), static_cast<float>(1.0 / 12.0));  // 144^-0.5, not head_dim's
  EXPECT_EQ(c.embed_scale, 68.0f);                                 // sqrt(4608) = 67.88 in bf16

  json j = gemma2_27b();  // absent: the class defaults 50 and 30; null: none
  j.erase("attn_logit_softcapping");
  j["final_logit_softcapping"] = nullptr;
  j["torch_dtype"] = "float32";
  auto d = config_from_hf_json(j, "config.json");
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->config.attn_softcap, 50.0f);
  EXPECT_EQ(d->config.final_softcap, 0.0f);
  EXPECT_EQ(d->config.embed_scale, std::sqrt(4608.0f));
}

TEST(GemmaConfig, RefusalsNameTheKey) {
  auto refused = [](json j, const std::string& needle) {
    auto r = config_from_hf_json(j, "config.json");
    EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented) << needle;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().to_string();
  };
  json j = gemma2_27b();
  j["hidden_activation"] = "gelu";
  refused(j, "hidden_activation");
  j = gemma3_4b();
  j["use_bidirectional_attention"] = true;
  refused(j, "use_bidirectional_attention");
  j = gemma3_4b();
  j["model_type"] = "gemma3";  // a multimodal checkpoint needs its text_config
  j["architectures"] = {"Gemma3ForConditionalGeneration"};
  EXPECT_EQ(config_from_hf_json(j, "config.json").status().code(), StatusCode::kInvalidArgument);
  auto bad = gemma3_4b();
  bad["layer_types"] = {"sliding_attention"};
  EXPECT_EQ(config_from_hf_json(bad, "config.json").status().code(), StatusCode::kInvalidArgument);
  bad = gemma2_27b();  // named, not allocated for
  bad["num_hidden_layers"] = int64_t{1} << 40;
  auto huge = config_from_hf_json(bad, "config.json");
  EXPECT_EQ(huge.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(huge.status().message().find("n_layers"), std::string::npos) << huge.status().to_string();
}

StatusOr<ModelConfig> from_gguf(const GgufBuilder& b) {
  auto owned = std::make_shared<std::vector<uint8_t>>(b.build());
  NS_ASSIGN_OR_RETURN(auto file, GgufFile::parse(owned->data(), owned->size(), owned));
  NS_ASSIGN_OR_RETURN(ModelConfig c, config_from_gguf(*file));
  NS_RETURN_IF_ERROR(check_gguf_supported(*file, c));
  return c;
}

GgufBuilder gemma_header(const std::string& arch, uint32_t layers, uint32_t dim) {
  GgufBuilder b;
  const std::string p = arch + ".";
  b.kv_string("general.architecture", arch)
      .kv_u32(p + "block_count", layers)
      .kv_u32(p + "embedding_length", dim)
      .kv_u32(p + "feed_forward_length", 4 * dim)
      .kv_u32(p + "context_length", 8192)
      .kv_u32(p + "attention.head_count", 32)
      .kv_u32(p + "attention.head_count_kv", 16)
      .kv_u32(p + "attention.key_length", 128)
      .kv_string_array("tokenizer.ggml.tokens", {"a", "b", "c"});
  return b;
}

// llama.cpp's assumptions for what a GGUF does not say: gemma2's window
// 4096 on every other layer, gemma3's period of 6 and local theta 10000, and
// the attention scale of the 27B models.
TEST(GemmaConfig, GgufDefaultsAreLlamaCpps) {
  auto g2 = from_gguf(gemma_header("gemma2", 46, 4608).kv_f32("gemma2.attn_logit_softcapping", 50.0f));
  ASSERT_TRUE(g2.ok()) << g2.status().to_string();
  EXPECT_EQ(g2->sliding_window, 4096);
  EXPECT_EQ(g2->layer_window(0), 4096);
  EXPECT_EQ(g2->layer_window(1), 0);
  EXPECT_EQ(g2->attn_softcap, 50.0f);
  EXPECT_EQ(g2->query_pre_attn_scalar, 144.0f);  // 27B: dim / n_heads
  EXPECT_EQ(g2->rope_local_theta, 0.0f);

  auto g3 = from_gguf(gemma_header("gemma3", 34, 2560).kv_u32("gemma3.attention.sliding_window", 1024));
  ASSERT_TRUE(g3.ok()) << g3.status().to_string();
  EXPECT_EQ(g3->query_pre_attn_scalar, 128.0f);  // not 27B: head_dim
  EXPECT_EQ(g3->rope_local_theta, 10000.0f);
  for (int64_t l = 0; l < 34; ++l) EXPECT_EQ(g3->layer_window(l), (l + 1) % 6 != 0 ? 1024 : 0) << l;

  auto none = from_gguf(gemma_header("gemma3", 34, 2560));  // no window: no local layers
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->sliding_window, 0);
  EXPECT_FALSE(none->layer_local_rope(0));

  auto period = from_gguf(gemma_header("gemma3", 4, 2560)
                              .kv_u32("gemma3.attention.sliding_window", 512)
                              .kv_u32("gemma3.attention.sliding_window_pattern", 2));
  ASSERT_TRUE(period.ok()) << period.status().to_string();
  EXPECT_EQ(period->sliding_layers, (std::vector<uint8_t>{1, 0, 1, 0}));
  auto bools = from_gguf(gemma_header("gemma3", 3, 2560)
                             .kv_u32("gemma3.attention.sliding_window", 512)
                             .kv("gemma3.attention.sliding_window_pattern", testing::kTArray, [](auto& w) {
                               w.u32(testing::kTBool);
                               w.u64(3);
                               for (int v : {0, 1, 1}) w.u8(static_cast<uint8_t>(v));
                             }));
  ASSERT_TRUE(bools.ok()) << bools.status().to_string();
  EXPECT_EQ(bools->sliding_layers, (std::vector<uint8_t>{0, 1, 1}));

  // Soft-capping stays refused for a family that does not apply it.
  GgufBuilder llama = gemma_header("llama", 2, 4096);
  auto capped = from_gguf(llama.kv_f32("llama.final_logit_softcapping", 30.0f));
  EXPECT_EQ(capped.status().code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace nanoserve
