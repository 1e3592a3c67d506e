#include <cstring>

#include "core/check.h"
#include "core/half.h"
#include "ops/dequantize/dequantize.h"

namespace nanoserve {

namespace {

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Byte layouts of one block; offsets from its start.
constexpr int kQ8_0Bytes = 34;   // d @0, q @2
constexpr int kQ4_0Bytes = 18;   // d @0, q @2
constexpr int kQ4_1Bytes = 20;   // d @0, m @2, q @4
constexpr int kQ5_0Bytes = 22;   // d @0, qh @2 (u32), q @6
constexpr int kQ5_1Bytes = 24;   // d @0, m @2, qh @4 (u32), q @8
constexpr int kQ2_KBytes = 84;   // scales @0 (16 B), q @16 (64 B), d @80, dmin @82
constexpr int kQ3_KBytes = 110;  // hmask @0 (32 B), q @32 (64 B), scales @96 (12 B), d @108
constexpr int kQ4_KBytes = 144;  // d @0, dmin @2, scales @4 (12 B), q @16 (128 B)
constexpr int kQ5_KBytes = 176;  // d @0, dmin @2, scales @4 (12 B), qh @16 (32 B), q @48 (128 B)
constexpr int kQ6_KBytes = 210;  // ql @0 (128 B), qh @128 (64 B), scales @192 (16 B), d @208

void dequant_q8_0(const uint8_t* b, float* y) {
  const float d = fp16_to_f32(load_u16(b));
  const auto* q = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(q[j]);
}

void dequant_q4_0(const uint8_t* b, float* y) {
  const float d = fp16_to_f32(load_u16(b));
  const uint8_t* q = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((q[j] & 0x0f) - 8);
    y[j + 16] = d * static_cast<float>((q[j] >> 4) - 8);
  }
}

void dequant_q4_1(const uint8_t* b, float* y) {
  const float d = fp16_to_f32(load_u16(b));
  const float m = fp16_to_f32(load_u16(b + 2));
  const uint8_t* q = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(q[j] & 0x0f) + m;
    y[j + 16] = d * static_cast<float>(q[j] >> 4) + m;
  }
}

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Q5_0 / Q5_1: value j's fifth bit is bit j of the 32-bit qh.
// x = d * (q - off) + m: Q5_0 is off 16, m 0; Q5_1 off 0.
void dequant_q5(const uint8_t* q, uint32_t qh, float d, int off, float m, float* y) {
  for (int j = 0; j < 16; ++j) {
    const int lo = (q[j] & 0x0f) | static_cast<int>(((qh >> j) & 1) << 4);
    const int hi = (q[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
    y[j] = d * static_cast<float>(lo - off) + m;
    y[j + 16] = d * static_cast<float>(hi - off) + m;
  }
}

void dequant_q5_0(const uint8_t* b, float* y) {
  dequant_q5(b + 6, load_u32(b + 2), fp16_to_f32(load_u16(b)), 16, 0.0f, y);
}

void dequant_q5_1(const uint8_t* b, float* y) {
  dequant_q5(b + 8, load_u32(b + 4), fp16_to_f32(load_u16(b)), 0, fp16_to_f32(load_u16(b + 2)), y);
}

// Q2_K: 16 sub-blocks of 16; scales[i] holds sub-block i's 4-bit scale (low
// nibble) and 4-bit min (high nibble). Two halves of 128 values; in half h,
// value 32k + l (k = 0..3, l = 0..31) is bits 2k..2k+1 of q[32h + l], in
// sub-block 8h + 2k + l / 16.  x = d*sc * q2 - dmin*mn.
void dequant_q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* q = b + 16;
  const float d = fp16_to_f32(load_u16(b + 80));
  const float dmin = fp16_to_f32(load_u16(b + 82));
  for (int i = 0; i < 256; ++i) {
    const int h = i / 128, k = (i % 128) / 32, l = i % 32;
    const int s = scales[8 * h + 2 * k + l / 16];
    const int v = (q[32 * h + l] >> (2 * k)) & 3;
    y[i] = d * static_cast<float>(s & 0x0f) * static_cast<float>(v) - dmin * static_cast<float>(s >> 4);
  }
}

// Q3_K: 16 sub-blocks of 16 with 6-bit scales stored as sc + 32 in 12 bytes:
// low 4 bits of scale i in scales[i % 8] (i < 8: low nibble, else high nibble),
// high 2 bits in scales[8 + i % 4] bits 2*(i / 4)..+1. Value i = 32k + l of
// half h (as Q2_K) takes its low 2 bits from q[32h + l] >> 2k and its third bit
// from hmask[l] bit 4h + k; a clear bit subtracts 4.  x = d*sc * q3.
int q3_k_scale(int i, const uint8_t* s) {
  const int lo = i < 8 ? (s[i] & 0x0f) : (s[i - 8] >> 4);
  const int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
  return (lo | (hi << 4)) - 32;
}

void dequant_q3_k(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* q = b + 32;
  const uint8_t* scales = b + 96;
  const float d = fp16_to_f32(load_u16(b + 108));
  for (int i = 0; i < 256; ++i) {
    const int h = i / 128, k = (i % 128) / 32, l = i % 32;
    const int sc = q3_k_scale(8 * h + 2 * k + l / 16, scales);
    const int low = (q[32 * h + l] >> (2 * k)) & 3;
    const int v = low - (((hmask[l] >> (4 * h + k)) & 1) ? 0 : 4);
    y[i] = d * static_cast<float>(sc) * static_cast<float>(v);
  }
}

// Q4_K packs 8 six-bit scales and 8 six-bit mins into 12 bytes:
//   sub-blocks 0..3: scale = s[j] & 63,                      min = s[j+4] & 63
//   sub-blocks 4..7: scale = (s[j+4] & 15) | (s[j-4] >> 6) << 4, min = (s[j+4] >> 4) | (s[j] >> 6) << 4
void q4_k_scale_min(int j, const uint8_t* s, int* scale, int* min) {
  if (j < 4) {
    *scale = s[j] & 63;
    *min = s[j + 4] & 63;
  } else {
    *scale = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    *min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q4_K, and Q5_K (kFifthBit): the scales, then four chunks of 64 values; each
// chunk's 32 bytes hold sub-block 2c in the low nibbles and sub-block 2c+1 in the
// high nibbles. Q5_K adds a fifth bit per value: value 64c + l (l < 32) has it at
// qh[l] bit 2c, value 64c + 32 + l at bit 2c + 1.
template <bool kFifthBit>
void dequant_k4(const uint8_t* b, float* y) {
  const float d = fp16_to_f32(load_u16(b));
  const float dmin = fp16_to_f32(load_u16(b + 2));
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* q = b + (kFifthBit ? 48 : 16);
  for (int c = 0; c < 4; ++c) {
    int sc0, m0, sc1, m1;
    q4_k_scale_min(2 * c, scales, &sc0, &m0);
    q4_k_scale_min(2 * c + 1, scales, &sc1, &m1);
    const float d0 = d * static_cast<float>(sc0), min0 = dmin * static_cast<float>(m0);
    const float d1 = d * static_cast<float>(sc1), min1 = dmin * static_cast<float>(m1);
    for (int l = 0; l < 32; ++l) {
      int v0 = q[32 * c + l] & 0x0f, v1 = q[32 * c + l] >> 4;
      if constexpr (kFifthBit) {
        v0 |= ((qh[l] >> (2 * c)) & 1) << 4;
        v1 |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
      }
      y[64 * c + l] = d0 * static_cast<float>(v0) - min0;
      y[64 * c + 32 + l] = d1 * static_cast<float>(v1) - min1;
    }
  }
}

void dequant_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = fp16_to_f32(load_u16(b + 208));
  // Two halves of 128 values. In each half, value l + 32k (k = 0..3) takes its low
  // 4 bits from ql (k even: low nibble, k odd: high nibble; bytes l or l+32) and its
  // high 2 bits from qh[l] bits 2k..2k+1. Scale: one per 16 values.
  for (int h = 0; h < 2; ++h) {
    const uint8_t* L = ql + 64 * h;
    const uint8_t* H = qh + 32 * h;
    const int8_t* S = sc + 8 * h;
    float* out = y + 128 * h;
    for (int l = 0; l < 32; ++l) {
      const int q0 = ((L[l] & 0x0f) | (((H[l] >> 0) & 3) << 4)) - 32;
      const int q1 = ((L[l + 32] & 0x0f) | (((H[l] >> 2) & 3) << 4)) - 32;
      const int q2 = ((L[l] >> 4) | (((H[l] >> 4) & 3) << 4)) - 32;
      const int q3 = ((L[l + 32] >> 4) | (((H[l] >> 6) & 3) << 4)) - 32;
      const int s = l / 16;
      out[l] = d * static_cast<float>(S[s + 0]) * static_cast<float>(q0);
      out[l + 32] = d * static_cast<float>(S[s + 2]) * static_cast<float>(q1);
      out[l + 64] = d * static_cast<float>(S[s + 4]) * static_cast<float>(q2);
      out[l + 96] = d * static_cast<float>(S[s + 6]) * static_cast<float>(q3);
    }
  }
}

// MXFP4: byte 0 is the E8M0 scale e (2^(e - 127)); value j < 16 is the E2M1
// code in the low nibble of byte 1 + j, value j + 16 the high nibble. E2M1:
// sign bit 3, then {0, 0.5, 1, 1.5, 2, 3, 4, 6}. Computed as ggml does, twice
// the E2M1 value (an integer) times half the scale, so every bit pattern
// decodes alike, e = 255 included (finite below 2^128, not the spec's NaN).
constexpr int kMxfp4Bytes = 17;
float e8m0_half(uint8_t e) {  // 2^(e - 128), e = 0 and 1 as subnormals
  const uint32_t bits = e < 2 ? uint32_t{0x00200000} << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
void dequant_mxfp4(const uint8_t* b, float* out) {
  static constexpr float kTwiceE2M1[16] = {0.0f, 1.0f,  2.0f,  3.0f,  4.0f,  6.0f,  8.0f,  12.0f,
                                           0.0f, -1.0f, -2.0f, -3.0f, -4.0f, -6.0f, -8.0f, -12.0f};
  const float d = e8m0_half(b[0]);
  for (int j = 0; j < 16; ++j) {
    out[j] = kTwiceE2M1[b[1 + j] & 0x0F] * d;
    out[j + 16] = kTwiceE2M1[b[1 + j] >> 4] * d;
  }
}

template <int kBlockElems, int kBlockBytes, void (*kBlock)(const uint8_t*, float*)>
void dequant_blocks(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n / kBlockElems; ++i) kBlock(b + i * kBlockBytes, dst + i * kBlockElems);
}

}  // namespace

void dequantize_row(DType dtype, const void* src, float* dst, int64_t n) {
  NS_CHECK(n >= 0 && n % dtype_info(dtype).block_elems == 0)
      << n << " values is not whole blocks of " << dtype_name(dtype);
  const auto* bytes = static_cast<const uint8_t*>(src);
  switch (dtype) {
    case DType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(load_u16(bytes + 2 * i));
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(bytes + 2 * i));
      return;
    case DType::kQ8_0: return dequant_blocks<32, kQ8_0Bytes, dequant_q8_0>(src, dst, n);
    case DType::kQ4_0: return dequant_blocks<32, kQ4_0Bytes, dequant_q4_0>(src, dst, n);
    case DType::kQ4_1: return dequant_blocks<32, kQ4_1Bytes, dequant_q4_1>(src, dst, n);
    case DType::kQ4_K: return dequant_blocks<256, kQ4_KBytes, dequant_k4<false>>(src, dst, n);
    case DType::kQ6_K: return dequant_blocks<256, kQ6_KBytes, dequant_q6_k>(src, dst, n);
    case DType::kQ5_0: return dequant_blocks<32, kQ5_0Bytes, dequant_q5_0>(src, dst, n);
    case DType::kQ5_1: return dequant_blocks<32, kQ5_1Bytes, dequant_q5_1>(src, dst, n);
    case DType::kQ2_K: return dequant_blocks<256, kQ2_KBytes, dequant_q2_k>(src, dst, n);
    case DType::kQ3_K: return dequant_blocks<256, kQ3_KBytes, dequant_q3_k>(src, dst, n);
    case DType::kQ5_K: return dequant_blocks<256, kQ5_KBytes, dequant_k4<true>>(src, dst, n);
    case DType::kF8E4M3:  // the unscaled values: the caller applies the weight's scales
      for (int64_t i = 0; i < n; ++i) dst[i] = f8e4m3_to_f32(bytes[i]);
      return;
    case DType::kMXFP4: return dequant_blocks<32, kMxfp4Bytes, dequant_mxfp4>(src, dst, n);
    case DType::kI32:
    case DType::kU8: break;
  }
  NS_CHECK(false) << "dequantize_row: no float form for " << dtype_name(dtype);
}

}  // namespace nanoserve
