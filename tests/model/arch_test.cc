#include "model/arch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "io/gguf.h"
#include "io/gguf_builder.h"
#include "model/config.h"
#include "model/hf_weights.h"
#include "model/rope_layout.h"

namespace nanoserve {
namespace {

using testing::GgufBuilder;

// A header of `arch` with 1 layer and the given tensor names (1 f32 each;
// check_gguf_supported looks at names and metadata only).
GgufBuilder header(const std::string& arch, const std::vector<std::string>& tensors) {
  GgufBuilder b;
  const std::string p = arch + ".";
  b.kv_string("general.architecture", arch)
      .kv_u32(p + "block_count", 1)
      .kv_u32(p + "embedding_length", 64)
      .kv_u32(p + "feed_forward_length", 128)
      .kv_u32(p + "context_length", 256)
      .kv_u32(p + "attention.head_count", 4)
      .kv_u32(p + "attention.head_count_kv", 2)
      .kv_string_array("tokenizer.ggml.tokens", {"a", "b", "c"});
  for (const std::string& t : tensors) b.tensor(t, {1}, 0, std::vector<uint8_t>(4, 0));
  return b;
}

Status supported(const GgufBuilder& b) {
  auto owned = std::make_shared<std::vector<uint8_t>>(b.build());
  auto file = GgufFile::parse(owned->data(), owned->size(), owned);
  if (!file.ok()) return file.status();
  auto c = config_from_gguf(**file);
  if (!c.ok()) return c.status();
  return check_gguf_supported(**file, *c);
}

void expect_unimplemented(const Status& s, const std::string& needle) {
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << s.to_string();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.to_string();
}

TEST(Arch, FlagsOfEachArchitecture) {
  for (const char* name : {"llama", "qwen2", "qwen3", "phi3", "qwen3moe"}) {
    ModelConfig c;
    c.arch = name;
    ASSERT_TRUE(apply_arch(c).ok()) << name;
    ASSERT_NE(c.family, nullptr) << name;
    EXPECT_EQ(c.family, find_arch(name));
    EXPECT_EQ(c.arch_info().qkv_bias, c.arch == "qwen2");
    EXPECT_EQ(c.arch_info().qk_norm, c.arch == "qwen3" || c.arch == "qwen3moe");
    EXPECT_EQ(c.arch_info().experts == ArchExperts::kAlways, c.arch == "qwen3moe");
    EXPECT_EQ(c.arch_info().fused_qkv_gate_up, c.arch == "phi3");
  }
  // gpt-oss: its biases, sinks, the MLP's norm under llama.cpp's name, and the experts' biases.
  ModelConfig oss;
  oss.arch = "gpt-oss";
  oss.n_layers = 2;
  oss.n_experts = 4;
  ASSERT_TRUE(apply_arch(oss).ok());
  EXPECT_TRUE(oss.arch_info().qkv_bias && oss.arch_info().o_bias && oss.arch_info().attn_sinks &&
              oss.arch_info().oss_experts);
  EXPECT_EQ(oss.arch_info().gguf_rope_pairs, RopePairs::kHalves);
  const std::vector<std::string> names = arch_layer_tensors(oss);
  for (const char* n :
       {"attn_q.bias", "attn_output.bias", "attn_sinks.weight", "post_attention_norm.weight",
        "ffn_gate_inp.bias", "ffn_gate_exps.bias", "ffn_up_exps.bias", "ffn_down_exps.bias"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  }
  EXPECT_EQ(std::find(names.begin(), names.end(), "ffn_norm.weight"), names.end());
  EXPECT_TRUE(arch_uses_tensor(oss, "blk.1.attn_sinks.weight"));
  EXPECT_FALSE(arch_uses_tensor(oss, "blk.1.ffn_norm.weight"));
  ModelConfig other;
  other.arch = "starcoder2";
  expect_unimplemented(apply_arch(other),
                       "architecture 'starcoder2' is not supported (built: llama, qwen2, qwen3, "
                       "phi3, qwen3moe, gemma2, gemma3, gpt-oss)");
}

TEST(Arch, LayerTensorsPerArchitecture) {
  ModelConfig c;
  c.arch = "phi3";
  c.n_layers = 2;
  ASSERT_TRUE(apply_arch(c).ok());
  EXPECT_TRUE(arch_uses_tensor(c, "blk.1.attn_qkv.weight"));
  EXPECT_TRUE(arch_uses_tensor(c, "blk.1.ffn_up.weight"));
  EXPECT_FALSE(arch_uses_tensor(c, "blk.1.attn_q.weight"));
  EXPECT_FALSE(arch_uses_tensor(c, "blk.1.ffn_gate.weight"));
  EXPECT_FALSE(arch_uses_tensor(c, "blk.2.attn_qkv.weight"));  // past n_layers
  EXPECT_EQ(*hf_tensor_name(c, "blk.1.ffn_up.weight"), "model.layers.1.mlp.gate_up_proj.weight");
  EXPECT_EQ(*hf_tensor_name(c, "blk.0.attn_qkv.weight"), "model.layers.0.self_attn.qkv_proj.weight");
  c.arch = "qwen2";
  ASSERT_TRUE(apply_arch(c).ok());
  EXPECT_EQ(*hf_tensor_name(c, "blk.0.attn_k.bias"), "model.layers.0.self_attn.k_proj.bias");
  EXPECT_EQ(*hf_tensor_name(c, "blk.0.ffn_up.weight"), "model.layers.0.mlp.up_proj.weight");
  EXPECT_FALSE(hf_tensor_name(c, "blk.0.attn_q_norm.weight").has_value());
  c.arch = "qwen3";
  ASSERT_TRUE(apply_arch(c).ok());
  EXPECT_EQ(*hf_tensor_name(c, "blk.1.attn_q_norm.weight"), "model.layers.1.self_attn.q_norm.weight");
  EXPECT_FALSE(hf_tensor_name(c, "blk.0.attn_q.bias").has_value());
}

TEST(Arch, GgufRefusalsNameTheKeyOrTensor) {
  const std::vector<std::string> llama = {"output_norm.weight", "blk.0.attn_q.weight"};
  EXPECT_TRUE(supported(header("llama", llama)).ok());
  expect_unimplemented(supported(header("starcoder2", llama)), "architecture 'starcoder2'");
  expect_unimplemented(supported(header("llama", {"blk.0.attn_output.bias"})),
                       "tensor 'blk.0.attn_output.bias' is not used by the llama forward");
  expect_unimplemented(supported(header("llama", {"blk.0.attn_q.bias"})), "'blk.0.attn_q.bias'");
  EXPECT_TRUE(supported(header("qwen2", {"blk.0.attn_q.bias"})).ok());
  expect_unimplemented(supported(header("phi3", {"rope_factors_long.weight"})), "longrope");
  // A sliding window is read (every layer's); at or above the context, it is none.
  EXPECT_TRUE(supported(header("phi3", {}).kv_u32("phi3.attention.sliding_window", 128)).ok());
  EXPECT_TRUE(supported(header("phi3", {}).kv_u32("phi3.attention.sliding_window", 0)).ok());
  EXPECT_TRUE(supported(header("phi3", {}).kv_u32("phi3.attention.sliding_window", 256)).ok());
  for (auto [window, want] : {std::pair<uint32_t, int64_t>{128, 128}, {256, 0}, {0, 0}}) {
    auto owned = std::make_shared<std::vector<uint8_t>>(
        header("phi3", {}).kv_u32("phi3.attention.sliding_window", window).build());
    auto file = GgufFile::parse(owned->data(), owned->size(), owned);
    ASSERT_TRUE(file.ok());
    auto c = config_from_gguf(**file);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ(c->sliding_window, want) << "window " << window;
  }
  expect_unimplemented(supported(header("qwen2", {}).kv_u32("qwen2.expert_count", 8)),
                       "'qwen2.expert_count'");
  // Experts in llama (Mixtral): the router and stacked or per-expert
  // tensors are the forward's; a shared expert or another gating is not.
  auto moe = [](const std::string& arch, const std::vector<std::string>& tensors) {
    return header(arch, tensors).kv_u32(arch + ".expert_count", 4).kv_u32(arch + ".expert_used_count", 2);
  };
  EXPECT_TRUE(supported(moe("llama", {"blk.0.ffn_gate_inp.weight", "blk.0.ffn_gate_exps.weight",
                                      "blk.0.ffn_up_exps.weight", "blk.0.ffn_down_exps.weight"}))
                  .ok());
  EXPECT_TRUE(supported(moe("llama", {"blk.0.ffn_gate.3.weight", "blk.0.ffn_down.0.weight"})).ok());
  expect_unimplemented(supported(moe("llama", {"blk.0.ffn_gate.4.weight"})), "'blk.0.ffn_gate.4.weight'");
  expect_unimplemented(supported(moe("llama", {"blk.0.ffn_gate.weight"})), "'blk.0.ffn_gate.weight'");
  expect_unimplemented(supported(moe("qwen3moe", {}).kv_u32("qwen3moe.expert_shared_count", 1)),
                       "'qwen3moe.expert_shared_count'");
  expect_unimplemented(supported(moe("qwen3moe", {}).kv_u32("qwen3moe.expert_gating_func", 2)),
                       "'qwen3moe.expert_gating_func'");
  EXPECT_EQ(supported(header("qwen3moe", {})).code(), StatusCode::kInvalidArgument);  // no experts
  expect_unimplemented(supported(header("llama", {}).kv_f32("llama.final_logit_softcapping", 30.0f)),
                       "soft-capping");
  expect_unimplemented(supported(header("phi3", {}).kv_u32("phi3.rope.dimension_count", 12)),
                       "partial rotary");
}

// The permutation moves row h*hd + j*hd/2 + i to h*hd + 2i + j, whole rows.
TEST(RopeLayout, PermutesQAndKRowsOfEveryTensorKind) {
  ModelConfig c;
  c.arch = "phi3";
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.head_dim = 4;
  c.rope_dim = 4;
  c.dim = 3;
  // A fused qkv [(2 + 2*1) * 4, 3]: row r holds r in every column.
  Tensor qkv = Tensor::empty(DType::kF32, {16, 3});
  for (int64_t r = 0; r < 16; ++r) {
    for (int64_t k = 0; k < 3; ++k) qkv.data_as<float>()[r * 3 + k] = static_cast<float>(r);
  }
  auto out = rope_rows_to_pairs(c, "blk.0.attn_qkv.weight", qkv, "qkv");
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  const int want[16] = {0, 2, 1, 3, 4, 6, 5, 7, /*k*/ 8, 10, 9, 11, /*v unchanged*/ 12, 13, 14, 15};
  for (int64_t r = 0; r < 16; ++r) EXPECT_EQ(out->data_as<const float>()[r * 3 + 2], want[r]) << r;
  // A bias of q (2 heads) and a norm of one head.
  Tensor bias = Tensor::empty(DType::kF32, {8});
  for (int i = 0; i < 8; ++i) bias.data_as<float>()[i] = static_cast<float>(i);
  auto b = rope_rows_to_pairs(c, "blk.3.attn_q.bias", bias, "bias");
  ASSERT_TRUE(b.ok());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(b->data_as<const float>()[i], want[i]) << i;
  Tensor norm = bias.slice_rows(0, 4);
  auto n = rope_rows_to_pairs(c, "blk.3.attn_k_norm.weight", norm, "norm");
  ASSERT_TRUE(n.ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(n->data_as<const float>()[i], want[i]) << i;
  // Other tensors pass through as they are (the same memory).
  auto v = rope_rows_to_pairs(c, "blk.0.attn_v.weight", qkv, "v");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->data(), qkv.data());
  // A wrong row count names the tensor.
  auto bad = rope_rows_to_pairs(c, "blk.0.attn_k.weight", qkv, "model.layers.0.self_attn.k_proj.weight");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("model.layers.0.self_attn.k_proj.weight"), std::string::npos);
}

}  // namespace
}  // namespace nanoserve
