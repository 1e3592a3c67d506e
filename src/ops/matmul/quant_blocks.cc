#include "ops/matmul/quant_blocks.h"

#include "core/check.h"
#include "core/dtype.h"
#include "ops/dequantize/dequantize.h"

namespace nanoserve::quant {

bool row_dtype_supported(DType dtype) {
  switch (dtype) {  // every enumerator, so a new dtype must be decided here
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K: return true;
    case DType::kI32:
    case DType::kF8E4M3: return false;  // its scales live beside it (model_cuda)
    case DType::kU8:
    case DType::kMXFP4: return false;  // dequantized at load (model/model_cpu_load.cc)
  }
  return false;
}

void row_to_f32(DType dtype, const void* src, float* dst, int64_t n) {
  switch (dtype) {
    case DType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::kF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
      return;
    }
    case DType::kBF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
      return;
    }
    case DType::kQ8_0: {
      const auto* b = static_cast<const BlockQ8_0*>(src);
      for (int64_t i = 0; i < n / kBlock; ++i) {
        const float d = f16_to_f32(b[i].d);
        for (int j = 0; j < kBlock; ++j) dst[i * kBlock + j] = d * static_cast<float>(b[i].qs[j]);
      }
      return;
    }
    case DType::kQ4_0: {
      const auto* b = static_cast<const BlockQ4_0*>(src);
      for (int64_t i = 0; i < n / kBlock; ++i) {
        const float d = f16_to_f32(b[i].d);
        for (int j = 0; j < kBlock / 2; ++j) {
          dst[i * kBlock + j] = d * static_cast<float>((b[i].qs[j] & 0x0f) - 8);
          dst[i * kBlock + j + 16] = d * static_cast<float>((b[i].qs[j] >> 4) - 8);
        }
      }
      return;
    }
    case DType::kQ4_1: {
      const auto* b = static_cast<const BlockQ4_1*>(src);
      for (int64_t i = 0; i < n / kBlock; ++i) {
        const float d = f16_to_f32(b[i].d), m = f16_to_f32(b[i].m);
        for (int j = 0; j < kBlock / 2; ++j) {
          dst[i * kBlock + j] = d * static_cast<float>(b[i].qs[j] & 0x0f) + m;
          dst[i * kBlock + j + 16] = d * static_cast<float>(b[i].qs[j] >> 4) + m;
        }
      }
      return;
    }
    case DType::kI32: NS_CHECK(false) << "no row conversion for " << dtype_name(dtype); return;
    default:
      // The 5-bit types and the K-quants: the reference decoder.
      dequantize_row(dtype, src, dst, n);
      return;
  }
}

}  // namespace nanoserve::quant
