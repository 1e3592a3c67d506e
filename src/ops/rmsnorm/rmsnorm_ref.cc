#include <cmath>

#include "core/check.h"
#include "ops/rmsnorm/rmsnorm.h"

namespace nanoserve {

void rmsnorm_ref(const Tensor& x, const Tensor& w, float eps, Tensor& y) {
  const int64_t T = x.dim(0), D = x.dim(1);
  NS_CHECK(w.numel() == D && y.dim(0) == T && y.dim(1) == D) << "rmsnorm shapes";
  const float* xs = x.data_as<const float>();
  const float* ws = w.data_as<const float>();
  float* ys = y.data_as<float>();
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0.0;
    for (int64_t i = 0; i < D; ++i) ss += static_cast<double>(xs[t * D + i]) * xs[t * D + i];
    const double scale = 1.0 / std::sqrt(ss / static_cast<double>(D) + eps);
    for (int64_t i = 0; i < D; ++i) ys[t * D + i] = static_cast<float>(xs[t * D + i] * scale * ws[i]);
  }
}

}  // namespace nanoserve
