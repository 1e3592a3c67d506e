#pragma once
// Model hyperparameters, from GGUF metadata (config_from_gguf) or a Hugging
// Face config.json (model/config_hf.h).

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/arch.h"
#include "ops/rope/rope_freqs.h"  // RopeScaling

namespace nanoserve {

class GgufFile;

struct ModelConfig {
  std::string arch;  // "llama", "qwen2", "qwen3", "phi3", "qwen3moe" (model/arch.h)
  int64_t n_layers = 0;
  int64_t dim = 0;  // embedding_length
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;  // dim / n_heads
  int64_t rope_dim = 0;  // rotary dims per head (== head_dim for llama)
  int64_t ffn_dim = 0;
  int64_t vocab_size = 0;
  int64_t context_length = 0;
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;
  RopeScaling rope_scaling;
  bool tied_embeddings = false;  // true when there is no output.weight
  // Sliding-window attention (Mistral 7B v0.1): a token attends itself and
  // the sliding_window - 1 positions before it, in every layer; 0: none (a
  // window at or above the context is none).
  int64_t sliding_window = 0;
  // Mixture of experts (Qwen3-MoE, Mixtral; ops/moe/moe.h): every layer's
  // MLP is n_experts SwiGLU experts of expert_ffn_dim, of which each token
  // runs the n_experts_used its router weighs highest, their weights divided
  // by their sum when expert_weights_norm. n_experts 0: a dense MLP of ffn_dim.
  int64_t n_experts = 0;
  int64_t n_experts_used = 0;
  int64_t expert_ffn_dim = 0;
  bool expert_weights_norm = true;
  // gpt-oss's clamped SwiGLU (ArchInfo::oss_experts; ops/moe/moe.h).
  float swiglu_alpha = 1.702f;
  float swiglu_limit = 7.0f;
  // Which layers slide (Gemma's alternation: local layers with the window,
  // global ones without): [n_layers], 1 = sliding. Empty: every layer slides
  // (Mistral) when sliding_window > 0.
  std::vector<uint8_t> sliding_layers;
  // The sliding layers' rope theta (Gemma 3's rope_local_base_freq); they
  // rotate with it and without rope_scaling, which is the global layers'. 0:
  // every layer rotates alike.
  float rope_local_theta = 0.0f;
  // Soft-capping, cap * tanh(x / cap), of each attention score (after the
  // scale) and of the final logits (Gemma 2); 0: none.
  float attn_softcap = 0.0f;
  float final_softcap = 0.0f;
  // The attention scale is query_pre_attn_scalar^-0.5 (Gemma); 0: head_dim's.
  float query_pre_attn_scalar = 0.0f;
  // What the embedding is multiplied by when the family scales it: sqrt(dim)
  // rounded to the checkpoint's dtype, as transformers rounds it to the
  // activations'; 0: sqrt(dim) in f32.
  float embed_scale = 0.0f;
  // The family's row of model/arch.h (apply_arch sets it): what it adds to llama.
  const ArchInfo* family = nullptr;

  int64_t n_rep() const { return n_heads / n_kv_heads; }
  // Layer l's sliding window (0: the layer attends its whole history).
  int64_t layer_window(int64_t l) const {
    if (sliding_window <= 0) return 0;
    return sliding_layers.empty() || sliding_layers[static_cast<size_t>(l)] != 0 ? sliding_window : 0;
  }
  // Whether layer l rotates with rope_local_theta: a sliding layer by its type,
  // even where its window covers the whole context.
  bool layer_local_rope(int64_t l) const {
    return rope_local_theta > 0.0f && !sliding_layers.empty() && sliding_layers[static_cast<size_t>(l)] != 0;
  }
  // The attention's scale: query_pre_attn_scalar^-0.5, else head_dim^-0.5.
  float attention_scale() const;
  // *family, or arch's row when apply_arch has not run (a config made by
  // hand); NS_CHECK that the architecture is built.
  const ArchInfo& arch_info() const;
  // *family, or arch's row; null when the architecture is not built.
  const ArchInfo* arch_info_or_null() const { return family != nullptr ? family : find_arch(arch); }
  // INVALID_ARGUMENT naming the field when the hyperparameters are inconsistent.
  Status validate() const;
  std::string to_string() const;
};

// Any general.architecture reads (inspect shows files it cannot run);
// check_gguf_supported says whether the forward can run it.
StatusOr<ModelConfig> config_from_gguf(const GgufFile& file);

// UNIMPLEMENTED naming the key or tensor when the file needs what the forward
// does not have: an architecture outside model/arch.h, shared experts or a
// gating other than softmax, partial rotary (beyond llama),
// longrope factors, or any tensor the forward would not read.
Status check_gguf_supported(const GgufFile& file, const ModelConfig& config);

}  // namespace nanoserve
