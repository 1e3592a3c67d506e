#include "ops/rope/rope_freqs.h"

#include <cmath>
#include <numbers>

#include "core/check.h"

namespace nanoserve {

std::vector<float> rope_inv_freqs(int64_t rope_dim, float theta, const RopeScaling& scaling,
                                  std::span<const float> freq_factors) {
  NS_CHECK(rope_dim > 0 && rope_dim % 2 == 0) << "rope_dim " << rope_dim;
  const int64_t half = rope_dim / 2;
  NS_CHECK(freq_factors.empty() || static_cast<int64_t>(freq_factors.size()) == half) << "rope freq factors";
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    // As HF computes it: 1 / theta^(2i/d) in f32.
    float f = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(rope_dim));
    switch (scaling.type) {
      case RopeScaling::Type::kNone: break;
      case RopeScaling::Type::kLinear: f /= scaling.factor; break;
      case RopeScaling::Type::kLlama3: {
        const float old_ctx = static_cast<float>(scaling.original_context_length);
        const float low_wavelen = old_ctx / scaling.low_freq_factor;
        const float high_wavelen = old_ctx / scaling.high_freq_factor;
        const float wavelen = 2.0f * std::numbers::pi_v<float> / f;
        if (wavelen < high_wavelen) {
          // high frequencies are kept
        } else if (wavelen > low_wavelen) {
          f /= scaling.factor;
        } else {
          const float smooth = (old_ctx / wavelen - scaling.low_freq_factor) /
                               (scaling.high_freq_factor - scaling.low_freq_factor);
          f = (1.0f - smooth) * f / scaling.factor + smooth * f;
        }
        break;
      }
    }
    if (!freq_factors.empty()) f /= freq_factors[static_cast<size_t>(i)];
    inv[static_cast<size_t>(i)] = f;
  }
  return inv;
}

}  // namespace nanoserve
