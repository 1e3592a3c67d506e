#pragma once
// Internal to the CPU matmul (matmul_cpu.cc, matmul_cpu_blocks.cc,
// matmul_cpu_gemv.cc, matmul_cpu_kquant.cc): the AVX2 helpers they share, the single-token
// prefetch, and the entry points of the split-out kernels.
// Inline because they sit inside the kernels' inner loops.

#include <cstdint>

#include "core/dtype.h"
#include "core/tensor.h"
#include "ops/matmul/quant_blocks.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace nanoserve::matmul_cpu {

using quant::BlockQ8Act;
using quant::kBlock;

// Single-token rows (T = 1): R rows at a time give R independent accumulator
// chains per block (one row alone is bound by the 4-cycle fmadd latency of its chain).
constexpr int kGemvRows = 4;
// How far ahead the prefetch runs, in groups of kGemvRows rows.
constexpr int kGemvPrefetchGroups = 2;

#if defined(__AVX2__)
// Sum of u8 x s8 products, 4 per int32 lane, exact.
inline __m256i dot_u8s8(__m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
  // No saturation: |u| <= 128 and |s| <= 127, so a pair is at most 32512.
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

inline float hsum8(__m256 v) {
  // ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)), the same order every call.
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// R rows read in step defeat the hardware stream prefetcher (measured: T = 1
// matmuls ~2x slower than one row at a time with weights in DRAM), so each
// block step also prefetches its share of the group of R rows
// kGemvPrefetchGroups ahead, which keeps the thread's range streaming (one
// group ahead measured a few % slower, docs/forward.md). `limit`: the end of
// the thread's rows; `nb`: block steps per row.
class GemvPrefetch {
 public:
  GemvPrefetch(const uint8_t* base, int64_t row_bytes, int64_t o0, int R, int64_t nb, const uint8_t* limit)
      : next_(reinterpret_cast<uintptr_t>(base) +
              static_cast<uintptr_t>((o0 + kGemvPrefetchGroups * R) * row_bytes)),
        step_(static_cast<uintptr_t>((R * row_bytes + nb - 1) / nb)),
        limit_(reinterpret_cast<uintptr_t>(limit)) {}
  void at(int64_t b) const { range(next_ + static_cast<uintptr_t>(b) * step_, step_, limit_); }
  // Prefetches [a, a + n) up to limit.
  static void range(uintptr_t a, uintptr_t n, uintptr_t limit) {
    for (uintptr_t l = a; l < a + n && l < limit; l += 64)
      _mm_prefetch(reinterpret_cast<const char*>(l), _MM_HINT_T0);
  }

 private:
  uintptr_t next_;
  uintptr_t step_;  // bytes of that group per block step
  uintptr_t limit_;
};
#endif

#if defined(__AVX2__)
// y[o] for o in [o_begin, o_end) of a Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0 w and one token's
// nb activation blocks xa (matmul_cpu_gemv.cc).
void gemv_rows(DType dt, const uint8_t* base, int64_t row_bytes, const BlockQ8Act* xa, int64_t nb, float* y,
               int64_t o_begin, int64_t o_end);
#endif

// The longest K of a quantized row the block kernels decode on the stack.
constexpr int64_t kMaxQ4K = 16384;
// Rows of dtypes without a direct kernel are decoded on the stack.
constexpr int64_t kMaxGenericK = 16384;

// Dtypes read through the 8-bit activations: the block kernels, the Q5 rows
// and the K-quant kernels.
bool is_quantized(DType t);

// The activations of T tokens as the K-quant kernels read them: per token and
// super-block of 256 values one BlockQ8KAct (one scale, the per-16 sums).
struct KQuantActs {
  const quant::BlockQ8KAct* xk;  // [T][nsb]
  int64_t nsb;                   // super-blocks per token, K / 256
};

// True for the K-quants, which all have a direct kernel: Q2_K .. Q6_K.
bool kquant_direct(DType dt);

// y[t][o] for o in [o_begin, o_end), every t < T, of a Q2_K .. Q6_K w
// whose row o starts at base + o * row_bytes. y is [T, N].
// Reduction order per output (the same for any T, tiling or thread split):
// super-blocks in order; within one, the exact integer dot of the whole
// super-block with its sub-block scales (8 int32 lanes), converted and
// fmadd'ed with d d_x into 8 float lanes, then (Q2_K, Q4_K, Q5_K) the integer
// min terms fnmadd'ed with dmin d_x; the lanes summed by hsum8.
void kquant_rows(DType dt, const uint8_t* base, int64_t row_bytes, const KQuantActs& a, int64_t T, float* y,
                 int64_t N, int64_t o_begin, int64_t o_end);

// y[t][o] for o in [o_begin, o_end), every t < T, of any w the x8 kernels do
// not take (matmul_cpu_blocks.cc): x the f32 activations [T, K], xa their
// per-32 rounding, acts the per-256 one. y is [T, N].
void matmul_rows(const Tensor& w, const float* x, const BlockQ8Act* xa, const KQuantActs& acts, int64_t T,
                 float* y, int64_t o_begin, int64_t o_end);

// The plain scalar kernel (the non-AVX2 build's path), callable on any build so
// the tests hold it to the reference too. Same contract as kquant_rows.
void kquant_rows_scalar(DType dt, const uint8_t* base, int64_t row_bytes, const KQuantActs& a, int64_t T,
                        float* y, int64_t N, int64_t o_begin, int64_t o_end);

}  // namespace nanoserve::matmul_cpu
