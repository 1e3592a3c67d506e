#include "ops/rope/rope_freqs.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/check.h"

namespace nanoserve {

float rope_attention_factor(const RopeScaling& s) {
  if (s.type != RopeScaling::Type::kYarn) return 1.0f;
  if (s.attention_factor > 0.0f) return s.attention_factor;
  return s.factor <= 1.0f ? 1.0f : static_cast<float>(0.1 * std::log(static_cast<double>(s.factor)) + 1.0);
}

namespace {

// The dim (of rope_dim) whose frequency turns `rotations` times over ctx positions, in double.
double yarn_correction_dim(double rotations, double rope_dim, double theta, double ctx) {
  return rope_dim * std::log(ctx / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(theta));
}

}  // namespace

std::vector<float> rope_inv_freqs(int64_t rope_dim, float theta, const RopeScaling& scaling,
                                  std::span<const float> freq_factors) {
  NS_CHECK(rope_dim > 0 && rope_dim % 2 == 0) << "rope_dim " << rope_dim;
  const int64_t half = rope_dim / 2;
  NS_CHECK(freq_factors.empty() || static_cast<int64_t>(freq_factors.size()) == half) << "rope freq factors";
  std::vector<float> inv(static_cast<size_t>(half));
  // YaRN's ramp ends, in double as Python computes them.
  double low = 0.0, high = 0.0;
  if (scaling.type == RopeScaling::Type::kYarn) {
    const double d = static_cast<double>(rope_dim),
                 ctx = static_cast<double>(scaling.original_context_length);
    low = yarn_correction_dim(scaling.beta_fast, d, theta, ctx);
    high = yarn_correction_dim(scaling.beta_slow, d, theta, ctx);
    if (scaling.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, d - 1.0);
    if (low == high) high += 0.001;  // as transformers: no zero-width ramp
  }
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
      case RopeScaling::Type::kYarn: {
        // f32 like torch: ramp = clamp((i - low) / (high - low), 0, 1); the
        // extrapolated f weighs 1 - ramp, the interpolated f / factor ramp.
        const float pos = std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(rope_dim));
        const float extrap = 1.0f / pos, interp = 1.0f / (scaling.factor * pos);
        float ramp = (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low);
        ramp = std::clamp(ramp, 0.0f, 1.0f);
        const float keep = 1.0f - ramp;
        f = interp * (1.0f - keep) + extrap * keep;
        break;
      }
    }
    if (!freq_factors.empty()) f /= freq_factors[static_cast<size_t>(i)];
    inv[static_cast<size_t>(i)] = f;
  }
  return inv;
}

}  // namespace nanoserve
