#include <cmath>

#include "core/check.h"
#include "ops/rope/rope.h"

namespace nanoserve {

void rope_ref(Tensor& x, std::span<const int32_t> positions, std::span<const float> inv_freq) {
  const int64_t T = x.dim(0), H = x.dim(1), D = x.dim(2);
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  NS_CHECK(static_cast<int64_t>(positions.size()) == T && 2 * half <= D) << "rope shapes";
  float* xs = x.data_as<float>();
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      float* v = xs + (t * H + h) * D;
      for (int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(static_cast<float>(positions[t]) * inv_freq[i]);
        const double c = std::cos(angle), s = std::sin(angle);
        const double a = v[2 * i], b = v[2 * i + 1];
        v[2 * i] = static_cast<float>(a * c - b * s);
        v[2 * i + 1] = static_cast<float>(a * s + b * c);
      }
    }
  }
}

}  // namespace nanoserve
