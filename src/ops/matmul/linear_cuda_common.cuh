#pragma once
// What the two linear kernels (linear_cuda.cu: weight streaming for small M;
// linear_cuda_wgmma.cu: shared-memory tiles on warpgroup mma for large M) share, so that an
// output element is computed by the same operations in both: the K split into
// four slices, the 64-wide chunk, the k relabelling inside a chunk, the
// tensor-core product and the bf16 rounding of the store; and what the
// streaming kernel and the grouped expert GEMM share beyond it (a chunk's
// products for a token tile, the slices' sum in warp order). Included only from
// those two files and ops/moe/moe_cuda_experts.cu (the grouped expert GEMM,
// whose elements are linear_cuda's chains).
//
// Fragment layout (PTX ISA, mma.m16n8k16 with bf16 inputs): lane = 4 g + t. A
// (16 x 16, row-major) gives lane A[g][2t, 2t+1] (a0), A[g+8][same] (a1),
// A[g][2t+8, 2t+9] (a2), A[g+8][same] (a3); B (16 x 8) gives B[2t, 2t+1][g]
// (b0) and B[2t+8, 2t+9][g] (b1); the f32 accumulator holds D[g][2t, 2t+1]
// (c0, c1) and D[g+8][same] (c2, c3). A is 16 weight rows, B is 8 tokens.
//
// The relabelling: in a 64-wide chunk lane t owns k = 16t .. 16t+15 of a row
// (two 16-byte units, 2t and 2t+1 of the chunk's eight) and feeds k = 16t+4s ..
// 16t+4s+3 to the mma of step s (0..3) as its logical k {2t, 2t+1, 2t+8, 2t+9}.

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/matmul/linear_slices.h"

namespace nanoserve::linear_detail {

__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The two 32-bit words of step s in one 16-byte unit u of a lane's 32 bytes,
// where u = s / 2 holds steps 2u and 2u + 1.
__device__ __forceinline__ uint32_t lo_word(const uint4& v, int s) {
  return (s & 1) ? v.z : v.x;
}
__device__ __forceinline__ uint32_t hi_word(const uint4& v, int s) {
  return (s & 1) ? v.w : v.y;
}

// The A fragment (a0..a3) of step s for rows g (unit wa) and g + 8 (unit wb),
// from bf16 units (two a row: k 16t..16t+7 and 16t+8..16t+15).
__device__ __forceinline__ void a_frag(uint32_t (&a)[4], const uint4 (&wa)[2], const uint4 (&wb)[2], int s) {
  a[0] = lo_word(wa[s >> 1], s);
  a[1] = lo_word(wb[s >> 1], s);
  a[2] = hi_word(wa[s >> 1], s);
  a[3] = hi_word(wb[s >> 1], s);
}
// The four products of one chunk (steps 0..3) for MT row tiles and token tile
// j: a the chunk's A fragments, xv the tile's two 16-byte units of x.
template <int MT, int NT>
__device__ __forceinline__ void mma_chunk_tile(float (&acc)[MT][NT][4], const uint32_t (&a)[MT][4][4],
                                               const uint4 (&xv)[2], int j) {
#pragma unroll
  for (int s = 0; s < 4; ++s) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      mma_bf16(acc[mt][j], a[mt][s][0], a[mt][s][1], a[mt][s][2], a[mt][s][3], lo_word(xv[s >> 1], s),
               hi_word(xv[s >> 1], s));
    }
  }
}

// The K slices of a block of kSlices warps (warp w summed slice w) meet in
// warp order, ((S0 + S1) + S2) + S3: warps 1.. leave theirs in `partial`, and
// warp 0 calls out(mt, j, i, sum) for each of its accumulators. Synchronises
// the block once; `partial` may be rewritten after a further __syncthreads.
template <int MT, int NT, typename Out>
__device__ __forceinline__ void meet_slices(const float (&acc)[MT][NT][4],
                                            float (&partial)[kSlices - 1][MT * NT * 4][32], int warp,
                                            int lane, Out&& out) {
  if (warp > 0) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int j = 0; j < NT; ++j) {
#pragma unroll
        for (int i = 0; i < 4; ++i) partial[warp - 1][(mt * NT + j) * 4 + i][lane] = acc[mt][j][i];
      }
    }
  }
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float v = acc[mt][j][i];
#pragma unroll
        for (int p = 0; p < kSlices - 1; ++p) v += partial[p][(mt * NT + j) * 4 + i][lane];
        out(mt, j, i, v);
      }
    }
  }
}

// The accumulators of A x B mma tiles, zeroed.
template <int A, int B>
__device__ __forceinline__ void zero_acc(float (&acc)[A][B][4]) {
#pragma unroll
  for (int a = 0; a < A; ++a) {
#pragma unroll
    for (int b = 0; b < B; ++b) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[a][b][i] = 0.0f;
    }
  }
}

__device__ __forceinline__ void store(float* y, float v) {
  *y = v;
}
__device__ __forceinline__ uint16_t to_bf16(float v) {
  const uint32_t u = __float_as_uint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN stays NaN
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);                    // nearest even
}
__device__ __forceinline__ void store(uint16_t* y, float v) {
  *y = to_bf16(v);
}
__device__ __forceinline__ void store4(float* y, const float4& v) {
  *reinterpret_cast<float4*>(y) = v;
}
__device__ __forceinline__ void store4(uint16_t* y, const float4& v) {
  uint2 p;
  p.x = uint32_t{to_bf16(v.x)} | (uint32_t{to_bf16(v.y)} << 16);
  p.y = uint32_t{to_bf16(v.z)} | (uint32_t{to_bf16(v.w)} << 16);
  *reinterpret_cast<uint2*>(y) = p;
}

// y = x . w^T for steps of many tokens on warpgroup mma (linear_cuda_wgmma.cu):
// tiles of weight rows x tokens, the four slices of a tile computed by the
// four blocks of a cluster and summed in order through distributed shared
// memory; xp (M x K, scratch) receives x in the mma's k order first (with
// swiglu, x is [M, 2K] gate_up and xp its SwiGLU). Bitwise equal to the
// streaming kernel, element by element.
enum class WgmmaTile { k128x64, k128x128, k128x256, k256x128, k128x128WholeK, k128x64WholeK };
// FP8 weights as the kernels read them: E4M3 rows with their f32 scales.
struct WeightRef {
  const void* data;
  const float* scale;
};
// The tile for M tokens of an N-row weight: M <= 64 the 128 x 64 tile (over
// the whole K where those tiles are at least the multiprocessors); else
// one block a 128 x 128 tile over the whole K (the four slices in turn) where
// those tiles are at least 40% of the multiprocessors; else the fewest
// block-waves of the device's co-resident clusters times the bytes a block
// reads per chunk.
WgmmaTile choose_tile(int M, int N);
template <typename Out>
void launch_linear_wgmma(const uint16_t* x, bool swiglu, uint16_t* xp, const uint16_t* w, Out* y, int M, int N,
                         int K, WgmmaTile tile, cudaStream_t s);

// y = x . w^T for FP8 weights at every M (linear_cuda_fp8.cu): x (or with
// swiglu the SwiGLU of the [M, 2K] gate_up) quantized to E4M3 a token into
// the scratch (fp8_tokens_bytes), then E4M3 products on warpgroup mma.
// kNarrow* are 64 weight rows x the fewest n8 blocks that hold M (to 64).
enum class Fp8Tile {
  kNarrow,
  kNarrowWholeK,
  k128x64,
  k128x128,
  k128x64WholeK,
  k128x128WholeK,
  k192x128WholeK,
};
// x null: the scratch already holds the tokens (linear_cuda_fp8_tokens).
// Both tiled kernels' tensor maps: a [rows, k] matrix (rows contiguous) in
// boxes of 128-byte rows x box_rows rows in the 128-byte swizzle, one chunk
// of bf16 or two of E4M3 (linear_cuda_wgmma.cu).
CUtensorMap chunk_map(const void* base, int64_t rows, int64_t k, int box_rows, bool fp8);
Fp8Tile choose_fp8_tile(int M, int N);
void launch_linear_fp8(const uint16_t* x, bool swiglu, void* scratch, WeightRef w, uint16_t* y, int M, int N, int K,
                       Fp8Tile tile, cudaStream_t s);

}  // namespace nanoserve::linear_detail
