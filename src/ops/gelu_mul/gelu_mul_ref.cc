#include <cmath>

#include "core/check.h"
#include "ops/gelu_mul/gelu_mul.h"

namespace nanoserve {

void gelu_tanh_mul_ref(const Tensor& gate, const Tensor& up, Tensor& out) {
  NS_CHECK(gate.numel() == up.numel() && gate.numel() == out.numel()) << "gelu_tanh_mul shapes";
  const float* g = gate.data_as<const float>();
  const float* u = up.data_as<const float>();
  float* o = out.data_as<float>();
  const double k = std::sqrt(2.0 / M_PI);
  for (int64_t i = 0; i < gate.numel(); ++i) {
    const double x = g[i];
    o[i] = static_cast<float>(0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x))) * u[i]);
  }
}

}  // namespace nanoserve
