#pragma once
// The rotary frequencies of a model: inv_freq[i] = theta^(-2i / rope_dim),
// then the scaling's adjustment (linear: / factor; llama3: the wavelength-
// dependent blend of Llama 3.1), then an optional per-frequency divisor (the
// GGUF tensor rope_freqs.weight, which llama3-scaled GGUF files carry instead).

#include <cstdint>
#include <span>
#include <vector>

namespace nanoserve {

// How a model scales its rotary frequencies (ModelConfig::rope_scaling).
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

// PRECOND: rope_dim even; freq_factors empty or rope_dim / 2 long.
std::vector<float> rope_inv_freqs(int64_t rope_dim, float theta, const RopeScaling& scaling,
                                  std::span<const float> freq_factors = {});

}  // namespace nanoserve
