#include <functional>

#include "core/check.h"
#include "ops/embedding/embedding.h"
#include "ops/matmul/quant_blocks.h"

namespace nanoserve {

// A gather: T rows of D values. Memory-bound and small next to the matmuls,
// so the scalar block decoder with threads over tokens is enough.
void embedding(const Tensor& table, std::span<const int32_t> tokens, Tensor& out, ThreadPool& pool) {
  const int64_t V = table.dim(0), D = table.dim(1), T = static_cast<int64_t>(tokens.size());
  NS_CHECK(out.dim(0) == T && out.dim(1) == D && quant::row_dtype_supported(table.dtype())) << "embedding shapes";
  const auto* base = static_cast<const uint8_t*>(table.data());
  const int64_t row_bytes = dtype_bytes(table.dtype(), D);
  float* o = out.data_as<float>();
  auto rows = [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      NS_CHECK(tokens[t] >= 0 && tokens[t] < V) << "token " << tokens[t] << " outside vocab " << V;
      quant::row_to_f32(table.dtype(), base + tokens[t] * row_bytes, o + t * D, D);
    }
  };
  if (T >= 64) {
    pool.parallel_for(T, std::ref(rows));
  } else {
    rows(0, T, 0);
  }
}

}  // namespace nanoserve
