// config.json into ModelConfig: the default model's HF config gives the
// ModelConfig its GGUF gives, Llama-3.1 rope scaling is read, and every
// unsupported architecture or feature is refused by name.

#include "model/config_hf.h"

#include <gtest/gtest.h>

#include "io/gguf.h"
#include "model/model_fixture.h"

namespace nanoserve {
namespace {

using nlohmann::json;

// The default model's config.json, as transformers writes it from the GGUF
// (tests/fixtures/hf/make_hf_folder.py).
json smollm2_config() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 1, "eos_token_id": 2, "head_dim": 64, "hidden_act": "silu", "hidden_size": 576,
    "initializer_range": 0.02, "intermediate_size": 1536, "max_position_embeddings": 8192,
    "mlp_bias": false, "model_type": "llama", "num_attention_heads": 9, "num_hidden_layers": 30,
    "num_key_value_heads": 3, "pad_token_id": 2, "pretraining_tp": 1, "rms_norm_eps": 9.999999747378752e-06,
    "rope_scaling": null, "rope_theta": 100000.0, "tie_word_embeddings": true, "torch_dtype": "float32",
    "use_cache": true, "vocab_size": 49152})");
}

// Meta-Llama-3.1-8B-Instruct's config.json.
json llama31_config() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
    "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})");
}

TEST(ConfigHf, DefaultModelMatchesItsGguf) {
  auto file = GgufFile::open(testing::kDefaultModel);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  auto want = config_from_gguf(**file);
  ASSERT_TRUE(want.ok());
  auto got = config_from_hf_json(smollm2_config());
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->config.to_string(), want->to_string());
  EXPECT_EQ(got->config.norm_eps, want->norm_eps);
  EXPECT_EQ(got->bos_id, 1);
  EXPECT_EQ(got->eos_ids, std::vector<int32_t>{2});
}

TEST(ConfigHf, Llama31RopeScalingAndEosList) {
  auto got = config_from_hf_json(llama31_config());
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  const ModelConfig& c = got->config;
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.n_kv_heads, 8);
  EXPECT_EQ(c.context_length, 131072);
  EXPECT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(c.rope_scaling.factor, 8.0f);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, 1.0f);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(c.rope_scaling.original_context_length, 8192);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_EQ(got->eos_ids, (std::vector<int32_t>{128001, 128008, 128009}));
  EXPECT_EQ(got->torch_dtype, "bfloat16");
}

// transformers >= 5 writes the theta and the scaling as one object,
// rope_parameters; the same model must give the same config either way.
TEST(ConfigHf, RopeParametersOfTransformers5) {
  json j = llama31_config();
  j["rope_parameters"] = j["rope_scaling"];
  j["rope_parameters"]["rope_theta"] = 500000.0;
  j.erase("rope_scaling");
  j.erase("rope_theta");
  auto got = config_from_hf_json(j);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  auto want = config_from_hf_json(llama31_config());
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(got->config.to_string(), want->config.to_string());
  j["rope_parameters"] = json{{"rope_type", "default"}, {"rope_theta", 250000.0}};
  got = config_from_hf_json(j);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->config.rope_theta, 250000.0f);
  EXPECT_EQ(got->config.rope_scaling.type, RopeScaling::Type::kNone);
}

TEST(ConfigHf, DefaultsFollowLlamaConfig) {
  json j = {{"model_type", "llama"},    {"hidden_size", 64},        {"num_hidden_layers", 2},
            {"num_attention_heads", 4}, {"intermediate_size", 128}, {"vocab_size", 100}};
  auto got = config_from_hf_json(j);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->config.n_kv_heads, 4);
  EXPECT_EQ(got->config.head_dim, 16);
  EXPECT_EQ(got->config.context_length, 2048);
  EXPECT_EQ(got->config.rope_theta, 10000.0f);
  EXPECT_EQ(got->config.norm_eps, 1e-6f);
  EXPECT_FALSE(got->config.tied_embeddings);
  EXPECT_EQ(got->config.rope_scaling.type, RopeScaling::Type::kNone);
}

// The experts of each MoE class, with the config classes' defaults: Qwen3-MoE
// keeps its dense intermediate_size apart and normalises only with
// norm_topk_prob (default false); Mixtral's experts are intermediate_size wide
// and always normalised.
TEST(ConfigHf, ExpertsOfQwen3MoeAndMixtral) {
  json q = {{"architectures", {"Qwen3MoeForCausalLM"}},
            {"model_type", "qwen3_moe"},
            {"hidden_size", 64},
            {"num_hidden_layers", 2},
            {"num_attention_heads", 4},
            {"intermediate_size", 128},
            {"vocab_size", 100},
            {"num_experts", 16},
            {"num_experts_per_tok", 4},
            {"moe_intermediate_size", 32}};
  auto got = config_from_hf_json(q);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->config.arch, "qwen3moe");
  EXPECT_EQ(got->config.n_experts, 16);
  EXPECT_EQ(got->config.n_experts_used, 4);
  EXPECT_EQ(got->config.expert_ffn_dim, 32);
  EXPECT_EQ(got->config.ffn_dim, 128);
  EXPECT_FALSE(got->config.expert_weights_norm);
  q["norm_topk_prob"] = true;
  q.erase("num_experts");
  q["num_local_experts"] = 16;  // transformers 5 writes this name
  got = config_from_hf_json(q);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_TRUE(got->config.expert_weights_norm);
  EXPECT_EQ(got->config.n_experts, 16);

  json m = {{"architectures", {"MixtralForCausalLM"}},
            {"model_type", "mixtral"},
            {"hidden_size", 64},
            {"num_hidden_layers", 2},
            {"num_attention_heads", 4},
            {"intermediate_size", 128},
            {"vocab_size", 100},
            {"num_local_experts", 8},
            {"num_experts_per_tok", 2}};
  got = config_from_hf_json(m);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->config.arch, "llama");
  EXPECT_EQ(got->config.n_experts, 8);
  EXPECT_EQ(got->config.n_experts_used, 2);
  EXPECT_EQ(got->config.expert_ffn_dim, 128);
  EXPECT_TRUE(got->config.expert_weights_norm);
  EXPECT_EQ(got->config.norm_eps, 1e-5f);
  m.erase("num_local_experts");
  m.erase("num_experts_per_tok");  // MixtralConfig's defaults: 8, 2
  got = config_from_hf_json(m);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->config.n_experts, 8);
  EXPECT_EQ(got->config.n_experts_used, 2);
}

// Mistral's window: below the context it is read (every layer's); at or
// above it, or null or false, there is none.
TEST(ConfigHf, SlidingWindowIsReadBelowTheContext) {
  json j = {{"architectures", {"MistralForCausalLM"}}, {"model_type", "mistral"}, {"hidden_size", 64},
            {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"intermediate_size", 128}, {"vocab_size", 100},
            {"max_position_embeddings", 32768}, {"sliding_window", 4096}};
  auto got = config_from_hf_json(j);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->config.sliding_window, 4096);
  for (json none : {json(32768), json(nullptr), json(false)}) {
    j["sliding_window"] = none;
    got = config_from_hf_json(j);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(got->config.sliding_window, 0) << none;
  }
}

struct Refusal {
  const char* what;
  std::function<void(json&)> edit;
  StatusCode code;
  const char* needle;
};

TEST(ConfigHf, RefusesByName) {
  const Refusal cases[] = {
      {"qwen2_moe",
       [](json& j) {
         j["architectures"] = {"Qwen2MoeForCausalLM"};
         j["model_type"] = "qwen2_moe";
       },
       StatusCode::kUnimplemented,
       "architecture 'Qwen2MoeForCausalLM' (model_type 'qwen2_moe') is not supported"},
      {"qwen3_moe dense layers",
       [](json& j) {
         j["architectures"] = {"Qwen3MoeForCausalLM"};
         j["model_type"] = "qwen3_moe";
         j["num_experts"] = 8;
         j["num_experts_per_tok"] = 2;
         j["moe_intermediate_size"] = 32;
         j["mlp_only_layers"] = {0};
       },
       StatusCode::kUnimplemented, "mlp_only_layers [0]"},
      {"qwen3_moe sparse step",
       [](json& j) {
         j["architectures"] = {"Qwen3MoeForCausalLM"};
         j["model_type"] = "qwen3_moe";
         j["num_experts"] = 8;
         j["num_experts_per_tok"] = 2;
         j["moe_intermediate_size"] = 32;
         j["decoder_sparse_step"] = 2;
       },
       StatusCode::kUnimplemented, "decoder_sparse_step = 2"},
      {"mixtral top-k over the experts",
       [](json& j) {
         j["architectures"] = {"MixtralForCausalLM"};
         j["model_type"] = "mixtral";
         j["num_local_experts"] = 4;
         j["num_experts_per_tok"] = 5;
       },
       StatusCode::kInvalidArgument, "'num_experts_per_tok': expected 1 to 4"},
      {"mixtral no experts",
       [](json& j) {
         j["architectures"] = {"MixtralForCausalLM"};
         j["model_type"] = "mixtral";
         j["num_local_experts"] = 0;
       },
       StatusCode::kInvalidArgument, "'num_local_experts': expected at least 1"},
      {"qwen2 class for llama type", [](json& j) { j["architectures"] = {"Qwen2ForCausalLM"}; },
       StatusCode::kUnimplemented, "model_type 'llama'"},
      {"qwen2 window",
       [](json& j) {
         j["architectures"] = {"Qwen2ForCausalLM"};
         j["model_type"] = "qwen2";
         j["use_sliding_window"] = true;
       },
       StatusCode::kUnimplemented, "use_sliding_window = true"},
      {"window of 0", [](json& j) { j["sliding_window"] = 0; }, StatusCode::kInvalidArgument,
       "sliding_window"},
      {"window as text", [](json& j) { j["sliding_window"] = "4096"; }, StatusCode::kInvalidArgument,
       "sliding_window"},
      {"phi3 longrope",
       [](json& j) {
         j["architectures"] = {"Phi3ForCausalLM"};
         j["model_type"] = "phi3";
         j["rope_scaling"] = {{"type", "longrope"}, {"long_factor", {1.0}}, {"short_factor", {1.0}}};
       },
       StatusCode::kUnimplemented, "rope_type 'longrope'"},
      {"phi3 su",
       [](json& j) {
         j["architectures"] = {"Phi3ForCausalLM"};
         j["model_type"] = "phi3";
         j["rope_scaling"] = {{"type", "su"}};
       },
       StatusCode::kUnimplemented, "rope_type 'su'"},
      {"qwen3 attention bias",
       [](json& j) {
         j["architectures"] = {"Qwen3ForCausalLM"};
         j["model_type"] = "qwen3";
         j["attention_bias"] = true;
       },
       StatusCode::kUnimplemented, "'attention_bias' = true"},
      {"soft-capping", [](json& j) { j["final_logit_softcapping"] = 30.0; }, StatusCode::kUnimplemented,
       "final_logit_softcapping"},
      {"partial rotary in rope_parameters",
       [](json& j) {
         j["rope_parameters"] = {
             {"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.75}};
       },
       StatusCode::kUnimplemented, "partial_rotary_factor 0.75"},
      {"arch mismatch", [](json& j) { j["architectures"] = {"LlamaForSequenceClassification"}; },
       StatusCode::kUnimplemented, "LlamaForSequenceClassification"},
      {"moe", [](json& j) { j["num_local_experts"] = 8; }, StatusCode::kUnimplemented, "num_local_experts"},
      {"attention bias", [](json& j) { j["attention_bias"] = true; }, StatusCode::kUnimplemented,
       "'attention_bias' = true"},
      {"mlp bias", [](json& j) { j["mlp_bias"] = true; }, StatusCode::kUnimplemented, "'mlp_bias' = true"},
      {"gelu", [](json& j) { j["hidden_act"] = "gelu"; }, StatusCode::kUnimplemented, "hidden_act \"gelu\""},
      {"dynamic",
       [](json& j) {
         j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 4.0}};
       },
       StatusCode::kUnimplemented, "rope_type 'dynamic'"},
      {"yarn missing key",
       [](json& j) {
         j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
       },
       StatusCode::kInvalidArgument, "'rope_scaling.original_max_position_embeddings': missing"},
      {"llama3 missing key", [](json& j) { j["rope_scaling"].erase("low_freq_factor"); },
       StatusCode::kInvalidArgument, "'rope_scaling.low_freq_factor': missing"},
      {"partial rotary", [](json& j) { j["partial_rotary_factor"] = 0.5; }, StatusCode::kUnimplemented,
       "partial_rotary_factor"},
      {"no model_type", [](json& j) { j.erase("model_type"); }, StatusCode::kInvalidArgument, "'model_type'"},
      {"layers string", [](json& j) { j["num_hidden_layers"] = "32"; }, StatusCode::kInvalidArgument,
       "'num_hidden_layers': expected an integer, found string"},
      {"kv heads float", [](json& j) { j["num_key_value_heads"] = 8.5; }, StatusCode::kInvalidArgument,
       "'num_key_value_heads': expected an integer"},
      {"hidden missing", [](json& j) { j.erase("hidden_size"); }, StatusCode::kInvalidArgument,
       "'hidden_size': missing"},
      {"theta string", [](json& j) { j["rope_theta"] = "big"; }, StatusCode::kInvalidArgument,
       "'rope_theta': expected a number"},
      {"eps huge", [](json& j) { j["rms_norm_eps"] = 1e300; }, StatusCode::kInvalidArgument,
       "'rms_norm_eps'"},
      {"kv not divisor", [](json& j) { j["num_key_value_heads"] = 7; }, StatusCode::kInvalidArgument,
       "n_kv_heads = 7"},
      {"layers zero", [](json& j) { j["num_hidden_layers"] = 0; }, StatusCode::kInvalidArgument,
       "n_layers = 0"},
      {"tie not bool", [](json& j) { j["tie_word_embeddings"] = 1; }, StatusCode::kInvalidArgument,
       "'tie_word_embeddings'"},
      {"eos bad",
       [](json& j) {
         j["eos_token_id"] = {1, -2};
       },
       StatusCode::kInvalidArgument, "'eos_token_id'"},
      {"dtype f8", [](json& j) { j["torch_dtype"] = "float8_e4m3fn"; }, StatusCode::kUnimplemented,
       "torch_dtype 'float8_e4m3fn'"},
  };
  for (const Refusal& r : cases) {
    json j = llama31_config();
    r.edit(j);
    auto got = config_from_hf_json(j, "m/config.json");
    ASSERT_FALSE(got.ok()) << r.what;
    EXPECT_EQ(got.status().code(), r.code) << r.what << ": " << got.status().to_string();
    EXPECT_NE(got.status().message().find(r.needle), std::string::npos)
        << r.what << ": " << got.status().message();
    EXPECT_EQ(got.status().message().rfind("m/config.json: ", 0), 0u) << got.status().message();
  }
  EXPECT_FALSE(config_from_hf_json(json::array()).ok());
}

TEST(ConfigHf, FileErrorsNameThePath) {
  auto missing = config_from_hf_file("/nonexistent/config.json");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/config.json"), std::string::npos);
}

}  // namespace
}  // namespace nanoserve
