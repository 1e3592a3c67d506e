#pragma once
// Model hyperparameters, from GGUF metadata (or, later, config.json).

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
  std::string arch;          // "llama"
  int64_t n_layers = 0;
  int64_t dim = 0;           // embedding_length
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;      // dim / n_heads
  int64_t rope_dim = 0;      // rotary dims per head (== head_dim for llama)
  int64_t ffn_dim = 0;
  int64_t vocab_size = 0;
  int64_t context_length = 0;
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;
  RopeScaling rope_scaling;
  bool tied_embeddings = false;  // true when there is no output.weight

  int64_t n_rep() const { return n_heads / n_kv_heads; }
  // INVALID_ARGUMENT naming the field when the hyperparameters are inconsistent.
  Status validate() const;
  std::string to_string() const;
};

StatusOr<ModelConfig> config_from_gguf(const GgufFile& file);

}  // namespace nanoserve
