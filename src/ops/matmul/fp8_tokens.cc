#include "ops/matmul/fp8_tokens.h"

#include <cmath>

#include "core/half.h"

namespace nanoserve {

void e4m3_tokens_round_trip(float* x, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * cols;
    float amax = 0.0f;
    for (int64_t i = 0; i < cols; ++i) {
      row[i] = bf16_to_f32(f32_to_bf16(row[i]));
      amax = std::fmax(amax, std::fabs(row[i]));
    }
    const float scale = amax > 0.0f ? amax / kF8E4M3Max : 1.0f;
    for (int64_t i = 0; i < cols; ++i) row[i] = f8e4m3_to_f32(f32_to_f8e4m3(row[i] / scale)) * scale;
  }
}

}  // namespace nanoserve
