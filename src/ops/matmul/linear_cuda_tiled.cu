// The tiled kernel of linear_cuda.cuh, for steps of many tokens.
//
// A cluster of four blocks owns one tile, 128 weight rows x 64 tokens (the
// small tile) or 256 x 128 (the large one); block w of the cluster computes
// slice w of K (linear_cuda_common.cuh) for the whole tile, its eight warps
// splitting it 4 x 2 (32 rows x 32 tokens each, or 64 x 64). Weight and token
// rows come into shared memory through cp.async, a chunk (64 k) per stage,
// four stages in flight. Weight rows keep their eight 16-byte units, unit u
// of row r at u ^ (r & 7), so that the fragment reads (units 2t and 2t + 1 of
// rows g and g + 8) hit 32 distinct banks; tokens are stored the same way
// (small tile) or in the mma's fragment order (large tile, Tile below). A
// lane feeds each mma step the same k values in the same fragment positions
// as the streaming kernel, so each slice's chain is the same sequence of
// operations. At the end every block writes its f32 partial tile to its
// shared memory, and block w sums its quarter of the rows of the four
// partials in slice order ((S0 + S1) + S2) + S3, reading the others' through
// distributed shared memory, and stores them: the streaming kernel's sum.

#include <cooperative_groups.h>

#include <algorithm>

#include "core/check.h"
#include "core/cuda/cuda_check.cuh"
#include "core/cuda/launch.cuh"
#include "core/cuda/ptx.cuh"
#include "ops/matmul/linear_cuda_common.cuh"

namespace nanoserve::linear_detail {

namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 256;       // eight warps: 4 (rows) x 2 (tokens)
constexpr int kUnits = kChunk / 8;  // 16-byte units per chunk row
constexpr int kStages = 4;          // chunks in flight

// A tile shape: each warp holds MI x 16 tokens and NJ x 8 weight rows, the
// eight warps 4 (rows) x 2 (tokens). Two ways to feed the mma, with the same
// products in the same order (the mma gives an element the same bits whichever
// operand its row and column come from; tested against the streaming kernel):
// - kXFragments: the tokens are the A operand, staged by 4-byte copies
//   straight into fragment order (one 16-byte load is a lane's fragment of one
//   step), the weight rows the B operand (one 16-byte load, two steps). No
//   register moves; the 4-byte copies pay off only with many products a copy.
// - otherwise: the weight rows are the A operand and the tokens the B operand,
//   both staged as 16-byte units; the A fragment is assembled from two loads.
template <int MI_, int NJ_, bool kXFragments_>
struct Tile {
  static constexpr int MI = MI_, NJ = NJ_;
  static constexpr bool kXFragments = kXFragments_;
  static constexpr int kRows = 4 * NJ * 8;     // weight rows per tile
  static constexpr int kTokens = 2 * MI * 16;  // tokens per tile
  // floats per token row of the partial tile: conflict-free writes of either layout
  static constexpr int kLd = kRows + (kXFragments ? 8 : 4);
  static constexpr int kPipeBytes = kStages * (kRows + kTokens) * kChunk * 2;
  static constexpr int kPartBytes = kTokens * kLd * 4;
  static constexpr int kSmem = kPipeBytes > kPartBytes ? kPipeBytes : kPartBytes;
};
using SmallTile = Tile<2, 4, false>;  // 128 x 64: 4 x 24 KB in flight, two blocks a multiprocessor
using LargeTile = Tile<4, 8, true>;   // 256 x 128: 4 x 48 KB in flight, one block a multiprocessor

// 16 bytes global -> shared; where !valid nothing is read and zeros are written.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(cuda::smem_addr(smem)), "l"(gmem),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(cuda::smem_addr(smem)), "l"(gmem),
               "r"(valid ? 4 : 0)
               : "memory");
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

template <typename T, typename Out>
__global__ void __cluster_dims__(kSlices, 1, 1) __launch_bounds__(kThreads, 1)
    linear_tiled_kernel(const uint16_t* __restrict__ x, const uint16_t* __restrict__ w, Out* __restrict__ y,
                        int M, int N, int K) {
  constexpr int MI = T::MI, NJ = T::NJ, ST = kStages, kRows = T::kRows, kTokens = T::kTokens, kLd = T::kLd;
  extern __shared__ uint4 smem[];
  uint4* sw = smem;                        // [ST][kRows][kUnits]
  uint4* sx = smem + ST * kRows * kUnits;  // [ST][kTokens / 16][4 steps][8 g][4 t] fragments, or as sw

  // Block b is slice b % 4 of token tile (b / 4) % tok_tiles of row tile
  // b / (4 tok_tiles): the blocks that run together share weight rows, so a
  // weight is read from memory once, not once per token tile.
  const int b = static_cast<int>(blockIdx.x), tok_tiles = (M + kTokens - 1) / kTokens;
  const int slice = b % kSlices;
  const int row0 = b / (kSlices * tok_tiles) * kRows;
  const int tok0 = b / kSlices % tok_tiles * kTokens;
  const int chunks = K / kChunk;
  const int c_begin = slice_begin(slice, chunks), n_chunks = slice_begin(slice + 1, chunks) - c_begin;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int wrow0 = (warp & 3) * (NJ * 8), wtok0 = (warp >> 2) * (MI * 16);

  // Weights: this thread copies kRows / 32 units a stage, all in one column
  // u of 16-byte units, 32 rows apart.
  const int64_t k8 = K / 8;
  const int r0 = tid / kUnits, u0 = tid % kUnits, su0 = r0 * kUnits + (u0 ^ (r0 & 7));
  const uint4* wsrc = reinterpret_cast<const uint4*>(w) + int64_t{row0 + r0} * k8 + c_begin * kUnits + u0;
  const int w_rows = N - row0 - r0;            // this thread's rows that exist: r < w_rows
  constexpr int kRowStep = kThreads / kUnits;  // 32
  // Tokens, kXFragments: laid out as the mma's A fragments, so that one
  // 16-byte load is one step's fragment of one lane. Word q (k 2q, 2q + 1) of
  // a chunk row is step s = (q % 8) / 2 of lane t = q / 8, the low (q even) or
  // high half of its k; the fragment of (16-token tile, step s, lane (g, t))
  // is the 16 bytes [token g low, token g + 8 low, token g high, token g + 8
  // high]. A warp's copy (4 bytes a lane) is step s = warp % 4 of tokens
  // {gl, gl + 8} + 2 gh + 16 tile: lane bits lh, h, t (2), gl; the 32 lanes
  // write 32 distinct banks. Otherwise: as the weights.
  const int lh = lane & 1, hh = (lane >> 1) & 1, tt = (lane >> 2) & 3, gl = lane >> 4;
  const int xs = warp & 3, xr = hh * 8 + (warp >> 2) * 2 + gl;  // step; token within the group of 16
  const uint32_t* xsrc = reinterpret_cast<const uint32_t*>(x) + int64_t{tok0 + xr} * (K / 2) + c_begin * 32 +
                         8 * tt + 2 * xs + lh;
  const int sx0 = xs * 128 + ((warp >> 2) * 2 + gl) * 16 + tt * 4 + lh * 2 + hh;  // words into the stage
  const uint4* xsrc16 = reinterpret_cast<const uint4*>(x) + int64_t{tok0 + r0} * k8 + c_begin * kUnits + u0;
  const int x_rows = M - tok0 - (T::kXFragments ? xr : r0);  // this thread's rows that exist
  auto load_stage = [&](int stage, int c) {
    const int64_t off = int64_t{c} * kUnits;
#pragma unroll
    for (int i = 0; i < kRows / kRowStep; ++i) {
      cp_async16(sw + stage * kRows * kUnits + su0 + i * kRowStep * kUnits, wsrc + i * kRowStep * k8 + off,
                 i * kRowStep < w_rows);
    }
    if constexpr (T::kXFragments) {
      uint32_t* sxw = reinterpret_cast<uint32_t*>(sx + stage * kTokens * kUnits) + sx0;
#pragma unroll
      for (int i = 0; i < kTokens / 8; ++i) {  // token group i / 2, gh = warp / 4 + 2 (i % 2)
        const int dr = 16 * (i >> 1) + 4 * (i & 1);
        cp_async4(sxw + (i >> 1) * 512 + (i & 1) * 64, xsrc + int64_t{dr} * (K / 2) + off * 4, dr < x_rows);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kTokens / kRowStep; ++i) {
        cp_async16(sx + stage * kTokens * kUnits + su0 + i * kRowStep * kUnits,
                   xsrc16 + i * kRowStep * k8 + off, i * kRowStep < x_rows);
      }
    }
  };

  // kXFragments: [16-token tile][8-row tile], D[token g (+8)][row 2t, 2t + 1];
  // otherwise [16-row tile][8-token tile], D[row g (+8)][token 2t, 2t + 1].
  constexpr int kA = T::kXFragments ? MI : NJ / 2, kB = T::kXFragments ? NJ : 2 * MI;
  float acc[kA][kB][4];
  zero_acc(acc);

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
    if constexpr (T::kXFragments) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // weight unit 2t + half holds steps 2 half, 2 half + 1
        uint4 wb[NJ];
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
          const int r = wrow0 + j * 8 + g;
          wb[j] = cw[r * kUnits + ((2 * t + half) ^ (r & 7))];
        }
#pragma unroll
        for (int s = 2 * half; s < 2 * half + 2; ++s) {
#pragma unroll
          for (int i = 0; i < MI; ++i) {
            const uint4 xa = cx[((wtok0 / 16 + i) * 4 + s) * 32 + g * 4 + t];
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
              mma_bf16(acc[i][j], xa.x, xa.y, xa.z, xa.w, lo_word(wb[j], s), hi_word(wb[j], s));
            }
          }
        }
      }
    } else {
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // unit 2t + half holds steps 2 half, 2 half + 1
        uint4 a[kA][2], bx[kB];
#pragma unroll
        for (int mt = 0; mt < kA; ++mt) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = wrow0 + mt * 16 + g + 8 * h;
            a[mt][h] = cw[r * kUnits + ((2 * t + half) ^ (r & 7))];
          }
        }
#pragma unroll
        for (int j = 0; j < kB; ++j) {
          const int r = wtok0 + j * 8 + g;
          bx[j] = cx[r * kUnits + ((2 * t + half) ^ (r & 7))];
        }
#pragma unroll
        for (int s = 2 * half; s < 2 * half + 2; ++s) {
#pragma unroll
          for (int j = 0; j < kB; ++j) {
#pragma unroll
            for (int mt = 0; mt < kA; ++mt) mma_step(acc[mt][j], a[mt][0], a[mt][1], bx[j], s);
          }
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the pipeline's buffers become the partial tile

  float* part = reinterpret_cast<float*>(smem);  // [kTokens][kLd], token-major
#pragma unroll
  for (int i = 0; i < kA; ++i) {
#pragma unroll
    for (int j = 0; j < kB; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if constexpr (T::kXFragments) {
          const int tk = wtok0 + i * 16 + g + 8 * h, r = wrow0 + j * 8 + 2 * t;
          *reinterpret_cast<float2*>(part + tk * kLd + r) =
              make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
        } else {
          const int r = wrow0 + i * 16 + g + 8 * h, tk = wtok0 + j * 8 + 2 * t;
          part[tk * kLd + r] = acc[i][j][2 * h];
          part[(tk + 1) * kLd + r] = acc[i][j][2 * h + 1];
        }
      }
    }
  }
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const float* parts[kSlices];
#pragma unroll
  for (int p = 0; p < kSlices; ++p) parts[p] = cluster.map_shared_rank(part, p);
  // Block `slice` sums its quarter of the rows, a quad of rows at a time.
  constexpr int kQuads = kRows / kSlices / 4;  // per token
  for (int q = tid; q < kTokens * kQuads; q += kThreads) {
    const int tk = q / kQuads, r = slice * (kRows / kSlices) + (q % kQuads) * 4;
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

template <typename T, typename Out>
void configure() {
  static const bool configured = [] {
    NS_CUDA_CHECK(cudaFuncSetAttribute(linear_tiled_kernel<T, Out>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmem));
    return true;
  }();
  (void)configured;
}

template <typename T>
int64_t tile_blocks(int M, int N) {
  return (int64_t{N} + T::kRows - 1) / T::kRows * ((int64_t{M} + T::kTokens - 1) / T::kTokens) * kSlices;
}

template <typename T, typename Out>
void launch(const uint16_t* x, const uint16_t* w, Out* y, int M, int N, int K, cudaStream_t s) {
  configure<T, Out>();
  const int64_t blocks = tile_blocks<T>(M, N);
  NS_CHECK(blocks <= INT32_MAX) << "linear_cuda: " << M << " x " << N << " needs too many blocks";
  cuda::launch_pdl(linear_tiled_kernel<T, Out>, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), T::kSmem,
                   s, x, w, y, M, N, K);
}

}  // namespace

template <typename Out>
void launch_linear_tiled(const uint16_t* x, const uint16_t* w, Out* y, int M, int N, int K, bool large,
                         cudaStream_t s) {
  if (large) {
    launch<LargeTile>(x, w, y, M, N, K, s);
  } else {
    launch<SmallTile>(x, w, y, M, N, K, s);
  }
}

bool prefer_large_tile(int M, int N) {
  // Small steps (the ones CUDA graphs capture) take the small tile without
  // querying the device.
  if (M <= SmallTile::kTokens) return false;
  // Clusters of the large tile that fit on the device at once (one block a
  // multiprocessor, four a cluster, within a GPC): its waves.
  static const int64_t slots = [] {
    configure<LargeTile, uint16_t>();
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(kSlices * 1024);
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = LargeTile::kSmem;
    int clusters = 0;
    NS_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, linear_tiled_kernel<LargeTile, uint16_t>, &cfg));
    return int64_t{std::max(clusters, 1)} * kSlices;
  }();
  const int64_t blocks = tile_blocks<LargeTile>(M, N), waves = (blocks + slots - 1) / slots;
  return blocks * 10 >= waves * slots * 6;
}

template void launch_linear_tiled<float>(const uint16_t*, const uint16_t*, float*, int, int, int, bool,
                                         cudaStream_t);
template void launch_linear_tiled<uint16_t>(const uint16_t*, const uint16_t*, uint16_t*, int, int, int, bool,
                                            cudaStream_t);

}  // namespace nanoserve::linear_detail
