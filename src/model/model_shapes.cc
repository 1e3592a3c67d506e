#include "model/model_shapes.h"

#include <cmath>

#include "core/half.h"

namespace nanoserve {

namespace {

ModelConfig llama3(int64_t layers, int64_t dim, int64_t ffn, int64_t head_dim, float factor, bool tied,
                   int64_t context) {
  ModelConfig c;
  c.arch = "llama";
  c.n_layers = layers;
  c.dim = dim;
  c.n_heads = 32;
  c.n_kv_heads = 8;
  c.head_dim = head_dim;
  c.rope_dim = head_dim;
  c.ffn_dim = ffn;
  c.vocab_size = 128256;
  c.context_length = context;
  c.rope_theta = 500000.0f;
  c.norm_eps = 1e-5f;
  c.rope_scaling.type = RopeScaling::Type::kLlama3;
  c.rope_scaling.factor = factor;
  c.rope_scaling.low_freq_factor = 1.0f;
  c.rope_scaling.high_freq_factor = 4.0f;
  c.rope_scaling.original_context_length = 8192;
  c.tied_embeddings = tied;
  return c;
}

ModelConfig smollm2_135m() {
  ModelConfig c;
  c.arch = "llama";
  c.n_layers = 30;
  c.dim = 576;
  c.n_heads = 9;
  c.n_kv_heads = 3;
  c.head_dim = 64;
  c.rope_dim = 64;
  c.ffn_dim = 1536;
  c.vocab_size = 49152;
  c.context_length = 8192;
  c.rope_theta = 100000.0f;
  c.norm_eps = 1e-5f;
  c.tied_embeddings = true;
  return c;
}

// Qwen3-30B-A3B's config.json: 128 experts of 768, 8 routed per token.
ModelConfig qwen3_30b_a3b() {
  ModelConfig c;
  c.arch = "qwen3moe";
  c.n_layers = 48;
  c.dim = 2048;
  c.n_heads = 32;
  c.n_kv_heads = 4;
  c.head_dim = 128;
  c.rope_dim = 128;
  c.ffn_dim = 6144;
  c.vocab_size = 151936;
  c.context_length = 40960;
  c.rope_theta = 1000000.0f;
  c.norm_eps = 1e-6f;
  c.tied_embeddings = false;
  c.n_experts = 128;
  c.n_experts_used = 8;
  c.expert_ffn_dim = 768;
  c.expert_weights_norm = true;
  return c;
}

// Gemma 3 12B's text model (its config.json's text_config, Gemma3TextConfig's
// defaults for what it leaves out): 5 local layers (window 1024, theta 10^4)
// to each global one (theta 10^6, linear scaling x8), q/k norms, GeGLU,
// sandwich norms, tied embeddings scaled by sqrt(3840) in bf16; no soft-caps.
ModelConfig gemma3_12b() {
  ModelConfig c;
  c.arch = "gemma3";
  c.n_layers = 48;
  c.dim = 3840;
  c.n_heads = 16;
  c.n_kv_heads = 8;
  c.head_dim = 256;
  c.rope_dim = 256;
  c.ffn_dim = 15360;
  c.vocab_size = 262208;
  c.context_length = 131072;
  c.rope_theta = 1000000.0f;
  c.rope_scaling.type = RopeScaling::Type::kLinear;
  c.rope_scaling.factor = 8.0f;
  c.rope_local_theta = 10000.0f;
  c.norm_eps = 1e-6f;
  c.tied_embeddings = true;
  c.sliding_window = 1024;
  c.sliding_layers.assign(48, 1);
  for (int64_t l = 5; l < 48; l += 6) c.sliding_layers[static_cast<size_t>(l)] = 0;
  c.query_pre_attn_scalar = 256.0f;
  c.embed_scale = bf16_to_f32(f32_to_bf16(std::sqrt(3840.0f)));
  return c;
}

// gpt-oss-20b's config.json: 24 layers of 32 experts (4 routed) of 2880,
// 64 heads of 64 over 8 kv heads, 128-token windows on the even layers, YaRN
// x32 over 4096 positions (beta 32 / 1, not truncated), swiglu_limit 7.
ModelConfig gpt_oss_20b() {
  ModelConfig c;
  c.arch = "gpt-oss";
  c.n_layers = 24;
  c.dim = 2880;
  c.n_heads = 64;
  c.n_kv_heads = 8;
  c.head_dim = 64;
  c.rope_dim = 64;
  c.ffn_dim = 2880;
  c.vocab_size = 201088;
  c.context_length = 131072;
  c.rope_theta = 150000.0f;
  c.norm_eps = 1e-5f;
  c.rope_scaling.type = RopeScaling::Type::kYarn;
  c.rope_scaling.factor = 32.0f;
  c.rope_scaling.original_context_length = 4096;
  c.rope_scaling.truncate = false;
  c.tied_embeddings = false;
  c.sliding_window = 128;
  c.sliding_layers.assign(24, 0);
  for (size_t l = 0; l < c.sliding_layers.size(); l += 2) c.sliding_layers[l] = 1;
  c.n_experts = 32;
  c.n_experts_used = 4;
  c.expert_ffn_dim = 2880;
  return c;
}

}  // namespace

const std::vector<std::string>& model_shape_names() {
  static const std::vector<std::string> kNames = {"llama-3-8b", "llama-3.2-1b", "smollm2-135m",
                                                  "qwen3-30b-a3b", "gemma-3-12b", "gpt-oss-20b"};
  return kNames;
}

StatusOr<ModelConfig> model_shape(std::string_view name) {
  if (name == "llama-3-8b") return llama3(32, 4096, 14336, 128, 8.0f, false, 8192);
  if (name == "llama-3.2-1b") return llama3(16, 2048, 8192, 64, 32.0f, true, 131072);
  if (name == "smollm2-135m") return smollm2_135m();
  if (name == "qwen3-30b-a3b") return qwen3_30b_a3b();
  if (name == "gemma-3-12b") return gemma3_12b();
  if (name == "gpt-oss-20b") return gpt_oss_20b();
  std::string known;
  for (const std::string& n : model_shape_names()) known += (known.empty() ? "" : ", ") + n;
  return invalid_argument("--model-shape: unknown shape '" + std::string(name.substr(0, 64)) +
                          "' (known: " + known + ")");
}

int64_t model_param_count(const ModelConfig& c) {
  const int64_t q = c.n_heads * c.head_dim, kv = c.n_kv_heads * c.head_dim;
  const int64_t mlp =
      c.n_experts > 0 ? c.n_experts * (c.dim + 3 * c.dim * c.expert_ffn_dim) : 3 * c.dim * c.ffn_dim;
  const ArchInfo* a = find_arch(c.arch);
  const int64_t norms =
      (a != nullptr && a->qk_norm ? 2 * c.head_dim : 0) + (a != nullptr && a->sandwich_norms ? 2 * c.dim : 0);
  // Biases and sinks (qwen2, gpt-oss): q/k/v, o, one logit a head, router and experts.
  int64_t biases = 0;
  if (a != nullptr && a->qkv_bias) biases += q + 2 * kv;
  if (a != nullptr && a->o_bias) biases += c.dim;
  if (a != nullptr && a->attn_sinks) biases += c.n_heads;
  if (a != nullptr && a->oss_experts) biases += c.n_experts * (1 + 2 * c.expert_ffn_dim + c.dim);
  const int64_t per_layer = 2 * c.dim + norms + biases + c.dim * q + 2 * c.dim * kv + q * c.dim + mlp;
  return c.vocab_size * c.dim * (c.tied_embeddings ? 1 : 2) + c.n_layers * per_layer + c.dim;
}

}  // namespace nanoserve
