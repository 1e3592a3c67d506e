#pragma once
// y[t][o] = W[o] · x[t]: every linear layer and the lm_head.
//   w: [N, K] in any dtype but I32 (stored dtype, e.g. a GGUF mmap view): F32,
//      F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
//   x: [T, K] f32, y: [T, N] f32
//
// Determinism: each y[t][o] is reduced in one fixed order that depends only on
// W[o] and x[t], so results are bitwise identical for any thread count and any
// batch (a token's output never depends on the other tokens).

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace nanoserve {

// Plain truth: dequantize each row of W to f32, dot with x[t] in double.
void matmul_ref(const Tensor& w, const Tensor& x, Tensor& y);

// Scratch bytes the fast path needs for an input of T tokens of K values
// (the 8-bit activation blocks of x, both roundings).
int64_t matmul_scratch_bytes(int64_t T, int64_t K);

// One weight and where its product goes; all pairs of a call share x.
struct MatmulPair {
  const Tensor* w;  // [N_i, K]
  Tensor* y;        // [T, N_i] f32
};

// Fast path. Quantized weights are dotted against x quantized per token into
// 8-bit blocks (as llama.cpp does): of 32 values for the 32-value types, of 256
// with per-16 sums for the K-quants; float weights against x in f32.
// x is quantized once, and the output rows of all pairs are split over the
// pool's threads in one pass, each weight row read once for all T tokens.
void matmul(std::span<const MatmulPair> pairs, const Tensor& x, ThreadPool& pool, std::span<std::byte> scratch);
void matmul(const Tensor& w, const Tensor& x, Tensor& y, ThreadPool& pool, std::span<std::byte> scratch);

// Packs a Q4_0, Q4_1, Q8_0, Q4_K, Q5_K or Q6_K weight once into the layout of
// the interleaved-row CPU kernels (ops/matmul/matmul_cpu_x8.h), kept while w's
// owner lives; matmul then reads the packed copy. A weight not prepared gives
// the same results, bit for bit, packed group by group in every call (slower
// at small T). No-op for the other dtypes and for tensors without an owner.
void matmul_prepare(const Tensor& w);

}  // namespace nanoserve
