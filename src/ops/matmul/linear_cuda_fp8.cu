// The FP8 linear of linear_cuda.cuh: E4M3 weights with a scale a row times
// E4M3 tokens with a scale a token, on Hopper's FP8 tensor-core product, for
// every M (one kernel template: decode steps and prefill chunks share it).
//
// The tokens. quantize_tokens_kernel turns each row of x (or, for the down
// projection, of silu(gate) * up, as silu_mul_cuda rounds it) into E4M3 codes
// with scale_x[m] = max |x[m, :]| / 448 (1 for a zero row): code =
// x / scale_x rounded to nearest even, saturated, as quantize_fp8_rows_cuda
// does the weights. A row's codes and scale depend on that row alone.
//
// The product. A block owns 64 WG weight rows x BN tokens (one warpgroup per
// 64 rows; BN = 8 .. 128) and the K slices of linear_cuda_common.cuh: one
// slice (a cluster of four blocks, one a slice) or all four in turn (whole K).
// Each stage is a unit of two chunks (128 k) of one slice's weight and token
// rows, 128 bytes a row in the 128-byte swizzle, two tensor copies on the
// stage's mbarrier; a slice of an odd number of chunks ends in a unit of one
// (its copy's second half, the next slice's k or zeros past K, is not
// multiplied). Both operands are shared-memory descriptors in their natural
// k order (no relabelling: the product reads 32 contiguous bytes a row a
// step). A chunk is two wgmma.m64nBNk32 e4m3 steps, and a slice's chain runs in the tensor
// core's accumulator from zero, as vLLM's FP8 GEMMs run theirs (the tensor
// core keeps ~14 bits of an FP8 sum: an element is within ~5e-4 of its sum
// of |products|, measured by bench/fp8_mma_agree_cuda_bench.cu). An element
// (token m, row n) is
//   y = ((((S0 + S1) + S2) + S3) * scale_w[n]) * scale_x[m],
//   Sw = the chain of slice w's k32 steps in order, from zero,
// for any tile and any M: a column of the product does not depend on BN
// (measured), and every other operation is the same in every tile. So a
// row's bits are the same in any batch.

#include <cooperative_groups.h>
#include <cuda.h>

#include "core/check.h"
#include "core/cuda/cuda_check.cuh"
#include "core/cuda/launch.cuh"
#include "core/cuda/ptx.cuh"
#include "ops/matmul/fp8_quant.cuh"
#include "ops/matmul/linear_cuda_common.cuh"
#include "ops/matmul/linear_cuda_layout.cuh"
#include "ops/matmul/wgmma_e4m3.cuh"
#include "ops/silu_mul/silu_mul.cuh"

namespace nanoserve::linear_detail {

namespace {

namespace cg = cooperative_groups;

constexpr int kRowBytes = 2 * kChunk;  // a unit's row of E4M3 codes: two chunks
constexpr int kSmemLimit = 227 * 1024;

// WG warpgroups (64 WG weight rows) x BN tokens; kBlocksPerSm blocks share
// an SM; whole K in one block, or one slice a block of a cluster of four.
template <int WG_, int BN_, int kBlocksPerSm_, bool kWholeK_>
struct F8Tile {
  static constexpr int WG = WG_, BN = BN_, kBlocksPerSm = kBlocksPerSm_;
  static constexpr bool kWholeK = kWholeK_;
  static constexpr int kThreads = 128 * WG;
  static constexpr int kCluster = kWholeK ? 1 : kSlices;
  static constexpr int kRows = 64 * WG;
  static constexpr int kAcc = BN / 2;  // accumulator floats a thread
  static constexpr int kBoxBytes = (kRows + BN) * kRowBytes;
  static constexpr int kStageBytes = (kBoxBytes + 1023) / 1024 * 1024;
  static constexpr int kSmemBlock = kBlocksPerSm == 1 ? kSmemLimit : 228 * 1024 / kBlocksPerSm - 1024;
  static constexpr int kLd = kRows + 4;  // floats per token row of the partial tile
  static constexpr int kPartBytes = BN * kLd * 4;
  // The tile's scales, read once into shared memory for the epilogue: its
  // rows' then its tokens'.
  static constexpr int kScaleBytes = (kRows + BN) * 4;
  static constexpr int kStageRoom = (kSmemBlock - 1024 - 8 * 12 - 16 - kScaleBytes) / kStageBytes;
  static constexpr int kStages = kStageRoom > 8 ? 8 : kStageRoom;
  static constexpr int kPipeBytes = kStages * kStageBytes;
  static constexpr int kBarOffset = kPipeBytes > kPartBytes ? kPipeBytes : kPartBytes;
  static constexpr int kScaleOffset = (kBarOffset + kStages * 12 + 15) / 16 * 16;
  static constexpr int kSmem = 1024 + kScaleOffset + kScaleBytes;
  static_assert(kStages >= 3, "a stage in use, one landing, one in flight");
  static_assert(kSmem <= kSmemBlock, "the partial tile fits the block's share");
};

// Decode: one warpgroup, the fewest n8 blocks that hold the step (to 64).
template <int BN, bool kWholeK>
using Narrow = F8Tile<1, BN, 4, kWholeK>;
// Prefill: two warpgroups, 128 rows x 64 or 128 tokens; or three,
// 192 rows x 128 tokens over the whole K (the running total fits beside
// the accumulator: neither operand is in registers).
template <int BN, bool kWholeK>
using Wide = F8Tile<2, BN, 1, kWholeK>;
using Tall = F8Tile<3, 128, 1, true>;

// A K-major operand of 128-byte unit rows in the 128-byte swizzle at `addr`
// (the atom of 8 rows 1024-aligned; plus 32 s for k32 step s).
__device__ __forceinline__ uint64_t desc128(uint32_t addr) {
  return uint64_t{(addr & 0x3ffffu) >> 4} | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) |
         (uint64_t{1} << 62);
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Keeps the accumulator's registers as they are, after the wait that
// retires their products and before they are read.
template <int A>
__device__ __forceinline__ void pin(float (&acc)[A]) {
#pragma unroll
  for (int i = 0; i < A; ++i) asm volatile("" : "+f"(acc[i])::"memory");
}

template <typename T>
__global__ void __launch_bounds__(T::kThreads, T::kBlocksPerSm)
    linear_fp8_kernel(const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap x_map,
                      const float* __restrict__ w_scale, const float* __restrict__ x_scale,
                      uint16_t* __restrict__ y, int M, int N, int K) {
  constexpr int BN = T::BN, ST = T::kStages, kRows = T::kRows, kLd = T::kLd, kAcc = T::kAcc;
  extern __shared__ uint4 smem_raw[];
  char* smem = reinterpret_cast<char*>(smem_raw) + ((1024 - cuda::smem_addr(smem_raw) % 1024) % 1024);
  const uint32_t smem0 = cuda::smem_addr(smem);

  const int b = static_cast<int>(blockIdx.x), tok_tiles = (M + BN - 1) / BN;
  const int slice = T::kWholeK ? 0 : b % kSlices, tile = b / T::kCluster;
  const int row0 = tile / tok_tiles * kRows, tok0 = tile % tok_tiles * BN;
  const int chunks = K / kChunk;
  // The block's run of slices (all four, or its own) in units
  // (linear_slices.h).
  constexpr int kOwn = T::kWholeK ? kSlices : 1;
  const int w0 = T::kWholeK ? 0 : slice, n_units = run_units(w0, kOwn, chunks);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int wg = warp >> 2, wi = warp & 3;

  // Stage st at smem0 + st * kStageBytes: weights [kRows][128 bytes], then
  // tokens [BN][128 bytes], each a box of its tensor map (rows past N or M,
  // and k past K, land as zeros), on full[st]. Unit u sits in stage u % ST.
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + T::kBarOffset);
  unsigned* freed = reinterpret_cast<unsigned*>(full + ST);
  // The epilogue's scales (rows past N and tokens past M: 0, never stored),
  // read while the products run rather than after them.
  float* row_scale = reinterpret_cast<float*>(smem + T::kScaleOffset);
  float* tok_scale = row_scale + kRows;
  if (tid == 0) {
    for (int st = 0; st < ST; ++st) {
      cuda::mbarrier_init(full + st, 1);
      freed[st] = 0;
    }
    cuda::fence_for_async_proxy();
  }
  __syncthreads();
  // Unit u's weights' copy (which arms the stage for both copies' bytes) and
  // its tokens' copy.
  auto unit_k = [&](int u) { return unit_chunk(w0, kOwn, u, chunks) * kChunk; };
  auto load_weights = [&](int stage, int u) {
    cuda::mbarrier_arrive_expect_tx(full + stage, T::kBoxBytes);
    cuda::tensor_copy_2d(smem0 + stage * T::kStageBytes, &w_map, unit_k(u), row0,
                         cuda::smem_addr(full + stage));
  };
  auto load_tokens = [&](int stage, int u) {
    cuda::tensor_copy_2d(smem0 + stage * T::kStageBytes + kRows * kRowBytes, &x_map, unit_k(u), tok0,
                         cuda::smem_addr(full + stage));
  };

  float acc[kAcc];
  // Unit u's k32 products, the first into a fresh chain where `fresh`: all
  // four (both chunks), or the first two (a slice's odd last chunk).
  auto operands = [&](int u, uint32_t& wa, uint32_t& xb) {
    const uint32_t base = smem0 + (u % ST) * T::kStageBytes;
    wa = base + wg * 64 * kRowBytes;
    xb = base + kRows * kRowBytes;
  };
  auto mma_unit = [&](int u, bool fresh) {
    uint32_t wa, xb;
    operands(u, wa, xb);
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < 4; ++j)
      wgmma_e4m3<BN>(acc, desc128(wa + 32 * j), desc128(xb + 32 * j), fresh && j == 0 ? 0 : 1);
    wgmma_commit();
  };
  auto mma_half = [&](int u, bool fresh) {
    uint32_t wa, xb;
    operands(u, wa, xb);
    wgmma_fence();
    wgmma_e4m3<BN>(acc, desc128(wa), desc128(xb), fresh ? 0 : 1);
    wgmma_e4m3<BN>(acc, desc128(wa + 32), desc128(xb + 32), 1);
    wgmma_commit();
  };

  // The weights do not depend on the previous kernel: the first stages'
  // weight copies go out before the wait, the tokens' (its output) after.
  if (tid == 0) {
    for (int st = 0; st < ST && st < n_units; ++st) load_weights(st, st);
  }
  // The scales land behind the first copies (the epilogue's barrier orders them).
  static_assert(T::kThreads >= kRows && T::kThreads >= BN, "a scale a thread");
  if (tid < kRows) row_scale[tid] = row0 + tid < N ? __ldg(w_scale + row0 + tid) : 0.0f;
  cuda::wait_primary_grid();
  cuda::launch_dependents();
  if (tid == 0) {
    for (int st = 0; st < ST && st < n_units; ++st) load_tokens(st, st);
  }
  if (tid < BN)
    tok_scale[tid] = tok0 + tid < M ? __ldg(x_scale + tok0 + tid) : 0.0f;  // the previous kernel's
  constexpr unsigned kWarps = T::kThreads / 32;
  // Iteration u: its copies landed, its products issued, then unit u - 1's
  // retired, which frees unit u - 1's stage: each warp counts itself out,
  // and the last issues the refill with unit u - 1 + ST.
  auto landed = [&](int u) { cuda::mbarrier_wait(full + u % ST, (u / ST) & 1); };
  auto retire_previous = [&](int u) {
    wgmma_wait<1>();
    if (u >= 1 && lane == 0) {
      const int ps = (u - 1) % ST;
      if (atomicInc(freed + ps, kWarps - 1) == kWarps - 1 && u - 1 + ST < n_units) {
        load_weights(ps, u - 1 + ST);
        load_tokens(ps, u - 1 + ST);
      }
    }
  };
  // Whole K: total = ((S0 + S1) + S2) + S3 in registers, each slice's chain
  // from zero in acc.
  float total[T::kWholeK ? kAcc : 1];
#pragma unroll 1
  for (int s = 0, u = 0; s < kOwn; ++s) {
    const int first = u, last = u + slice_units(w0 + s, chunks), pairs_end = u + slice_pairs(w0 + s, chunks);
    for (; u < pairs_end; ++u) {
      landed(u);
      mma_unit(u, u == first);
      retire_previous(u);
    }
    if (u < last) {  // an odd slice's last chunk
      landed(u);
      mma_half(u, u == first);
      retire_previous(u);
      ++u;
    }
    wgmma_wait<0>();
    pin(acc);
    if (last == first) {  // an empty slice (K of fewer than four chunks) sums to zero
#pragma unroll
      for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
    }
    if constexpr (T::kWholeK) {
#pragma unroll
      for (int i = 0; i < kAcc; ++i) total[i] = s == 0 ? acc[i] : total[i] + acc[i];
    }
  }
  __syncthreads();  // the pipeline's buffers become the partial tile

  float* part = reinterpret_cast<float*>(smem);  // [BN][kLd], token-major
#pragma unroll
  for (int i = 0; i < kAcc; ++i) {
    const int row = 64 * wg + 16 * wi + g + 8 * ((i >> 1) & 1);
    const int tk = 8 * (i >> 2) + 2 * t + (i & 1);
    part[tk * kLd + row] = T::kWholeK ? total[i] : acc[i];
  }
  // The element's scales, in order: the row's, then the token's.
  auto scaled = [&](float4 v, int tk, int r) {
    const float4 sw = *reinterpret_cast<const float4*>(row_scale + r);
    const float sx = tok_scale[tk];
    v.x = v.x * sw.x * sx;
    v.y = v.y * sw.y * sx;
    v.z = v.z * sw.z * sx;
    v.w = v.w * sw.w * sx;
    return v;
  };
  if constexpr (T::kWholeK) {
    __syncthreads();
    constexpr int kQuads = kRows / 4;  // per token
    for (int q = tid; q < BN * kQuads; q += T::kThreads) {
      const int tk = q / kQuads, r = (q % kQuads) * 4;
      const int gt = tok0 + tk, gr = row0 + r;
      if (gt < M && gr < N)
        store4(y + int64_t{gt} * N + gr,
               scaled(*reinterpret_cast<const float4*>(part + tk * kLd + r), tk, r));
    }
  } else {
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    const float* parts[kSlices];
#pragma unroll
    for (int p = 0; p < kSlices; ++p) parts[p] = cluster.map_shared_rank(part, p);
    // Block `slice` sums its quarter of the rows, a quad of rows at a time.
    constexpr int kQuads = kRows / kSlices / 4;  // per token
    for (int q = tid; q < BN * kQuads; q += T::kThreads) {
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
      if (gt < M && gr < N) store4(y + int64_t{gt} * N + gr, scaled(v, tk, r));
    }
    cluster.sync();  // the others' partials stay until every block has read them
  }
}

// One block a token row: xq[m, :] = E4M3 codes of x[m, :] / scale_x[m]
// (with kSwiGLU, of silu_mul_cuda's bf16 silu(gate) * up from gate_up's row m).
// A row of up to kQuantThreads x kQuantUnits units of 8 is loaded once into
// registers, every load issued before the first is used (a decode step's
// few rows are a few blocks: their loads' latency is the kernel's time);
// a longer row is read twice.
constexpr int kQuantThreads = 512, kQuantUnits = 4;
template <bool kSwiGLU>
__global__ void __launch_bounds__(kQuantThreads)
    quantize_tokens_kernel(const uint4* __restrict__ x, uint2* __restrict__ xq, float* __restrict__ x_scale,
                           int64_t k8) {
  __shared__ float warp_max[kQuantThreads / 32];
  const int64_t m = blockIdx.x;
  const int tid = threadIdx.x;
  cuda::wait_primary_grid();
  cuda::launch_dependents();
  auto unit = [&](int64_t u) {  // bf16 elements 8 u .. 8 u + 7 of the row
    if constexpr (kSwiGLU) {
      const uint4* gate = x + m * 2 * k8 + u;
      return swiglu::silu_mul8(gate[0], gate[k8]);
    } else {
      return x[m * k8 + u];
    }
  };
  auto lo = [](uint32_t w) { return __uint_as_float(w << 16); };
  auto hi = [](uint32_t w) { return __uint_as_float(w & 0xffff0000u); };
  auto unit_max = [&](const uint4& v) {
    float mx = 0.0f;
    for (const uint32_t w : {v.x, v.y, v.z, v.w}) mx = fmaxf(mx, fmaxf(fabsf(lo(w)), fabsf(hi(w))));
    return mx;
  };
  const bool held = k8 <= int64_t{kQuantThreads} * kQuantUnits;
  uint4 v[kQuantUnits];
  float mx = 0.0f;
  if (held) {
#pragma unroll
    for (int j = 0; j < kQuantUnits; ++j) {
      const int64_t u = tid + int64_t{j} * kQuantThreads;
      v[j] = u < k8 ? unit(u) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int j = 0; j < kQuantUnits; ++j) mx = fmaxf(mx, unit_max(v[j]));
  } else {
    for (int64_t u = tid; u < k8; u += kQuantThreads) mx = fmaxf(mx, unit_max(unit(u)));
  }
  const float sc = e4m3_block_scale(mx, warp_max);
  if (tid == 0) x_scale[m] = sc;
  auto code = [&](float f) { return e4m3_code(f, sc); };
  auto four = [&](uint32_t a, uint32_t b) {
    return code(lo(a)) | code(hi(a)) << 8 | code(lo(b)) << 16 | code(hi(b)) << 24;
  };
  if (held) {
#pragma unroll
    for (int j = 0; j < kQuantUnits; ++j) {
      const int64_t u = tid + int64_t{j} * kQuantThreads;
      if (u < k8) xq[m * k8 + u] = make_uint2(four(v[j].x, v[j].y), four(v[j].z, v[j].w));
    }
  } else {
    for (int64_t u = tid; u < k8; u += kQuantThreads) {
      const uint4 w = unit(u);
      xq[m * k8 + u] = make_uint2(four(w.x, w.y), four(w.z, w.w));
    }
  }
}

template <typename T>
void configure() {
  static const bool configured = [] {
    NS_CUDA_CHECK(
        cudaFuncSetAttribute(linear_fp8_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmem));
    return true;
  }();
  (void)configured;
}

template <typename T>
int64_t tile_blocks(int M, int N) {
  return (int64_t{N} + T::kRows - 1) / T::kRows * ((int64_t{M} + T::BN - 1) / T::BN) * T::kCluster;
}

template <typename T>
void launch(const uint8_t* xq, const float* x_scale, WeightRef w, uint16_t* y, int M, int N, int K,
            cudaStream_t s) {
  configure<T>();
  const int64_t blocks = tile_blocks<T>(M, N);
  NS_CHECK(blocks <= INT32_MAX) << "linear_cuda: " << M << " x " << N << " needs too many blocks";
  const CUtensorMap w_map = chunk_map(w.data, N, K, T::kRows, true), x_map = chunk_map(xq, M, K, T::BN, true);
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  attr[1].id = cudaLaunchAttributeClusterDimension;
  attr[1].val.clusterDim.x = T::kCluster;
  attr[1].val.clusterDim.y = 1;
  attr[1].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(T::kThreads);
  cfg.dynamicSmemBytes = T::kSmem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = 2;
  NS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, linear_fp8_kernel<T>, w_map, x_map, w.scale, x_scale, y, M, N, K));
}

template <bool kWholeK>
void launch_narrow(const uint8_t* xq, const float* x_scale, WeightRef w, uint16_t* y, int M, int N, int K,
                   cudaStream_t s) {
  if (M <= 8) return launch<Narrow<8, kWholeK>>(xq, x_scale, w, y, M, N, K, s);
  if (M <= 16) return launch<Narrow<16, kWholeK>>(xq, x_scale, w, y, M, N, K, s);
  if (M <= 32) return launch<Narrow<32, kWholeK>>(xq, x_scale, w, y, M, N, K, s);
  launch<Narrow<64, kWholeK>>(xq, x_scale, w, y, M, N, K, s);
}

int sm_count() {
  static const int sms = [] {
    int device = 0, n = 0;
    NS_CUDA_CHECK(cudaGetDevice(&device));
    NS_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    return n;
  }();
  return sms;
}

}  // namespace

Fp8Tile choose_fp8_tile(int M, int N) {
  const int64_t sms = sm_count();
  // Measured, every tile forced (model_ops_cuda_bench --sweep, H100,
  // docs/log/model_cuda.md 2026-12-07, second session). To 64 tokens the
  // 64-row tiles of the fewest n8 blocks, a slice a block (whole K where
  // those tiles alone fill two blocks an SM: gate_up, the lm_head).
  if (M <= 64) return (N + 63) / 64 >= 2 * sms ? Fp8Tile::kNarrowWholeK : Fp8Tile::kNarrow;
  // Past 64: the 128 x 64 whole-K tile where its blocks fill more than half
  // the SMs in one wave (the sweep of 2026-12-07, fourth session: o and
  // down at 192-256 tokens, qkv at 96-128, 9-17% under the tiles below,
  // which leave half the SMs idle there or take two waves).
  const int64_t narrow_whole = tile_blocks<Wide<64, true>>(M, N);
  if (2 * narrow_whole > sms && narrow_whole <= sms) return Fp8Tile::k128x64WholeK;
  // Else 128 x 128 sliced while its whole-K tiles would fill less than
  // 40% of the SMs; else whole K, in the 192-row tile where that makes a
  // quarter fewer waves (a block of three warpgroups does 1.5x the work of
  // two at ~1.2x their rate: qkv and gate_up at 1,024 rows -3% to -11%).
  const int64_t whole = tile_blocks<Wide<128, true>>(M, N);
  if (5 * whole < 2 * sms) return Fp8Tile::k128x128;
  const int64_t whole_waves = (whole + sms - 1) / sms;
  const int64_t tall_waves = (tile_blocks<Tall>(M, N) + sms - 1) / sms;
  if (5 * tall_waves < 4 * whole_waves) return Fp8Tile::k192x128WholeK;
  return Fp8Tile::k128x128WholeK;
}

void launch_linear_fp8(const uint16_t* x, bool swiglu, void* scratch, WeightRef w, uint16_t* y, int M, int N,
                       int K, Fp8Tile tile, cudaStream_t s) {
  auto* xq = static_cast<uint8_t*>(scratch);
  auto* x_scale = reinterpret_cast<float*>(xq + fp8_scales_offset(M, K));
  const auto* xv = reinterpret_cast<const uint4*>(x);
  auto* xqv = reinterpret_cast<uint2*>(xq);
  if (x == nullptr) {
    // The tokens are in the scratch already (a norm wrote them).
  } else if (swiglu) {
    cuda::launch_pdl(quantize_tokens_kernel<true>, dim3(static_cast<unsigned>(M)), dim3(kQuantThreads), 0, s,
                     xv, xqv, x_scale, int64_t{K} / 8);
  } else {
    cuda::launch_pdl(quantize_tokens_kernel<false>, dim3(static_cast<unsigned>(M)), dim3(kQuantThreads), 0, s,
                     xv, xqv, x_scale, int64_t{K} / 8);
  }
  switch (tile) {
    case Fp8Tile::kNarrow: return launch_narrow<false>(xq, x_scale, w, y, M, N, K, s);
    case Fp8Tile::kNarrowWholeK: return launch_narrow<true>(xq, x_scale, w, y, M, N, K, s);
    case Fp8Tile::k128x64: return launch<Wide<64, false>>(xq, x_scale, w, y, M, N, K, s);
    case Fp8Tile::k128x128: return launch<Wide<128, false>>(xq, x_scale, w, y, M, N, K, s);
    case Fp8Tile::k128x64WholeK: return launch<Wide<64, true>>(xq, x_scale, w, y, M, N, K, s);
    case Fp8Tile::k128x128WholeK: return launch<Wide<128, true>>(xq, x_scale, w, y, M, N, K, s);
    case Fp8Tile::k192x128WholeK: return launch<Tall>(xq, x_scale, w, y, M, N, K, s);
  }
}

}  // namespace nanoserve::linear_detail
