// The tiled kernel of linear_cuda.cuh on Hopper's warpgroup mma (wgmma), for
// steps of many tokens.
//
// A cluster of four blocks owns one tile of 64 R x 2 weight rows and BN tokens;
// block w of the cluster computes slice w of K (linear_cuda_common.cuh) for the
// whole tile with two warpgroups, each 64 R rows. (Or, whole K, one block owns
// the tile and computes the four slices in turn.) Weight and token rows come
// into shared memory as two tensor copies a chunk (64 k) a stage, in the
// 128-byte swizzle, completing on the stage's mbarrier; the tokens from a
// copy of x in the mma's k order (below). The warp that frees a stage last
// issues its refill, so no barrier holds the two warpgroups together. The product
// is wgmma.m64n64k16 (m64n32k16 for a tile of 64 tokens) with the weights as
// the A operand in registers and the tokens as the B operand read from shared
// memory:
// - A: warp i of a warpgroup holds rows 16 i .. 16 i + 15 of its 64 in the
//   m16n8k16 fragment layout, so a lane loads the same two 16-byte units of its
//   rows g and g + 8 as the streaming kernel and feeds step s the same words.
// - B: a token's chunk row is 128 bytes in the 128-byte swizzle (16-byte unit
//   c of row n at c ^ (n % 8)), laid out in the mma's logical k order: step s
//   reads bytes 32 s .. 32 s + 31 of the row. The streaming kernel's lane t
//   feeds step s the k values 16 t + 4 s .. 16 t + 4 s + 3 (logical k 2 t,
//   2 t + 1, 2 t + 8, 2 t + 9), so chunk word q = 8 t + c (k 2 q, 2 q + 1)
//   goes to logical unit c, word t: permute_tokens writes x so, once a call.
// wgmma gives each element the bits of the mma.sync chain of the same k sets
// in the same order (measured bit for bit; LinearCuda.KernelsAgreeBitForBit),
// so each slice's chain is the streaming kernel's. At the end every block
// writes its f32 partial tile to its shared memory and block w sums its
// quarter of the rows of the four partials in slice order ((S0 + S1) + S2) +
// S3 through distributed shared memory, the streaming kernel's sum. Whole K,
// each slice's chain starts from zero and is added to a running total in
// registers in the same order, and the block stores its tile.
//
// FP8 weights have their own kernel (linear_cuda_fp8.cu).

#include <cooperative_groups.h>
#include <cuda.h>
#include <cudaTypedefs.h>

#include <type_traits>

#include "core/check.h"
#include "core/cuda/cuda_check.cuh"
#include "core/cuda/launch.cuh"
#include "core/cuda/ptx.cuh"
#include "ops/matmul/linear_cuda_common.cuh"
#include "ops/matmul/linear_cuda_layout.cuh"
#include "ops/silu_mul/silu_mul.cuh"

namespace nanoserve::linear_detail {

namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 256;       // two warpgroups
constexpr int kUnits = kChunk / 8;  // 16-byte units per chunk row
constexpr int kRowBytes = kChunk * 2;
constexpr int kSmemLimit = 227 * 1024;

// R m64 row blocks a warpgroup (rows 128 R a tile), BN tokens (n64 blocks).
// A tile of BN = 64 tokens is two n32 products a step: one n64 product a
// quad of A registers makes the compiler serialize the products.
template <int R_, int BN_, int kBlocksPerSm_ = 1, bool kWholeK_ = false>
struct WgTile {
  static constexpr int R = R_, BN = BN_, kW = BN == 64 ? 32 : 64, NB = BN / kW;
  static constexpr int kWRowBytes = kRowBytes;  // a weight row's bytes of a chunk
  static constexpr int kBlocksPerSm = kBlocksPerSm_;
  // Whole K: one block runs the four slices one after another, summing them
  // in registers; else a cluster of four blocks, one a slice.
  static constexpr bool kWholeK = kWholeK_;
  static constexpr int kCluster = kWholeK ? 1 : kSlices;
  static constexpr int kRows = 2 * 64 * R;
  static constexpr int kStageBytes = kRows * kWRowBytes + BN * kRowBytes;
  // A block's share of shared memory: the SM's 228 KB less 1 KB a block when
  // several share it.
  static constexpr int kSmemBlock = kBlocksPerSm == 1 ? kSmemLimit : 228 * 1024 / kBlocksPerSm - 1024;
  // Stages in what is left after the alignment slack and 8 stages' barriers.
  static constexpr int kStageRoom = (kSmemBlock - 1024 - 8 * 12) / kStageBytes;
  static constexpr int kStages = kStageRoom > 8 ? 8 : kStageRoom;
  static constexpr int kLd = kRows + 4;  // floats per token row of the partial tile
  static constexpr int kPipeBytes = kStages * kStageBytes;
  static constexpr int kPartBytes = BN * kLd * 4;
  // After the stages (or the partial tile): a full mbarrier and a count of
  // the warps done with it, a stage.
  static constexpr int kBarOffset = kPipeBytes > kPartBytes ? kPipeBytes : kPartBytes;
  static constexpr int kSmem = 1024 + kBarOffset + kStages * 12;
  static_assert(kStages >= 3, "a stage in use, one landing, one in flight");
  static_assert(kSmem <= kSmemBlock, "the partial tile fits the block's share");
  static_assert(kRows * kWRowBytes % 1024 == 0 && kStageBytes % 1024 == 0, "token rows on the swizzle's 1024");
};
// The tiles. The two smaller ones run two blocks an SM (registers <= 128 a
// thread, 3 or 4 stages), so that one block's start and its sum of the
// partials overlap the other's products.
using Tile128x64 = WgTile<1, 64, 2>;
using Tile128x128 = WgTile<1, 128, 2>;
using Tile128x256 = WgTile<1, 256>;
using Tile256x128 = WgTile<2, 128>;
using Tile128x128WholeK = WgTile<1, 128, 1, true>;
using Tile128x64WholeK = WgTile<1, 64, 2, true>;

// The B descriptor of 64 token rows of 128 bytes in the 128-byte swizzle at
// `addr` (1024-aligned, plus 32 s for step s): 8 rows of 128 bytes apart by 1024.
__device__ __forceinline__ uint64_t token_desc(uint32_t addr) {
  return uint64_t{(addr & 0x3ffffu) >> 4} | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) |
         (uint64_t{1} << 62);
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// d[64 x W] += A (registers) . B (desc), W = 64 or 32, f32 accumulation;
// d as in m16n8k16 per n8 block j: d[4 j + i].
__device__ __forceinline__ void wgmma(float (&d)[32], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                      uint64_t desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%"
      "27,"
      "%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc));
}
__device__ __forceinline__ void wgmma(float (&d)[16], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                      uint64_t desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc));
}

// A warpgroup's A fragments of one chunk: [row block][step][a0..a3], each
// quad in four consecutive registers as wgmma reads them.
template <int R>
using AFrags = uint32_t[R][4][4];

// Pins the fragments in their registers: once before wgmma_fence (so that
// every move into them precedes the products), and after the wait that
// retires their products (so that they stay allocated, unchanged, until then).
template <int R>
__device__ __forceinline__ void pin(AFrags<R>& a) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int s = 0; s < 4; ++s)
      asm volatile("" : "+r"(a[r][s][0]), "+r"(a[r][s][1]), "+r"(a[r][s][2]), "+r"(a[r][s][3]));
  }
}

// Waits until at most N of this warpgroup's committed wgmma groups are pending.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

template <typename T, typename Out>
__global__ void __launch_bounds__(kThreads, T::kBlocksPerSm)
    linear_wgmma_kernel(const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap x_map,
                        Out* __restrict__ y, int M, int N, int K) {
  constexpr int R = T::R, BN = T::BN, NB = T::NB, kW = T::kW, ST = T::kStages, kRows = T::kRows, kLd = T::kLd;
  extern __shared__ uint4 smem_raw[];
  char* smem = reinterpret_cast<char*>(smem_raw) + ((1024 - cuda::smem_addr(smem_raw) % 1024) % 1024);
  const uint32_t smem0 = cuda::smem_addr(smem);
  // Stage st at smem0 + st * kStageBytes: weights [kRows][kWRowBytes], then tokens [BN][128 bytes].

  const int b = static_cast<int>(blockIdx.x), tok_tiles = (M + BN - 1) / BN;
  const int slice = T::kWholeK ? 0 : b % kSlices, tile = b / T::kCluster;
  const int row0 = tile / tok_tiles * kRows, tok0 = tile % tok_tiles * BN;
  const int chunks = K / kChunk;
  // This block's chunks [c_begin, c_begin + n_chunks): its slice's, or all.
  const int c_begin = slice_begin(slice, chunks);
  const int n_chunks = slice_begin(T::kWholeK ? kSlices : slice + 1, chunks) - c_begin;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;

  // Stage st: weights [kRows][128 bytes] then tokens [BN][128 bytes], each a
  // box of the tensor map (rows past N or M land as zeros), on full[st].
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + T::kBarOffset);
  unsigned* freed = reinterpret_cast<unsigned*>(full + ST);
  if (tid == 0) {
    for (int st = 0; st < ST; ++st) {
      cuda::mbarrier_init(full + st, 1);
      freed[st] = 0;
    }
    cuda::fence_for_async_proxy();
  }
  __syncthreads();
  auto load_stage = [&](int stage, int c) {
    const uint32_t base = smem0 + stage * T::kStageBytes, bar = cuda::smem_addr(full + stage);
    const int k0 = (c_begin + c) * kChunk;
    cuda::mbarrier_arrive_expect_tx(full + stage, T::kStageBytes);
    cuda::tensor_copy_2d(base, &w_map, k0, row0, bar);
    cuda::tensor_copy_2d(base + kRows * T::kWRowBytes, &x_map, k0, tok0, bar);
  };

  // Lane (g, t) of warp i of warpgroup v: rows 64 (v R + r) + 16 i + g (+ 8).
  const int wg = warp >> 2, wi = warp & 3;
  uint32_t a_off[R][2];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = 64 * (wg * R + r) + 16 * wi + g + 8 * h;
      // Unit 2t, swizzled (unit 2t + 1 is at ^ 16).
      a_off[r][h] = row * kRowBytes + (((2 * t) ^ (row & 7)) << 4);
    }
  }
  auto load_a = [&](int stage, AFrags<R>& a) {
    const char* base = smem + stage * T::kStageBytes;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      uint4 v[2][2];  // [row g, g + 8][unit 2t, 2t + 1]
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        v[h][0] = *reinterpret_cast<const uint4*>(base + a_off[r][h]);
        v[h][1] = *reinterpret_cast<const uint4*>(base + (a_off[r][h] ^ 16));
      }
#pragma unroll
      for (int s = 0; s < 4; ++s) a_frag(a[r][s], v[0], v[1], s);
    }
    pin(a);
  };

  float acc[R][NB][kW / 2];
  // f(r, n, i) for every accumulator of the thread, unrolled.
  auto each_acc = [&](auto&& f) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int n = 0; n < NB; ++n) {
#pragma unroll
        for (int i = 0; i < kW / 2; ++i) f(r, n, i);
      }
    }
  };
  each_acc([&](int r, int n, int i) { acc[r][n][i] = 0.0f; });
  auto mma_chunk = [&](int stage, const AFrags<R>& a) {
    const uint32_t xb = smem0 + stage * T::kStageBytes + kRows * T::kWRowBytes;
    wgmma_fence();
#pragma unroll
    for (int s = 0; s < 4; ++s) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int n = 0; n < NB; ++n) {
          wgmma(acc[r][n], a[r][s][0], a[r][s][1], a[r][s][2], a[r][s][3],
                token_desc(xb + n * kW * kRowBytes + 32 * s));
        }
      }
    }
    wgmma_commit();
  };

  cuda::wait_primary_grid();  // xp is the previous kernel's output
  cuda::launch_dependents();
  // Chunk c sits in stage c % ST, its (c / ST)-th fill. Iteration c: its
  // copies landed, its products issued, then chunk c - 1's retired, which
  // frees chunk c - 1's stage: each warp counts itself out, and the eighth
  // issues the refill with chunk c - 1 + ST. ST - 1 chunks are in flight ahead.
  if (tid == 0) {
    for (int st = 0; st < ST && st < n_chunks; ++st) load_stage(st, st);
  }
  constexpr unsigned kWarps = kThreads / 32;
  uint32_t a[2][R][4][4];  // the A fragments of chunks c (c even) and c + 1
  auto iteration = [&](int c, AFrags<R>& cur, AFrags<R>& prev) {
    cuda::mbarrier_wait(full + c % ST, (c / ST) & 1);
    load_a(c % ST, cur);
    mma_chunk(c % ST, cur);
    wgmma_wait<1>();
    pin(prev);
    if (c >= 1 && lane == 0) {
      const int ps = (c - 1) % ST;
      if (atomicInc(freed + ps, kWarps - 1) == kWarps - 1 && c - 1 + ST < n_chunks)
        load_stage(ps, c - 1 + ST);
    }
  };
  auto retire_all = [&] {
    wgmma_wait<0>();
    pin(a[0]);
    pin(a[1]);
    each_acc([&](int r, int n, int i) { asm volatile("" : "+f"(acc[r][n][i])::"memory"); });
  };
  // Whole K: total = ((S0 + S1) + S2) + S3, each slice's chain from zero in acc.
  float total[T::kWholeK ? R : 1][T::kWholeK ? NB : 1][T::kWholeK ? kW / 2 : 1];
  for (int s = 0, c = 0; s < (T::kWholeK ? kSlices : 1); ++s) {
    const int end = T::kWholeK ? slice_begin(s + 1, chunks) : n_chunks;
    for (; c < end; c += 2) {
      iteration(c, a[0], a[1]);
      if (c + 1 < end) iteration(c + 1, a[1], a[0]);
    }
    c = end;
    retire_all();
    if constexpr (T::kWholeK) {
      each_acc([&](int r, int n, int i) {
        total[r][n][i] = s == 0 ? acc[r][n][i] : total[r][n][i] + acc[r][n][i];
        acc[r][n][i] = 0.0f;
      });
    }
  }
  __syncthreads();  // the pipeline's buffers become the partial tile

  float* part = reinterpret_cast<float*>(smem);  // [BN][kLd], token-major
  each_acc([&](int r, int n, int i) {
    const int row = 64 * (wg * R + r) + 16 * wi + g + 8 * ((i >> 1) & 1);
    const int tk = kW * n + 8 * (i >> 2) + 2 * t + (i & 1);
    if constexpr (T::kWholeK) {
      part[tk * kLd + row] = total[r][n][i];
    } else {
      part[tk * kLd + row] = acc[r][n][i];
    }
  });
  if constexpr (T::kWholeK) {
    __syncthreads();
    constexpr int kQuads = kRows / 4;  // per token
    for (int q = tid; q < BN * kQuads; q += kThreads) {
      const int tk = q / kQuads, r = (q % kQuads) * 4;
      const int gt = tok0 + tk, gr = row0 + r;
      if (gt < M && gr < N) store4(y + int64_t{gt} * N + gr, *reinterpret_cast<const float4*>(part + tk * kLd + r));
    }
  } else {
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    const float* parts[kSlices];
#pragma unroll
    for (int p = 0; p < kSlices; ++p) parts[p] = cluster.map_shared_rank(part, p);
    // Block `slice` sums its quarter of the rows, a quad of rows at a time.
    constexpr int kQuads = kRows / kSlices / 4;  // per token
    for (int q = tid; q < BN * kQuads; q += kThreads) {
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
}

// xp = x with each 64-wide chunk of a row in the mma's k order
// (linear_cuda_layout.cuh). Thread i reads 16-byte unit i of x; with
// kSwiGLU, x is [M, 2K] gate_up and unit i is the SwiGLU of its gates and ups
// (k8 = K / 8 units a row), the activation pass done here.
template <bool kSwiGLU>
__global__ void permute_tokens_kernel(const uint4* __restrict__ x, uint32_t* __restrict__ xp, int64_t units,
                                      int64_t k8) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  cuda::wait_primary_grid();
  cuda::launch_dependents();
  if (i >= units) return;
  uint4 v;
  if constexpr (kSwiGLU) {  // unit i of row m = i / k8 of the SwiGLU: gates and ups of gate_up's row m
    const uint4* g = x + i + i / k8 * k8;
    v = swiglu::silu_mul8(g[0], g[k8]);
  } else {
    v = x[i];
  }
  const int q = static_cast<int>(i % kUnits);  // the unit's words of its chunk: 4 q .. 4 q + 3
  uint32_t* chunk = xp + (i - q) * 4;
  chunk[permuted_word(4 * q)] = v.x;
  chunk[permuted_word(4 * q + 1)] = v.y;
  chunk[permuted_word(4 * q + 2)] = v.z;
  chunk[permuted_word(4 * q + 3)] = v.w;
}

template <typename T, typename Out>
void configure() {
  static const bool configured = [] {
    NS_CUDA_CHECK(cudaFuncSetAttribute(linear_wgmma_kernel<T, Out>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmem));
    return true;
  }();
  (void)configured;
}

template <typename T>
int64_t tile_blocks(int M, int N) {
  return (int64_t{N} + T::kRows - 1) / T::kRows * ((int64_t{M} + T::BN - 1) / T::BN) * T::kCluster;
}

// Tile T's blocks launch in clusters of T::kCluster.
template <typename T>
cudaLaunchAttribute cluster_dims() {
  cudaLaunchAttribute a = {};
  a.id = cudaLaunchAttributeClusterDimension;
  a.val.clusterDim.x = T::kCluster;
  a.val.clusterDim.y = 1;
  a.val.clusterDim.z = 1;
  return a;
}

template <typename T, typename Out>
void launch(const uint16_t* x, bool swiglu, uint16_t* xp, const uint16_t* w, Out* y, int M, int N, int K,
            cudaStream_t s) {
  const int64_t units = int64_t{M} * K / 8;
  const dim3 grid(static_cast<unsigned>((units + 255) / 256));
  const auto* xv = reinterpret_cast<const uint4*>(x);
  auto* xpw = reinterpret_cast<uint32_t*>(xp);
  if (x == nullptr) {
    // xp already holds x in the k order (linear_cuda_permuted).
  } else if (swiglu) {
    cuda::launch_pdl(permute_tokens_kernel<true>, grid, dim3(256), 0, s, xv, xpw, units, int64_t{K} / 8);
  } else {
    cuda::launch_pdl(permute_tokens_kernel<false>, grid, dim3(256), 0, s, xv, xpw, units, int64_t{K} / 8);
  }
  configure<T, Out>();
  const int64_t blocks = tile_blocks<T>(M, N);
  NS_CHECK(blocks <= INT32_MAX) << "linear_cuda: " << M << " x " << N << " needs too many blocks";
  const CUtensorMap w_map = chunk_map(w, N, K, T::kRows, false), x_map = chunk_map(xp, M, K, T::BN, false);
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  attr[1] = cluster_dims<T>();
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = T::kSmem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = 2;
  NS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, linear_wgmma_kernel<T, Out>, w_map, x_map, y, M, N, K));
}

// Blocks of tile T that the device holds at once: its co-resident clusters x their size.
template <typename T>
int64_t tile_slots() {
  static const int64_t slots = [] {
    configure<T, uint16_t>();
    cudaLaunchAttribute attr[1] = {cluster_dims<T>()};
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(T::kCluster * 1024);
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = T::kSmem;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    NS_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, linear_wgmma_kernel<T, uint16_t>, &cfg));
    return int64_t{clusters > 0 ? clusters : 1} * T::kCluster;
  }();
  return slots;
}

// A block's time is about the bytes it reads a chunk (its rows and tokens);
// the waves of blocks run one after another.
template <typename T>
int64_t tile_cost(int M, int N) {
  const int64_t slots = tile_slots<T>();
  return (tile_blocks<T>(M, N) + slots - 1) / slots * (T::kRows + T::BN);
}

}  // namespace

// A [rows, k] matrix (rows contiguous) as a tensor map of boxes of 128-byte
// rows x box_rows rows in the 128-byte swizzle: one chunk (64 elements) of
// bf16, or two chunks of E4M3 (linear_cuda_common.cuh).
CUtensorMap chunk_map(const void* base, int64_t rows, int64_t k, int box_rows, bool fp8) {
  static void* encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    NS_CUDA_CHECK(
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
    NS_CHECK(found == cudaDriverEntryPointSuccess && fn != nullptr)
        << "the CUDA driver has no cuTensorMapEncodeTiled";
    return fn;
  }();
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k) * (fp8 ? 1 : 2)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(fp8 ? 2 * kChunk : kChunk), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  CUtensorMap map;
  const CUresult r = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(encode)(
      &map, fp8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, const_cast<void*>(base), dims,
      strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  NS_CHECK(r == CUDA_SUCCESS) << "linear_cuda: cuTensorMapEncodeTiled failed (" << static_cast<int>(r) << ") for "
                              << rows << " x " << k << (fp8 ? " E4M3" : " bf16");
  return map;
}

WgmmaTile choose_tile(int M, int N) {
  static const int sms = [] {
    int device = 0, n = 0;
    NS_CUDA_CHECK(cudaGetDevice(&device));
    NS_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    return n;
  }();
  // Small steps take the 128 x 64 tile: over the whole K where its tiles
  // fill half the slots (two blocks an SM: gate_up, lm_head), else one slice
  // a block of a cluster of four.
  if (M <= 64)
    return tile_blocks<Tile128x64WholeK>(M, N) >= sms ? WgmmaTile::k128x64WholeK : WgmmaTile::k128x64;
  // Whole K in a block wherever its tiles fill 40% of the multiprocessors: a
  // block then runs 4x the chunks for one start and no cluster sum (o and
  // down at M = 256 make 64 such tiles for 132 multiprocessors, and still
  // beat the sliced 128 x 128 tile; at M = 128 their 32 do not).
  if (5 * tile_blocks<Tile128x128WholeK>(M, N) >= 2 * sms) return WgmmaTile::k128x128WholeK;
  const WgmmaTile tiles[] = {WgmmaTile::k128x128, WgmmaTile::k128x256, WgmmaTile::k256x128};
  const int64_t costs[] = {tile_cost<Tile128x128>(M, N), tile_cost<Tile128x256>(M, N),
                           tile_cost<Tile256x128>(M, N)};
  int best = 0;
  for (int i = 1; i < 3; ++i) {
    if (costs[i] < costs[best]) best = i;  // ties: the smaller tile
  }
  return tiles[best];
}

template <typename Out>
void launch_linear_wgmma(const uint16_t* x, bool swiglu, uint16_t* xp, const uint16_t* w, Out* y, int M, int N,
                         int K, WgmmaTile tile, cudaStream_t s) {
  switch (tile) {
    case WgmmaTile::k128x64: launch<Tile128x64>(x, swiglu, xp, w, y, M, N, K, s); break;
    case WgmmaTile::k128x128: launch<Tile128x128>(x, swiglu, xp, w, y, M, N, K, s); break;
    case WgmmaTile::k128x128WholeK: launch<Tile128x128WholeK>(x, swiglu, xp, w, y, M, N, K, s); break;
    case WgmmaTile::k128x64WholeK: launch<Tile128x64WholeK>(x, swiglu, xp, w, y, M, N, K, s); break;
    case WgmmaTile::k128x256: launch<Tile128x256>(x, swiglu, xp, w, y, M, N, K, s); break;
    case WgmmaTile::k256x128: launch<Tile256x128>(x, swiglu, xp, w, y, M, N, K, s); break;
  }
}

template void launch_linear_wgmma<float>(const uint16_t*, bool, uint16_t*, const uint16_t*, float*, int, int, int,
                                         WgmmaTile, cudaStream_t);
template void launch_linear_wgmma<uint16_t>(const uint16_t*, bool, uint16_t*, const uint16_t*, uint16_t*, int, int,
                                            int, WgmmaTile, cudaStream_t);

}  // namespace nanoserve::linear_detail
