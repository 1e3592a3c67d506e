#include <vector>

#include "core/check.h"
#include "ops/matmul/matmul.h"
#include "ops/dequantize/dequantize.h"

namespace nanoserve {

void matmul_ref(const Tensor& w, const Tensor& x, Tensor& y) {
  NS_CHECK(w.ndim() == 2 && x.ndim() == 2 && y.ndim() == 2) << "matmul_ref wants 2-d tensors";
  const int64_t N = w.dim(0), K = w.dim(1), T = x.dim(0);
  NS_CHECK(x.dim(1) == K && y.dim(0) == T && y.dim(1) == N)
      << "shapes w" << w.shape_string() << " x" << x.shape_string() << " y" << y.shape_string();
  NS_CHECK(x.dtype() == DType::kF32 && y.dtype() == DType::kF32) << "x and y are f32";
  NS_CHECK(w.dtype() != DType::kI32) << "matmul of " << dtype_name(w.dtype());
  const auto* wb = static_cast<const uint8_t*>(w.data());
  const int64_t row_bytes = dtype_bytes(w.dtype(), K);
  const float* xs = x.data_as<const float>();
  float* ys = y.data_as<float>();
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t o = 0; o < N; ++o) {
    dequantize_row(w.dtype(), wb + o * row_bytes, row.data(), K);
    for (int64_t t = 0; t < T; ++t) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(row[k]) * xs[t * K + k];
      ys[t * N + o] = static_cast<float>(acc);
    }
  }
}

}  // namespace nanoserve
