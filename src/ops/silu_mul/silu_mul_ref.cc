#include <cmath>

#include "core/check.h"
#include "ops/silu_mul/silu_mul.h"

namespace nanoserve {

void silu_mul_ref(const Tensor& gate, const Tensor& up, Tensor& out) {
  NS_CHECK(gate.numel() == up.numel() && gate.numel() == out.numel()) << "silu_mul shapes";
  const float* g = gate.data_as<const float>();
  const float* u = up.data_as<const float>();
  float* o = out.data_as<float>();
  for (int64_t i = 0; i < gate.numel(); ++i) {
    const double x = g[i];
    o[i] = static_cast<float>(x / (1.0 + std::exp(-x)) * u[i]);
  }
}

}  // namespace nanoserve
