#pragma once
// The split kernel's read of an FP8 (E4M3) pool (device code), included only
// by paged_attention_kernels.cuh: a warp's landed stage, dequantized in place
// to the layout a tensor copy of a T pool leaves, so that the kernel then
// reads it as a T tile (docs/kernels.md, "FP8 pools").

#include "core/cuda/kv_quant.cuh"
#include "ops/paged_attention/paged_attention_common.cuh"

namespace nanoserve::paged_attention_kernels {

// stage: one warp's stage, [K, V][Geometry<HD>::kHalves regions]. As landed,
// line h (64 elements) of K's (V's) kWT rows sits at the start of region h,
// row r's 64 bytes at 64 r. A region's T rows overlap only its own fp8
// rows, so K and V go in two passes (half the registers of one: at head_dim
// 256 a single pass's 64 would spill). In each, every lane reads its 16-byte
// chunks before any lane writes, then writes each as two swizzled T chunks
// (row_chunk_offset) of bf16(f32(q) * scale); at the end the warp orders its
// writes before the copy engine's next ones into the stage (its refill).
// Called by the whole warp.
template <typename T, int HD>
__device__ __forceinline__ void dequantize_f8_stage(char* stage, int lane, float k_scale, float v_scale) {
  using Geo = Geometry<HD>;
  constexpr int kRegionChunks = Geo::kWarpTokens * kLineBytes / 2 / 16;  // fp8 chunks of a region: 4 a row
  constexpr int kChunks = Geo::kHalves * kRegionChunks / 32;             // a lane's, a pass
  static_assert(kChunks * 32 == Geo::kHalves * kRegionChunks, "whole chunks a lane");
#pragma unroll
  for (int is_v = 0; is_v < 2; ++is_v) {
    char* base = stage + is_v * Geo::kKvBytes;
    const float sc = is_v ? v_scale : k_scale;
    uint4 raw[kChunks];
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int idx = lane + 32 * i;  // over [kHalves][kRegionChunks]
      raw[i] = *reinterpret_cast<const uint4*>(base + idx / kRegionChunks * Geo::kRegionBytes +
                                               idx % kRegionChunks * 16);
    }
    __syncwarp();
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int idx = lane + 32 * i;
      const int h = idx / kRegionChunks, c = idx % kRegionChunks;
      const int r = c / 4, c16 = c % 4;  // row, and 16 elements of its line
      uint32_t t2[8];  // T pairs: elements 2 j, 2 j + 1 of the 16
      cuda::kv_f8x16_dequantize<T>(raw[i], sc, t2);
      *reinterpret_cast<uint4*>(base + row_chunk_offset<HD>(r, 8 * h + 2 * c16)) =
          make_uint4(t2[0], t2[1], t2[2], t2[3]);
      *reinterpret_cast<uint4*>(base + row_chunk_offset<HD>(r, 8 * h + 2 * c16 + 1)) =
          make_uint4(t2[4], t2[5], t2[6], t2[7]);
    }
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncwarp();
}

}  // namespace nanoserve::paged_attention_kernels
