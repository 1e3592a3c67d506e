#pragma once
// Dequantize: stored dtype -> f32, one row (or any run of whole blocks) at a time.
//
// Block layouts are ggml's, as stored in GGUF files (all little-endian):
//   Q8_0  [34 B / 32 values]:  f16 d; i8 q[32]
//         x = d * q
//   Q4_0  [18 B / 32 values]:  f16 d; u8 q[16]
//         x[j] = d * (lo(q[j]) - 8),  x[j+16] = d * (hi(q[j]) - 8)
//   Q4_1  [20 B / 32 values]:  f16 d; f16 m; u8 q[16]
//         x[j] = d * lo(q[j]) + m,    x[j+16] = d * hi(q[j]) + m
//   Q4_K  [144 B / 256 values]: f16 d; f16 dmin; u8 scales[12]; u8 q[128]
//         8 sub-blocks of 32, each with a 6-bit scale and min: x = d*sc * q4 - dmin*mn
//   Q6_K  [210 B / 256 values]: u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d
//         16 sub-blocks of 16, each with an 8-bit signed scale: x = d*sc * (q6 - 32)
// Plain types: F32 (copy), F16, BF16.

#include <cstdint>

#include "core/dtype.h"

namespace nanoserve {

// Writes n floats to dst from the encoded row at src.
// PRECOND: n % dtype_info(dtype).block_elems == 0; dtype is not I32.
// Reference implementation: plain scalar loops, the truth the fast paths are held to.
void dequantize_row(DType dtype, const void* src, float* dst, int64_t n);

}  // namespace nanoserve
