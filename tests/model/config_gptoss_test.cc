// gpt-oss's config keys (config.json as openai/gpt-oss-20b ships it) and the
// YaRN frequencies, beside the refusals that stay by name. The fixtures of
// gptoss_oracle_test.cc cover what transformers 5 and llama.cpp's converter
// write for a tiny model; this is the real one's shape.

#include <gtest/gtest.h>

#include <cmath>

#include "model/config.h"
#include "model/config_hf.h"
#include "model/model_shapes.h"
#include "ops/rope/rope_freqs.h"

namespace nanoserve {
namespace {

using nlohmann::json;

// openai/gpt-oss-20b's config.json (transformers 4 keys: rope_scaling, experts_per_token).
json gpt_oss_20b() {
  json j = json::parse(R"({
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880,
    "intermediate_size": 2880, "num_hidden_layers": 24, "num_attention_heads": 64, "num_key_value_heads": 8,
    "head_dim": 64, "vocab_size": 201088, "num_local_experts": 32, "num_experts_per_tok": 4,
    "experts_per_token": 4, "sliding_window": 128, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
    "rope_theta": 150000, "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
    "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": false},
    "swiglu_limit": 7.0, "attention_bias": true, "attention_dropout": 0.0, "hidden_act": "silu",
    "initial_context_length": 4096, "tie_word_embeddings": false, "router_aux_loss_coef": 0.9,
    "output_router_logits": false, "use_cache": true, "eos_token_id": 200002, "pad_token_id": 199999,
    "torch_dtype": "bfloat16",
    "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                            "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"}})");
  json types = json::array();
  for (int l = 0; l < 24; ++l) types.push_back(l % 2 == 0 ? "sliding_attention" : "full_attention");
  j["layer_types"] = types;
  return j;
}

TEST(GptOssConfig, TwentyBFromItsConfigJson) {
  auto r = config_from_hf_json(gpt_oss_20b());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const ModelConfig& c = r->config;
  EXPECT_TRUE(r->mxfp4);
  EXPECT_EQ(c.arch, "gpt-oss");
  EXPECT_EQ(c.n_experts, 32);
  EXPECT_EQ(c.n_experts_used, 4);
  EXPECT_EQ(c.expert_ffn_dim, 2880);
  EXPECT_EQ(c.swiglu_limit, 7.0f);
  EXPECT_NEAR(c.swiglu_alpha, 1.702f, 1e-7);
  for (int64_t l = 0; l < 24; ++l) EXPECT_EQ(c.layer_window(l), l % 2 == 0 ? 128 : 0) << l;
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kYarn);
  EXPECT_FALSE(c.rope_scaling.truncate);
  EXPECT_EQ(c.rope_scaling.original_context_length, 4096);
  EXPECT_NEAR(rope_attention_factor(c.rope_scaling), 1.3465736, 1e-6);  // 0.1 ln 32 + 1
  // --model-shape gpt-oss-20b is the same model.
  auto shape = model_shape("gpt-oss-20b");
  ASSERT_TRUE(shape.ok());
  for (auto [a, b] : {std::pair{c.n_layers, shape->n_layers},
                      {c.dim, shape->dim},
                      {c.n_heads, shape->n_heads},
                      {c.n_kv_heads, shape->n_kv_heads},
                      {c.head_dim, shape->head_dim},
                      {c.n_experts, shape->n_experts},
                      {c.n_experts_used, shape->n_experts_used},
                      {c.expert_ffn_dim, shape->expert_ffn_dim},
                      {c.vocab_size, shape->vocab_size},
                      {c.sliding_window, shape->sliding_window}})
    EXPECT_EQ(a, b);
  EXPECT_EQ(shape->sliding_layers, c.sliding_layers);
  EXPECT_TRUE(rope_inv_freqs(64, 150000.0f, shape->rope_scaling) ==
              rope_inv_freqs(64, 150000.0f, c.rope_scaling));
  EXPECT_TRUE(shape->validate().ok());
}

// YaRN over gpt-oss-20b's dims: the ramp runs from dim 8.09 to 17.4 (beta 32
// and 1 turns in 4096 positions), so frequencies 0..8 keep theta's, 18..31
// are divided by the factor, and the ones between lie strictly between.
TEST(GptOssConfig, YarnFrequenciesBlendAcrossTheRamp) {
  RopeScaling s;
  s.type = RopeScaling::Type::kYarn;
  s.factor = 32.0f;
  s.original_context_length = 4096;
  s.truncate = false;
  const std::vector<float> inv = rope_inv_freqs(64, 150000.0f, s);
  const std::vector<float> plain = rope_inv_freqs(64, 150000.0f, RopeScaling{});
  ASSERT_EQ(inv.size(), 32u);
  for (size_t i = 0; i < 32; ++i) {
    const float pos = std::pow(150000.0f, static_cast<float>(2 * i) / 64.0f);
    if (i <= 8) {
      EXPECT_EQ(inv[i], plain[i]) << i;
    } else if (i >= 18) {
      EXPECT_EQ(inv[i], 1.0f / (32.0f * pos)) << i;
    } else {
      EXPECT_LT(inv[i], plain[i]) << i;
      EXPECT_GT(inv[i], 1.0f / (32.0f * pos)) << i;
    }
  }
  // Truncated (transformers' default): the ramp's ends are whole dims, 8 and 18.
  s.truncate = true;
  const std::vector<float> t = rope_inv_freqs(64, 150000.0f, s);
  EXPECT_EQ(t[8], plain[8]);
  EXPECT_NE(t[9], inv[9]);
}

TEST(GptOssConfig, RefusedByName) {
  json other = gpt_oss_20b();
  other["rope_scaling"]["mscale"] = 0.707;
  auto r = config_from_hf_json(other);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("mscale"), std::string::npos) << r.status().message();

  json types = gpt_oss_20b();
  types["layer_types"][3] = "chunked_attention";
  r = config_from_hf_json(types);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("layer_types"), std::string::npos) << r.status().message();

  // MXFP4 is gpt-oss's: a Mixtral config asking for it is refused by name.
  json mixtral = json::parse(R"({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
    "hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "vocab_size": 100, "quantization_config": {"quant_method": "mxfp4"}})");
  r = config_from_hf_json(mixtral);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("mxfp4"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace nanoserve
