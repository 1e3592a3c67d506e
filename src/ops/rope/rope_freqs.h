#pragma once
// The rotary frequencies of a model: inv_freq[i] = theta^(-2i / rope_dim),
// then the scaling's adjustment (linear: / factor; llama3: the wavelength-
// dependent blend of Llama 3.1), then an optional per-frequency divisor (the
// GGUF tensor rope_freqs.weight, which llama3-scaled GGUF files carry instead).
// YaRN (gpt-oss) blends each frequency between itself and itself / factor by
// a linear ramp over the dims [low, high] that turn beta_fast to beta_slow
// times in original_context_length positions, and scales cos and sin by its
// attention factor (rope_attention_factor): transformers' _compute_yarn_parameters.

#include <cstdint>
#include <span>
#include <vector>

namespace nanoserve {

// How a model scales its rotary frequencies (ModelConfig::rope_scaling).
struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3, kYarn };
  Type type = Type::kNone;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;            // llama3
  float high_freq_factor = 4.0f;           // llama3
  int64_t original_context_length = 8192;  // llama3, yarn
  float beta_fast = 32.0f;                 // yarn
  float beta_slow = 1.0f;                  // yarn
  bool truncate = true;                    // yarn: floor / ceil the ramp's ends (gpt-oss: false)
  float attention_factor = 0.0f;           // yarn: 0 is 0.1 ln(factor) + 1 (1 when factor <= 1)
  // rope_freqs.weight is present: per-frequency divisors [rope_dim / 2] that
  // llama.cpp's converter stores for llama3 scaling instead of the keys above.
  // The divisors already encode the blend, so `type` is then kNone.
  bool freq_factors_tensor = false;
};

// What rotated q and k are multiplied by (YaRN's mscale; 1 for the others).
float rope_attention_factor(const RopeScaling& scaling);

// PRECOND: rope_dim even; freq_factors empty or rope_dim / 2 long.
std::vector<float> rope_inv_freqs(int64_t rope_dim, float theta, const RopeScaling& scaling,
                                  std::span<const float> freq_factors = {});

}  // namespace nanoserve
