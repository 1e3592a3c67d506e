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
constexpr int kQ4_KBytes = 144;  // d @0, dmin @2, scales @4 (12 B), q @16 (128 B)
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

void dequant_q4_k(const uint8_t* b, float* y) {
  const float d = fp16_to_f32(load_u16(b));
  const float dmin = fp16_to_f32(load_u16(b + 2));
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  // Four chunks of 64 values; each chunk's 32 bytes hold sub-block 2c in the low
  // nibbles and sub-block 2c+1 in the high nibbles.
  for (int c = 0; c < 4; ++c) {
    int sc0, m0, sc1, m1;
    q4_k_scale_min(2 * c, scales, &sc0, &m0);
    q4_k_scale_min(2 * c + 1, scales, &sc1, &m1);
    const float d0 = d * static_cast<float>(sc0), min0 = dmin * static_cast<float>(m0);
    const float d1 = d * static_cast<float>(sc1), min1 = dmin * static_cast<float>(m1);
    for (int l = 0; l < 32; ++l) {
      y[64 * c + l] = d0 * static_cast<float>(q[32 * c + l] & 0x0f) - min0;
      y[64 * c + 32 + l] = d1 * static_cast<float>(q[32 * c + l] >> 4) - min1;
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
    case DType::kQ4_K: return dequant_blocks<256, kQ4_KBytes, dequant_q4_k>(src, dst, n);
    case DType::kQ6_K: return dequant_blocks<256, kQ6_KBytes, dequant_q6_k>(src, dst, n);
    case DType::kI32: break;
  }
  NS_CHECK(false) << "dequantize_row: no float form for " << dtype_name(dtype);
}

}  // namespace nanoserve
