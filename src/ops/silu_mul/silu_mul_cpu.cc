// silu_mul on the CPU: out = gate / (1 + exp(-gate)) * up, with exp_approx
// (ops/math/exp_approx.h), 8 lanes at a time where AVX2 is built in and the
// same operations per element in plain C++ for the rest: one result per
// element whatever the split. This file is compiled with -ffp-contract=off
// (CMakeLists.txt), so both forms give the same bits.

#include <functional>

#include "core/check.h"
#include "ops/math/exp_approx.h"
#include "ops/silu_mul/silu_mul.h"

namespace nanoserve {

namespace {
inline float silu_mul_one(float g, float u) {
  return g / (1.0f + exp_approx(-g)) * u;
}
}  // namespace

void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out, ThreadPool& pool) {
  NS_CHECK(gate.numel() == up.numel() && gate.numel() == out.numel()) << "silu_mul shapes";
  const float* g = gate.data_as<const float>();
  const float* u = up.data_as<const float>();
  float* o = out.data_as<float>();
  auto range = [&](int64_t b, int64_t e, int) {
    int64_t i = b;
#if defined(__AVX2__) && defined(__FMA__)
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    for (; i + 8 <= e; i += 8) {
      const __m256 gv = _mm256_loadu_ps(g + i);
      const __m256 den = _mm256_add_ps(one, exp_approx8(_mm256_xor_ps(gv, sign)));
      _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_div_ps(gv, den), _mm256_loadu_ps(u + i)));
    }
#endif
    for (; i < e; ++i) o[i] = silu_mul_one(g[i], u[i]);
  };
  const int64_t n = gate.numel();
  if (n >= (1 << 15)) {
    pool.parallel_for(n, std::ref(range));
  } else {
    range(0, n, 0);
  }
}

}  // namespace nanoserve
