#include <cmath>
#include <functional>

#include "core/check.h"
#include "ops/silu_mul/silu_mul.h"

namespace nanoserve {

void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out, ThreadPool& pool) {
  NS_CHECK(gate.numel() == up.numel() && gate.numel() == out.numel()) << "silu_mul shapes";
  const float* g = gate.data_as<const float>();
  const float* u = up.data_as<const float>();
  float* o = out.data_as<float>();
  auto range = [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  };
  const int64_t n = gate.numel();
  if (n >= (1 << 15)) {
    pool.parallel_for(n, std::ref(range));
  } else {
    range(0, n, 0);
  }
}

}  // namespace nanoserve
