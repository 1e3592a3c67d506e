#pragma once
// Test helpers: random f32 data and its encoding as a stored weight dtype.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/tensor.h"
#include "ops/matmul/quant_blocks.h"

namespace nanoserve::testing {

inline std::vector<float> random_floats(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = dist(rng);
  return v;
}

inline uint16_t f32_to_f16(float f) {
  // Round to nearest even through the hardware-free path: good enough for
  // normal-range test data.
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffff;
  if (exp <= 0) return static_cast<uint16_t>(sign);  // flush tiny values
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00);
  uint32_t h = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(h);
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

// Encodes rows x cols floats as `dtype` (a [rows, cols] tensor that owns its
// bytes). Quantizers follow the GGUF definitions.
inline Tensor encode(const std::vector<float>& v, int64_t rows, int64_t cols, DType dtype) {
  Tensor t = Tensor::empty(dtype, {rows, cols});
  const int64_t n = rows * cols;
  switch (dtype) {
    case DType::kF32: std::memcpy(t.data(), v.data(), static_cast<size_t>(n) * 4); break;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) t.data_as<uint16_t>()[i] = f32_to_f16(v[i]);
      break;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) t.data_as<uint16_t>()[i] = f32_to_bf16(v[i]);
      break;
    case DType::kQ8_0: {
      auto* b = t.data_as<quant::BlockQ8_0>();
      for (int64_t i = 0; i < n / 32; ++i) {
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(v[i * 32 + j]));
        const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        b[i].d = f32_to_f16(d);
        for (int j = 0; j < 32; ++j) b[i].qs[j] = static_cast<int8_t>(std::lround(v[i * 32 + j] * id));
      }
      break;
    }
    case DType::kQ4_0: {
      auto* b = t.data_as<quant::BlockQ4_0>();
      for (int64_t i = 0; i < n / 32; ++i) {
        float amax = 0, mx = 0;
        for (int j = 0; j < 32; ++j) {
          if (std::fabs(v[i * 32 + j]) > amax) {
            amax = std::fabs(v[i * 32 + j]);
            mx = v[i * 32 + j];
          }
        }
        const float d = mx / -8.0f, id = d ? 1.0f / d : 0.0f;
        b[i].d = f32_to_f16(d);
        for (int j = 0; j < 16; ++j) {
          auto q = [&](float f) { return static_cast<uint8_t>(std::min(15, static_cast<int>(f * id + 8.5f))); };
          b[i].qs[j] = static_cast<uint8_t>(q(v[i * 32 + j]) | (q(v[i * 32 + j + 16]) << 4));
        }
      }
      break;
    }
    case DType::kQ4_1: {
      auto* b = t.data_as<quant::BlockQ4_1>();
      for (int64_t i = 0; i < n / 32; ++i) {
        float lo = v[i * 32], hi = v[i * 32];
        for (int j = 0; j < 32; ++j) {
          lo = std::fmin(lo, v[i * 32 + j]);
          hi = std::fmax(hi, v[i * 32 + j]);
        }
        const float d = (hi - lo) / 15.0f, id = d ? 1.0f / d : 0.0f;
        b[i].d = f32_to_f16(d);
        b[i].m = f32_to_f16(lo);
        for (int j = 0; j < 16; ++j) {
          auto q = [&](float f) { return static_cast<uint8_t>(std::min(15, static_cast<int>((f - lo) * id + 0.5f))); };
          b[i].qs[j] = static_cast<uint8_t>(q(v[i * 32 + j]) | (q(v[i * 32 + j + 16]) << 4));
        }
      }
      break;
    }
    default: break;
  }
  return t;
}

inline Tensor f32_tensor(const std::vector<float>& v, std::vector<int64_t> shape) {
  Tensor t = Tensor::empty(DType::kF32, std::move(shape));
  std::memcpy(t.data(), v.data(), v.size() * 4);
  return t;
}

inline Tensor nan_tensor(std::vector<int64_t> shape) {
  Tensor t = Tensor::empty(DType::kF32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = NAN;
  return t;
}

}  // namespace nanoserve::testing
