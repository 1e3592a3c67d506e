#include <cmath>
#include <functional>

#include "core/check.h"
#include "ops/rmsnorm/rmsnorm.h"

namespace nanoserve {

namespace {
void rmsnorm_row(const float* x, const float* w, float eps, int64_t D, float* y) {
  float part[16] = {};
  int64_t i = 0;
  for (; i + 16 <= D; i += 16) {
    for (int j = 0; j < 16; ++j) part[j] += x[i + j] * x[i + j];
  }
  for (; i < D; ++i) part[i & 15] += x[i] * x[i];
  for (int h = 8; h >= 1; h /= 2) {
    for (int j = 0; j < h; ++j) part[j] += part[j + h];
  }
  const float scale = 1.0f / std::sqrt(part[0] / static_cast<float>(D) + eps);
  for (i = 0; i < D; ++i) y[i] = (x[i] * scale) * w[i];
}
}  // namespace

void rmsnorm(const Tensor& x, const Tensor& w, float eps, Tensor& y, ThreadPool& pool) {
  const int64_t T = x.dim(0), D = x.dim(1);
  NS_CHECK(w.numel() == D && w.dtype() == DType::kF32 && y.dim(0) == T && y.dim(1) == D) << "rmsnorm shapes";
  const float* xs = x.data_as<const float>();
  const float* ws = w.data_as<const float>();
  float* ys = y.data_as<float>();
  auto rows = [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) rmsnorm_row(xs + t * D, ws, eps, D, ys + t * D);
  };
  if (T * D >= (1 << 16)) {
    pool.parallel_for(T, std::ref(rows));
  } else {
    rows(0, T, 0);
  }
}

}  // namespace nanoserve
