#pragma once
// The FP8 (E4M3) KV cache's element rule on the device, bit for bit the
// host's (core/kv_quant.h): q = e4m3(x / scale) (IEEE division, round to
// nearest even, saturated at +-448, NaN to 0x7f); x' = f32(q) * scale.

#include <cuda_fp8.h>

#include <cstdint>

#include "core/cuda/ptx.cuh"

namespace nanoserve::cuda {

__device__ __forceinline__ uint8_t kv_f8_quantize(float x, float scale) {
  if (isnan(x)) return 0x7fu;
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(__fdiv_rn(x, scale), __NV_SATFINITE, __NV_E4M3));
}

// Two E4M3 bytes (the low one first) to f32, exactly (through f16, which holds
// every E4M3 value), times the scale.
__device__ __forceinline__ float2 kv_f8x2_dequantize(uint16_t q2, float scale) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(q2), __NV_E4M3);
  __half2 hh;
  memcpy(&hh, &h, sizeof(hh));
  const float2 f = __half22float2(hh);
  return make_float2(__fmul_rn(f.x, scale), __fmul_rn(f.y, scale));
}

// A 16-byte chunk of E4M3 bytes (byte 0 first) as 16 T elements, each
// T(f32(q) * scale), in eight T pairs: t2[j] holds elements 2 j, 2 j + 1.
// The paged attention kernels' read of an fp8 tile.
template <typename T>
__device__ __forceinline__ void kv_f8x16_dequantize(const uint4& q, float scale, uint32_t (&t2)[8]) {
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float2 f = kv_f8x2_dequantize(static_cast<uint16_t>(w[j / 2] >> (16 * (j % 2))), scale);
    t2[j] = Elem<T>::pack2(f.x, f.y);
  }
}

// Four E4M3 bytes (byte 0 first) as the codes' values in f16, exactly (f16
// holds every E4M3 value): h2[0] holds bytes 0, 1 and h2[1] bytes 2, 3. One
// conversion a pair: the tile arithmetic's read of an fp8 tile, whose
// scales act on the scores and the output instead.
__device__ __forceinline__ void kv_f8x4_codes_f16(uint32_t w, uint32_t (&h2)[2]) {
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const __half2_raw h =
        __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w >> (16 * j)), __NV_E4M3);
    h2[j] = uint32_t{h.x} | (uint32_t{h.y} << 16);
  }
}

// A 16-byte chunk of E4M3 bytes as sixteen codes in f16 (kv_f8x4_codes_f16
// of each word): h2[j] holds elements 2 j, 2 j + 1.
__device__ __forceinline__ void kv_f8x16_codes_f16(const uint4& q, uint32_t (&h2)[8]) {
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    uint32_t pair[2];
    kv_f8x4_codes_f16(w[j], pair);
    h2[2 * j] = pair[0];
    h2[2 * j + 1] = pair[1];
  }
}

}  // namespace nanoserve::cuda
