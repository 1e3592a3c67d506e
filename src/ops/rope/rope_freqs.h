#pragma once
// The rotary frequencies of a model: inv_freq[i] = theta^(-2i / rope_dim),
// then the scaling's adjustment (linear: / factor; llama3: the wavelength-
// dependent blend of Llama 3.1), then an optional per-frequency divisor (the
// GGUF tensor rope_freqs.weight, which llama3-scaled GGUF files carry instead).

#include <cstdint>
#include <span>
#include <vector>

#include "model/config.h"

namespace nanoserve {

// PRECOND: rope_dim even; freq_factors empty or rope_dim / 2 long.
std::vector<float> rope_inv_freqs(int64_t rope_dim, float theta, const RopeScaling& scaling,
                                  std::span<const float> freq_factors = {});

}  // namespace nanoserve
