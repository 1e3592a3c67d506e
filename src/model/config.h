#pragma once
// Model hyperparameters, from GGUF metadata (config_from_gguf) or a Hugging
// Face config.json (model/config_hf.h).

#include <cstdint>
#include <string>

#include "core/status.h"

namespace nanoserve {

class GgufFile;

struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3 };
  Type type = Type::kNone;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;   // llama3
  float high_freq_factor = 4.0f;  // llama3
  int64_t original_context_length = 8192;
  // rope_freqs.weight is present: per-frequency divisors [rope_dim / 2] that
  // llama.cpp's converter stores for llama3 scaling instead of the keys above.
  // The divisors already encode the blend, so `type` is then kNone.
  bool freq_factors_tensor = false;
};

struct ModelConfig {
  std::string arch;  // "llama", "qwen2", "qwen3", "phi3" (model/arch.h)
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
  // What the architecture adds to llama (model/arch.h; apply_arch sets them).
  bool qkv_bias = false;           // qwen2
  bool qk_norm = false;            // qwen3
  bool fused_qkv_gate_up = false;  // phi3

  int64_t n_rep() const { return n_heads / n_kv_heads; }
  // INVALID_ARGUMENT naming the field when the hyperparameters are inconsistent.
  Status validate() const;
  std::string to_string() const;
};

// Any general.architecture reads (inspect shows files it cannot run);
// check_gguf_supported says whether the forward can run it.
StatusOr<ModelConfig> config_from_gguf(const GgufFile& file);

// UNIMPLEMENTED naming the key or tensor when the file needs what the forward
// does not have: an architecture outside model/arch.h, a sliding window below
// the context, experts, logit soft-capping, partial rotary (beyond llama),
// longrope factors, or any tensor the forward would not read.
Status check_gguf_supported(const GgufFile& file, const ModelConfig& config);

}  // namespace nanoserve
