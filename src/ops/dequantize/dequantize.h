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
//   Q5_0  [22 B / 32 values]:  f16 d; u32 qh; u8 q[16]
//         q5[j] = lo(q[j]) | bit j of qh << 4 (j+16: hi nibble, bit j+16); x = d * (q5 - 16)
//   Q5_1  [24 B / 32 values]:  f16 d; f16 m; u32 qh; u8 q[16]
//         as Q5_0, x = d * q5 + m
//   Q2_K  [84 B / 256 values]: u8 scales[16]; u8 q[64]; f16 d; f16 dmin
//         16 sub-blocks of 16, a 4-bit scale and min each: x = d*sc * q2 - dmin*mn
//   Q3_K  [110 B / 256 values]: u8 hmask[32]; u8 q[64]; u8 scales[12]; f16 d
//         16 sub-blocks of 16, 6-bit scale sc (stored + 32): x = d*sc * (q2 + 4*hbit - 4)
//   Q5_K  [176 B / 256 values]: f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 q[128]
//         as Q4_K with a fifth bit per value from qh: x = d*sc * q5 - dmin*mn
//   MXFP4 [17 B / 32 values]: u8 e; u8 q[16]   (OCP microscaling FP4, as ggml stores it)
//         x[j] = e2m1(lo(q[j])) * 2^(e-127),  x[j+16] = e2m1(hi(q[j])) * 2^(e-127)
// The exact bit positions are at each decoder below and in docs/kernels.md.
// Plain types: F32 (copy), F16, BF16.

#include <cstdint>

#include "core/dtype.h"

namespace nanoserve {

// Writes n floats to dst from the encoded row at src.
// PRECOND: n % dtype_info(dtype).block_elems == 0; dtype is not I32.
// Reference implementation: plain scalar loops, the truth the fast paths are held to.
void dequantize_row(DType dtype, const void* src, float* dst, int64_t n);

}  // namespace nanoserve
