#pragma once
// The GGUF block formats that the matmul and embedding kernels read, and the
// 8-bit activation blocks the fast matmul quantizes its input into.
//
//   Q8_0: 32 values = d * q,           q int8           (34 bytes)
//   Q4_0: 32 values = d * (q - 8),     q 4-bit unsigned (18 bytes)
//   Q4_1: 32 values = d * q + m,       q 4-bit unsigned (20 bytes)
// A 4-bit block stores value j in the low nibble of qs[j] and value j + 16 in
// the high nibble of qs[j].

#include <cstdint>
#include <cstring>

#include "core/dtype.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace nanoserve::quant {

constexpr int kBlock = 32;

struct BlockQ8_0 {
  uint16_t d;  // f16
  int8_t qs[kBlock];
};
struct BlockQ4_0 {
  uint16_t d;  // f16
  uint8_t qs[kBlock / 2];
};
struct BlockQ4_1 {
  uint16_t d;  // f16
  uint16_t m;  // f16
  uint8_t qs[kBlock / 2];
};
// Q5_0 / Q5_1: the Q4 layout plus qh, whose bit j is value j's fifth bit;
// Q5_0 values are d * (q - 16), Q5_1 values d * q + m.
struct BlockQ5_0 {
  uint16_t d;  // f16
  uint8_t qh[4];
  uint8_t qs[kBlock / 2];
};
struct BlockQ5_1 {
  uint16_t d;  // f16
  uint16_t m;  // f16
  uint8_t qh[4];
  uint8_t qs[kBlock / 2];
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24);

// One quantized activation block: x ≈ d * q, s = d * sum(q) (what a Q4_1 min
// multiplies), per token and per 32 values, so a token's quantization never
// depends on the other tokens of the batch.
struct BlockQ8Act {
  float d;
  float s;
  int8_t qs[kBlock];
};
static_assert(sizeof(BlockQ8Act) == 40);

// The activations of a K-quant matmul, per token and per super-block of 256
// values: x ≈ d * q, and bsums[i] = sum of q over values 16i..16i+15 (what the
// K-quant mins and offsets multiply). One scale per 256 values lets a
// super-block's sub-block dots be summed as integers (matmul_cpu_kquant.cc).
constexpr int kSuperBlock = 256;
struct BlockQ8KAct {
  float d;
  int8_t qs[kSuperBlock];
  int16_t bsums[kSuperBlock / 16];
};
static_assert(sizeof(BlockQ8KAct) == 292);

inline float f16_to_f32(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}

inline float bf16_to_f32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace nanoserve::quant

namespace nanoserve::quant {

// dst[n] = the n values of one stored row of `dtype` (any but I32), in plain
// scalar code. PRECOND: n is whole blocks.
void row_to_f32(DType dtype, const void* src, float* dst, int64_t n);

// True for the weight dtypes embedding reads (every dtype but I32).
bool row_dtype_supported(DType dtype);

// x[K] -> K/32 activation blocks: d = max|x| / 127, q = nearbyint(x / d)
// (q = x * (1 / d), 0 when d = 0), s = d * sum(q). PRECOND: K % 32 == 0.
// Defined for every input: a block holding a NaN or an infinity gets
// d = s = NaN and q = 0 (so the matmul output it feeds is NaN, never a finite
// number); a block with d below FLT_MIN gets d = s = 0 and q = 0.
// quantize_row_q8 is the SIMD version where the CPU has one; it equals the
// plain loop quantize_row_q8_scalar bit for bit, NaN and infinities included.
void quantize_row_q8(const float* x, int64_t K, BlockQ8Act* out);
void quantize_row_q8_scalar(const float* x, int64_t K, BlockQ8Act* out);

// x[K] -> K/256 K-quant activation blocks, by the same rules per 256 values:
// d = max|x| / 127, q = nearbyint(x * (1 / d)), bsums the sums of q per 16;
// a block holding a NaN or an infinity gets d = NaN, q = 0 and bsums = 0; a
// block with d below FLT_MIN gets d = 0, q = 0 and bsums = 0. PRECOND:
// K % 256 == 0. quantize_row_q8k (AVX2 where the CPU has it) equals the plain
// loop quantize_row_q8k_scalar bit for bit.
void quantize_row_q8k(const float* x, int64_t K, BlockQ8KAct* out);
void quantize_row_q8k_scalar(const float* x, int64_t K, BlockQ8KAct* out);

}  // namespace nanoserve::quant
