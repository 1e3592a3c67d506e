#include "model/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>

#include "io/gguf.h"
#include "io/gguf_builder.h"

namespace nanoserve {
namespace {

using testing::GgufBuilder;

const char* kModelPath = NS_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

StatusOr<ModelConfig> config_of(const GgufBuilder& b) {
  auto owned = std::make_shared<std::vector<uint8_t>>(b.build());
  auto file = GgufFile::parse(owned->data(), owned->size(), owned);
  if (!file.ok()) return file.status();
  return config_from_gguf(**file);
}

// A small valid llama header; tests add or break one thing.
GgufBuilder small_llama() {
  GgufBuilder b;
  b.kv_string("general.architecture", "llama")
      .kv_u32("llama.block_count", 2)
      .kv_u32("llama.embedding_length", 64)
      .kv_u32("llama.feed_forward_length", 128)
      .kv_u32("llama.context_length", 256)
      .kv_u32("llama.attention.head_count", 4)
      .kv_u32("llama.attention.head_count_kv", 2)
      .kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-6f)
      .kv_string_array("tokenizer.ggml.tokens", {"a", "b", "c"});
  return b;
}

void expect_error(const StatusOr<ModelConfig>& c, StatusCode code, const std::string& needle) {
  ASSERT_FALSE(c.ok()) << "expected an error naming " << needle;
  EXPECT_EQ(c.status().code(), code) << c.status().to_string();
  EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status().to_string();
}

TEST(ModelConfig, DefaultModel) {
  auto file = GgufFile::open(kModelPath);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  auto c = config_from_gguf(**file);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->arch, "llama");
  EXPECT_EQ(c->n_layers, 30);
  EXPECT_EQ(c->dim, 576);
  EXPECT_EQ(c->n_heads, 9);
  EXPECT_EQ(c->n_kv_heads, 3);
  EXPECT_EQ(c->n_rep(), 3);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->rope_dim, 64);
  EXPECT_EQ(c->ffn_dim, 1536);
  EXPECT_EQ(c->vocab_size, 49152);
  EXPECT_EQ(c->context_length, 8192);
  EXPECT_EQ(c->rope_theta, 100000.0f);
  EXPECT_NEAR(c->norm_eps, 1e-5f, 1e-12f);
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_FALSE(c->rope_scaling.freq_factors_tensor);
  EXPECT_TRUE(c->tied_embeddings);
  EXPECT_TRUE(c->validate().ok());
  EXPECT_NE(c->to_string().find("layers 30"), std::string::npos);
}

TEST(ModelConfig, DefaultsAndDerivedValues) {
  auto c = config_of(small_llama());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->rope_dim, 16);          // defaults to head_dim
  EXPECT_EQ(c->rope_theta, 10000.0f);  // GGUF default
  EXPECT_EQ(c->vocab_size, 3);         // from tokenizer.ggml.tokens
  EXPECT_TRUE(c->tied_embeddings);
  // head_count_kv absent: one kv head per query head.
  GgufBuilder b;
  b.kv_string("general.architecture", "llama")
      .kv_u32("llama.block_count", 1)
      .kv_u32("llama.embedding_length", 32)
      .kv_u32("llama.feed_forward_length", 64)
      .kv_u32("llama.context_length", 16)
      .kv_u32("llama.attention.head_count", 2)
      .kv_u32("llama.vocab_size", 10)
      .kv_u32("llama.attention.key_length", 8)
      .kv_u32("llama.rope.dimension_count", 4);
  auto d = config_of(b);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->n_kv_heads, 2);
  EXPECT_EQ(d->head_dim, 8);  // key_length wins over dim / n_heads
  EXPECT_EQ(d->rope_dim, 4);
  EXPECT_EQ(d->vocab_size, 10);
}

TEST(ModelConfig, Llama3ScalingFromKeys) {
  auto c = config_of(small_llama()
                         .kv_string("llama.rope.scaling.type", "llama3")
                         .kv_f32("llama.rope.scaling.factor", 8.0f)
                         .kv_f32("llama.rope.scaling.low_freq_factor", 1.0f)
                         .kv_f32("llama.rope.scaling.high_freq_factor", 4.0f)
                         .kv_u32("llama.rope.scaling.original_context_length", 8192)
                         .kv_f32("llama.rope.freq_base", 500000.0f));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(c->rope_scaling.factor, 8.0f);
  EXPECT_EQ(c->rope_scaling.original_context_length, 8192);
  EXPECT_EQ(c->rope_theta, 500000.0f);
}

TEST(ModelConfig, LinearScalingAndUnknownScaling) {
  auto c = config_of(
      small_llama().kv_string("llama.rope.scaling.type", "linear").kv_f32("llama.rope.scaling.factor", 2.0f));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_EQ(c->rope_scaling.factor, 2.0f);
  expect_error(config_of(small_llama().kv_string("llama.rope.scaling.type", "longrope")),
               StatusCode::kUnimplemented, "rope.scaling.type");
  expect_error(config_of(small_llama().kv_u32("llama.rope.scaling.type", 1)), StatusCode::kInvalidArgument,
               "rope.scaling.type");
  expect_error(config_of(small_llama()
                             .kv_string("llama.rope.scaling.type", "linear")
                             .kv_f32("llama.rope.scaling.factor", -1.0f)),
               StatusCode::kInvalidArgument, "rope_scaling.factor");
}

TEST(ModelConfig, RopeFreqsTensorAndOutputWeight) {
  std::vector<float> freqs(8, 1.0f);  // rope_dim 16 -> 8 divisors
  std::vector<float> out(64 * 3, 0.0f);
  auto c = config_of(small_llama()
                         .kv_string("llama.rope.scaling.type", "llama3")
                         .tensor("rope_freqs.weight", {8}, testing::kGgmlF32, testing::f32_bytes(freqs))
                         .tensor("output.weight", {64, 3}, testing::kGgmlF32, testing::f32_bytes(out)));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE(c->rope_scaling.freq_factors_tensor);
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kNone);  // the divisors already hold the scaling
  EXPECT_FALSE(c->tied_embeddings);
  expect_error(config_of(small_llama().tensor("rope_freqs.weight", {5}, testing::kGgmlF32,
                                              testing::f32_bytes(std::vector<float>(5, 1.0f)))),
               StatusCode::kInvalidArgument, "rope_freqs.weight");
}

TEST(ModelConfig, EmbeddingShapeMustMatch) {
  std::vector<float> emb(64 * 4, 0.0f);  // 4 rows but vocab is 3
  expect_error(config_of(small_llama().tensor("token_embd.weight", {64, 4}, testing::kGgmlF32,
                                              testing::f32_bytes(emb))),
               StatusCode::kInvalidArgument, "token_embd.weight");
}

TEST(ModelConfig, MissingOrMistypedKeysAreNamed) {
  GgufBuilder no_layers;
  no_layers.kv_string("general.architecture", "llama").kv_u32("llama.embedding_length", 64);
  expect_error(config_of(no_layers), StatusCode::kNotFound, "llama.block_count");
  expect_error(config_of(GgufBuilder()), StatusCode::kNotFound, "general.architecture");
  GgufBuilder bad_type;
  bad_type.kv_string("general.architecture", "llama").kv_string("llama.block_count", "thirty");
  expect_error(config_of(bad_type), StatusCode::kInvalidArgument, "llama.block_count");
  expect_error(config_of(small_llama().kv_string("llama.rope.freq_base", "x")), StatusCode::kInvalidArgument,
               "llama.rope.freq_base");
  expect_error(config_of(small_llama().kv_f64("llama.rope.freq_base", 1e300)), StatusCode::kInvalidArgument,
               "llama.rope.freq_base");
  expect_error(config_of(small_llama().kv_f32("llama.rope.freq_base", NAN)), StatusCode::kInvalidArgument,
               "rope_theta");
}

TEST(ModelConfig, InconsistentHeaderValues) {
  expect_error(config_of(small_llama().kv_u32("llama.attention.key_length", 0)), StatusCode::kInvalidArgument,
               "head_dim");
  // 64 / 3 heads is not an integer head_dim.
  GgufBuilder odd;
  odd.kv_string("general.architecture", "llama")
      .kv_u32("llama.block_count", 1)
      .kv_u32("llama.embedding_length", 64)
      .kv_u32("llama.feed_forward_length", 64)
      .kv_u32("llama.context_length", 16)
      .kv_u32("llama.attention.head_count", 3)
      .kv_u32("llama.vocab_size", 10);
  expect_error(config_of(odd), StatusCode::kInvalidArgument, "n_heads");
}

// validate() on a good config with one field broken at a time.
TEST(ModelConfig, ValidateNamesTheBadField) {
  auto file = GgufFile::open(kModelPath);
  ASSERT_TRUE(file.ok());
  auto good = config_from_gguf(**file);
  ASSERT_TRUE(good.ok());
  struct Case {
    const char* field;
    std::function<void(ModelConfig&)> brk;
  };
  const Case cases[] = {
      {"arch", [](ModelConfig& c) { c.arch = ""; }},
      {"n_layers", [](ModelConfig& c) { c.n_layers = 0; }},
      {"n_layers", [](ModelConfig& c) { c.n_layers = 1 << 20; }},
      {"dim", [](ModelConfig& c) { c.dim = -576; }},
      {"n_heads", [](ModelConfig& c) { c.n_heads = 0; }},
      {"n_kv_heads", [](ModelConfig& c) { c.n_kv_heads = 0; }},
      {"n_kv_heads", [](ModelConfig& c) { c.n_kv_heads = 18; }},
      {"n_kv_heads", [](ModelConfig& c) { c.n_kv_heads = 2; }},  // 9 % 2 != 0
      {"head_dim", [](ModelConfig& c) { c.head_dim = 0; }},
      {"rope_dim", [](ModelConfig& c) { c.rope_dim = 65; }},
      {"rope_dim", [](ModelConfig& c) { c.rope_dim = 63; }},
      {"ffn_dim", [](ModelConfig& c) { c.ffn_dim = 0; }},
      {"vocab_size", [](ModelConfig& c) { c.vocab_size = int64_t{1} << 40; }},
      {"context_length", [](ModelConfig& c) { c.context_length = 0; }},
      {"rope_theta", [](ModelConfig& c) { c.rope_theta = NAN; }},
      {"rope_theta", [](ModelConfig& c) { c.rope_theta = 0.0f; }},
      {"norm_eps", [](ModelConfig& c) { c.norm_eps = -1e-5f; }},
      {"norm_eps", [](ModelConfig& c) { c.norm_eps = INFINITY; }},
      {"rope_scaling.factor",
       [](ModelConfig& c) {
         c.rope_scaling.type = RopeScaling::Type::kLinear;
         c.rope_scaling.factor = 0.0f;
       }},
      {"low_freq_factor",
       [](ModelConfig& c) {
         c.rope_scaling.type = RopeScaling::Type::kLlama3;
         c.rope_scaling.low_freq_factor = 8.0f;
       }},
      {"original_context_length",
       [](ModelConfig& c) {
         c.rope_scaling.type = RopeScaling::Type::kLlama3;
         c.rope_scaling.original_context_length = 0;
       }},
  };
  for (const Case& k : cases) {
    ModelConfig c = *good;
    k.brk(c);
    Status s = c.validate();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << k.field;
    EXPECT_NE(s.message().find(k.field), std::string::npos) << k.field << ": " << s.to_string();
  }
}

}  // namespace
}  // namespace nanoserve
