#include <cmath>
#include <functional>

#include "core/check.h"
#include "ops/gelu_mul/gelu_mul.h"

namespace nanoserve {

void gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor& out, ThreadPool& pool) {
  NS_CHECK(gate.numel() == up.numel() && gate.numel() == out.numel()) << "gelu_tanh_mul shapes";
  const float* g = gate.data_as<const float>();
  const float* u = up.data_as<const float>();
  float* o = out.data_as<float>();
  constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
  constexpr float kKappa = 0.044715f;
  auto range = [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      const float x = g[i];
      o[i] = 0.5f * x * (1.0f + std::tanh(kBeta * (x + kKappa * x * x * x))) * u[i];
    }
  };
  const int64_t n = gate.numel();
  if (n >= (1 << 15)) {
    pool.parallel_for(n, std::ref(range));
  } else {
    range(0, n, 0);
  }
}

}  // namespace nanoserve
