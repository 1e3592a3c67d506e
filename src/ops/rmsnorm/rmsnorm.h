#pragma once
// y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w
//   x, y: [T, D] f32 (y may be x), w: [D] f32

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace nanoserve {

void rmsnorm_ref(const Tensor& x, const Tensor& w, float eps, Tensor& y);
// The sum of squares uses 16 interleaved partials combined pairwise: a fixed
// order per row, whatever the thread split.
void rmsnorm(const Tensor& x, const Tensor& w, float eps, Tensor& y, ThreadPool& pool);

}  // namespace nanoserve
