#include <cmath>

#include "core/check.h"
#include "ops/argmax/argmax.h"

namespace nanoserve {

void argmax_ref(const Tensor& logits, std::span<int32_t> out) {
  NS_CHECK(logits.dtype() == DType::kF32 && logits.ndim() == 2 && logits.is_contiguous())
      << "argmax_ref: logits must be a contiguous [R, V] f32 tensor";
  const int64_t R = logits.dim(0), V = logits.dim(1);
  NS_CHECK(static_cast<int64_t>(out.size()) == R && V > 0) << "argmax_ref shapes";
  const float* l = logits.data_as<const float>();
  for (int64_t r = 0; r < R; ++r) {
    int64_t best = -1;
    for (int64_t i = 0; i < V; ++i) {
      const float v = l[r * V + i];
      if (std::isnan(v)) continue;
      if (best < 0 || v > l[r * V + best]) best = i;  // strict: an equal value later keeps the lower index
    }
    out[r] = static_cast<int32_t>(best < 0 ? V - 1 : best);
  }
}

}  // namespace nanoserve
