#pragma once
// The FP8 (E4M3) KV cache's element rule, host side (the device side is
// core/cuda/kv_quant.cuh, bit for bit): each layer has one scale for K and
// one for V, and an element is stored as
//   q = e4m3(x / scale)   rounded to nearest even, saturated at +-448
//                         (x = +-inf too); a NaN x stores 0x7f (NaN)
// and read back as x' = f32(q) * scale (one f32 product). Per element with a
// per-layer constant: a token's stored K/V depend on nothing but its own
// values, so batch invariance holds by construction.

#include <cmath>
#include <cstdint>

#include "core/half.h"

namespace nanoserve {

// A layer's K and V scales (vLLM's k_scale / v_scale): finite and > 0; 1.0
// unless a checkpoint provides them.
struct KvScales {
  float k = 1.0f;
  float v = 1.0f;
};

inline bool kv_scale_valid(float s) {
  return std::isfinite(s) && s > 0.0f;
}

inline uint8_t kv_f8_quantize(float x, float scale) {
  if (std::isnan(x)) return 0x7fu;  // one NaN, whatever the sign: the device's division drops it
  return f32_to_f8e4m3(x / scale);
}

inline float kv_f8_dequantize(uint8_t q, float scale) {
  return f8e4m3_to_f32(q) * scale;
}

}  // namespace nanoserve
