// The tiled kernel of linear_cuda.cuh, for steps of many tokens.
//
// A cluster of four blocks owns one tile of 128 weight rows x 64 tokens; block
// w of the cluster computes slice w of K (linear_cuda_common.cuh)
// for the whole tile. Its eight warps split the tile 4 x 2 (32 rows x 32
// tokens each). Weight and token rows come into shared memory through cp.async,
// a chunk (64 k) per stage, several stages in flight; each row's eight 16-byte
// units are stored at unit u ^ (row & 7) so that the fragment reads (units 2t
// and 2t + 1 of rows g and g + 8) hit 32 distinct banks. A lane reads the same
// 32 bytes of each row as the streaming kernel reads from global memory and
// feeds the same mma steps, so each slice's chain is the same sequence of
// operations. At the end every block writes its f32 partial tile to its
// shared memory, and block w sums rows [32 w, 32 w + 32) of the four partials
// in slice order ((S0 + S1) + S2) + S3, reading the others' through
// distributed shared memory, and stores them: the streaming kernel's sum.

#include <cooperative_groups.h>

#include "core/check.h"
#include "core/cuda/cuda_check.cuh"
#include "core/cuda/launch.cuh"
#include "core/cuda/ptx.cuh"
#include "ops/matmul/linear_cuda_common.cuh"

namespace nanoserve::linear_detail {

namespace {

namespace cg = cooperative_groups;

constexpr int kRows = 128;          // weight rows per tile
constexpr int kThreads = 256;       // eight warps: 4 (rows) x 2 (tokens)
constexpr int kUnits = kChunk / 8;  // 16-byte units per chunk row

constexpr int kTokens = 64;        // tokens per tile
constexpr int kStages = 4;         // chunks in flight: 4 x 24 KB, two blocks a multiprocessor
constexpr int kNt = kTokens / 16;  // n8 tiles per warp (kTokens / 2 tokens)
constexpr int kLd = kRows + 4;     // floats per token row of the partial tile (conflict-free writes)
constexpr int kPipeBytes = kStages * (kRows + kTokens) * kChunk * 2;
constexpr int kPartBytes = kTokens * kLd * 4;
constexpr int kSmem = kPipeBytes > kPartBytes ? kPipeBytes : kPartBytes;

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(cuda::smem_addr(smem)), "l"(gmem)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
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

template <typename Out>
__global__ void __cluster_dims__(kSlices, 1, 1) __launch_bounds__(kThreads)
    linear_tiled_kernel(const uint16_t* __restrict__ x, const uint16_t* __restrict__ w, Out* __restrict__ y,
                        int M, int N, int K) {
  constexpr int NT = kNt, MT = 2, ST = kStages;
  extern __shared__ uint4 smem[];
  uint4* sw = smem;                        // [ST][kRows][kUnits]
  uint4* sx = smem + ST * kRows * kUnits;  // [ST][kTokens][kUnits]

  const int slice = static_cast<int>(blockIdx.x) % kSlices;
  const int row0 = static_cast<int>(blockIdx.x) / kSlices * kRows;
  const int tok0 = static_cast<int>(blockIdx.y) * kTokens;
  const int chunks = K / kChunk;
  const int c_begin = slice_begin(slice, chunks), n_chunks = slice_begin(slice + 1, chunks) - c_begin;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int wrow0 = (warp & 3) * 32, wtok0 = (warp >> 2) * (kTokens / 2);

  // This thread's copies: four weight units and kTokens / 32 token units a stage.
  // Rows past N or M read the last row and are never stored.
  const int64_t k8 = K / 8;
  const uint4* w4 = reinterpret_cast<const uint4*>(w);
  const uint4* x4 = reinterpret_cast<const uint4*>(x);
  auto load_stage = [&](int stage, int c) {
    const int64_t off = int64_t{c_begin + c} * kUnits;
#pragma unroll
    for (int i = 0; i < kRows * kUnits / kThreads; ++i) {
      const int q = tid + i * kThreads, r = q / kUnits, u = q % kUnits;
      const int gr = min(row0 + r, N - 1);
      cp_async16(sw + (stage * kRows + r) * kUnits + (u ^ (r & 7)), w4 + int64_t{gr} * k8 + off + u);
    }
#pragma unroll
    for (int i = 0; i < kTokens * kUnits / kThreads; ++i) {
      const int q = tid + i * kThreads, r = q / kUnits, u = q % kUnits;
      const int gt = min(tok0 + r, M - 1);
      cp_async16(sx + (stage * kTokens + r) * kUnits + (u ^ (r & 7)), x4 + int64_t{gt} * k8 + off + u);
    }
  };

  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][j][i] = 0.0f;
    }
  }

  cuda::wait_primary_grid();  // x is the previous kernel's output
  cuda::launch_dependents();
#pragma unroll
  for (int st = 0; st < ST - 1; ++st) {
    if (st < n_chunks) load_stage(st, st);
    cp_async_commit();
  }
  for (int c = 0; c < n_chunks; ++c) {
    cp_async_wait<ST - 2>();  // chunk c has landed (this thread's copies) ...
    __syncthreads();          // ... and everyone's; stage (c - 1) % ST is free again
    if (c + ST - 1 < n_chunks) load_stage((c + ST - 1) % ST, c + ST - 1);
    cp_async_commit();
    const uint4* cw = sw + (c % ST) * kRows * kUnits;
    const uint4* cx = sx + (c % ST) * kTokens * kUnits;
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // unit 2t + half holds steps 2 half, 2 half + 1
      uint4 a[MT][2], b[NT];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = wrow0 + mt * 16 + g + 8 * h;
          a[mt][h] = cw[r * kUnits + ((2 * t + half) ^ (r & 7))];
        }
      }
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int r = wtok0 + j * 8 + g;
        b[j] = cx[r * kUnits + ((2 * t + half) ^ (r & 7))];
      }
#pragma unroll
      for (int s = 2 * half; s < 2 * half + 2; ++s) {
#pragma unroll
        for (int j = 0; j < NT; ++j) {
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) mma_step(acc[mt][j], a[mt][0], a[mt][1], b[j], s);
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the pipeline's buffers become the partial tile

  float* part = reinterpret_cast<float*>(smem);  // [kTokens][kLd], token-major
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = wrow0 + mt * 16 + g + (i >= 2 ? 8 : 0);
        const int tk = wtok0 + j * 8 + 2 * t + (i & 1);
        part[tk * kLd + r] = acc[mt][j][i];
      }
    }
  }
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const float* parts[kSlices];
#pragma unroll
  for (int p = 0; p < kSlices; ++p) parts[p] = cluster.map_shared_rank(part, p);
  // Block `slice` sums rows [32 slice, 32 slice + 32): eight quads of rows a token.
  for (int q = tid; q < kTokens * 8; q += kThreads) {
    const int tk = q / 8, r = slice * 32 + (q % 8) * 4;
    const int gt = tok0 + tk, gr = row0 + r;
    float4 v = *reinterpret_cast<const float4*>(parts[0] + tk * kLd + r);
#pragma unroll
    for (int p = 1; p < kSlices; ++p) {
      const float4 o = *reinterpret_cast<const float4*>(parts[p] + tk * kLd + r);
      v.x += o.x;
      v.y += o.y;
      v.z += o.z;
      v.w += o.w;
    }
    if (gt < M && gr < N) store4(y + int64_t{gt} * N + gr, v);
  }
  cluster.sync();  // the others' partials stay until every block has read them
}

}  // namespace

template <typename Out>
void launch_linear_tiled(const uint16_t* x, const uint16_t* w, Out* y, int M, int N, int K, cudaStream_t s) {
  static const bool configured = [] {
    NS_CUDA_CHECK(
        cudaFuncSetAttribute(linear_tiled_kernel<Out>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    return true;
  }();
  (void)configured;
  const int64_t row_tiles = (int64_t{N} + kRows - 1) / kRows,
                tok_tiles = (int64_t{M} + kTokens - 1) / kTokens;
  NS_CHECK(row_tiles * kSlices <= INT32_MAX && tok_tiles <= 65535)
      << "linear_cuda: " << M << " x " << N << " needs too many blocks";
  cuda::launch_pdl(linear_tiled_kernel<Out>,
                   dim3(static_cast<unsigned>(row_tiles * kSlices), static_cast<unsigned>(tok_tiles)),
                   dim3(kThreads), kSmem, s, x, w, y, M, N, K);
}

template void launch_linear_tiled<float>(const uint16_t*, const uint16_t*, float*, int, int, int,
                                         cudaStream_t);
template void launch_linear_tiled<uint16_t>(const uint16_t*, const uint16_t*, uint16_t*, int, int, int,
                                            cudaStream_t);

}  // namespace nanoserve::linear_detail
