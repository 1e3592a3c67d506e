#pragma once
// out[t] = table[tokens[t]] in f32: the token embedding lookup.
//   table: [V, D] in F32, F16, BF16, Q8_0, Q4_0 or Q4_1; out: [T, D] f32
// PRECOND: every token is in [0, V) (the model checks ids before the step).

#include <cstdint>
#include <span>

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace nanoserve {

void embedding_ref(const Tensor& table, std::span<const int32_t> tokens, Tensor& out);
void embedding(const Tensor& table, std::span<const int32_t> tokens, Tensor& out, ThreadPool& pool);

}  // namespace nanoserve
