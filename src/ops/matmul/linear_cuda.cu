// The linear kernel of linear_cuda.cuh. Fragment layout (PTX ISA, mma.m16n8k16
// with bf16 inputs): lane = 4 g + t. A (16 x 16, row-major) gives lane
// A[g][2t, 2t+1] (a0), A[g+8][same] (a1), A[g][2t+8, 2t+9] (a2), A[g+8][same]
// (a3); B (16 x 8) gives B[2t, 2t+1][g] (b0) and B[2t+8, 2t+9][g] (b1); the f32
// accumulator holds D[g][2t, 2t+1] (c0, c1) and D[g+8][same] (c2, c3).
//
// A is 16 weight rows, B is 8 tokens (x rows read as columns), both indexed by
// k. A dot product may visit k in any order, so the kernel relabels k to suit
// the loads: in a 64-wide chunk lane t owns k = 16t .. 16t+15 (two 16-byte
// loads per row) and feeds k = 16t+4s .. 16t+4s+3 to the mma of step s as its
// logical k {2t, 2t+1, 2t+8, 2t+9}. x is read with the same relabelling, so
// each product pairs the right weight and activation. Every weight row is then
// read as whole 128-byte lines.

#include "ops/matmul/linear_cuda.cuh"

#include "core/check.h"
#include "core/cuda/cuda_check.cuh"

namespace nanoserve {

namespace {

constexpr int kWarps = 4;       // K slices, one per warp; fixed, so part of every row's order
constexpr int kChunk = 64;      // k per chunk
constexpr int kMaxTiles = 8;    // n8 token tiles a block holds: 64 tokens
constexpr int kWeightRegs = 4;  // chunk-rows of weight loads in flight per warp (x MT)

__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The two 32-bit words of step s (0..3) in lane t's 32 bytes {q0, q1} of a row.
__device__ __forceinline__ uint32_t lo_word(const uint4 (&v)[2], int s) {
  return (s & 1) ? v[s >> 1].z : v[s >> 1].x;
}
__device__ __forceinline__ uint32_t hi_word(const uint4 (&v)[2], int s) {
  return (s & 1) ? v[s >> 1].w : v[s >> 1].y;
}

__device__ __forceinline__ uint4 load_weight(const uint4* p, bool stream) {
  return stream ? __ldcs(p) : __ldg(p);
}

__device__ __forceinline__ void store(float* y, float v) {
  *y = v;
}
__device__ __forceinline__ void store(uint16_t* y, float v) {
  const uint32_t u = __float_as_uint(v);
  uint32_t b;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    b = (u >> 16) | 0x0040u;  // NaN stays NaN
  } else {
    b = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // round to nearest even
  }
  *y = static_cast<uint16_t>(b);
}

// One block: MT x 16 weight rows, NT x 8 tokens of one token group. Warp w
// sums chunks [w C / 4, (w+1) C / 4) of the C = K / 64 chunks.
template <int MT, int NT, typename Out>
__global__ void __launch_bounds__(kWarps * 32)
    linear_kernel(const uint16_t* __restrict__ x, const uint16_t* __restrict__ w, Out* __restrict__ y, int M,
                  int N, int K, int groups, bool stream_weights) {
  constexpr int kAcc = MT * NT * 4;
  __shared__ float partial[kWarps - 1][kAcc][32];

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int group = blockIdx.x % groups;
  const int row0 = (blockIdx.x / groups) * (MT * 16);
  const int tok0 = group * (NT * 8);
  const int chunks = K / kChunk;
  const int c_begin = warp * chunks / kWarps, c_end = (warp + 1) * chunks / kWarps;

  // Lane (g, t)'s weight rows (g and g + 8 of each 16-row tile) and token rows,
  // as uint4 pointers at its 32 bytes of chunk 0. Tokens past M read row 0 and
  // are never stored (a column of the mma does not touch the others).
  const int64_t k4 = K / 8;  // uint4 per row
  const uint4* wrow[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      wrow[mt][h] = reinterpret_cast<const uint4*>(w) + int64_t{row0 + mt * 16 + g + 8 * h} * k4 + 2 * t;
    }
  }
  const uint4* xrow[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int tok = tok0 + j * 8 + g;
    xrow[j] = reinterpret_cast<const uint4*>(x) + int64_t{tok < M ? tok : 0} * k4 + 2 * t;
  }

  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][j][i] = 0.0f;
    }
  }

  constexpr int U = kWeightRegs / MT;  // chunks whose weights are loaded ahead
  for (int c = c_begin; c < c_end; c += U) {
    uint4 wv[U][MT][2][2];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (c + u < c_end) {
        const int64_t off = int64_t{c + u} * (kChunk / 8);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            wv[u][mt][h][0] = load_weight(wrow[mt][h] + off, stream_weights);
            wv[u][mt][h][1] = load_weight(wrow[mt][h] + off + 1, stream_weights);
          }
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (c + u < c_end) {
        const int64_t off = int64_t{c + u} * (kChunk / 8);
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const uint4 xv[2] = {__ldg(xrow[j] + off), __ldg(xrow[j] + off + 1)};
#pragma unroll
          for (int s = 0; s < 4; ++s) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
              mma_bf16(acc[mt][j], lo_word(wv[u][mt][0], s), lo_word(wv[u][mt][1], s), hi_word(wv[u][mt][0], s),
                       hi_word(wv[u][mt][1], s), lo_word(xv, s), hi_word(xv, s));
            }
          }
        }
      }
    }
  }

  // The slices meet in warp order: ((S0 + S1) + S2) + S3.
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
        for (int p = 0; p < kWarps - 1; ++p) v += partial[p][(mt * NT + j) * 4 + i][lane];
        const int row = row0 + mt * 16 + g + (i >= 2 ? 8 : 0);
        const int tok = tok0 + j * 8 + 2 * t + (i & 1);
        if (tok < M) store(y + int64_t{tok} * N + row, v);
      }
    }
  }
}

template <int MT, int NT, typename Out>
void launch(const uint16_t* x, const uint16_t* w, Out* y, int M, int N, int K, cuda::Stream s) {
  const int groups = (M + NT * 8 - 1) / (NT * 8);
  const int64_t blocks = int64_t{N / (MT * 16)} * groups;
  NS_CHECK(blocks <= INT32_MAX) << "linear_cuda: " << M << " x " << N << " needs too many blocks";
  // One group reads each weight once: stream it past L2. Several groups reread
  // it from L2, so there it is cached normally.
  linear_kernel<MT, NT, Out>
      <<<static_cast<unsigned>(blocks), kWarps * 32, 0, s>>>(x, w, y, M, N, K, groups, groups == 1);
  NS_CUDA_CHECK_LAUNCH();
}

template <typename Out>
void dispatch(const uint16_t* x, const uint16_t* w, Out* y, int M, int N, int K, cuda::Stream s) {
  // Token tiles per group: the fewest that hold M (padding is computed, not
  // stored), eight past 64 tokens. Two row tiles halve the x reads once the
  // tokens fill four tiles. Neither choice changes any element's order.
  const bool two_rows = N % 32 == 0;
  if (M <= 8) {
    launch<1, 1>(x, w, y, M, N, K, s);
  } else if (M <= 16) {
    launch<1, 2>(x, w, y, M, N, K, s);
  } else if (M <= 32) {
    two_rows ? launch<2, 4>(x, w, y, M, N, K, s) : launch<1, 4>(x, w, y, M, N, K, s);
  } else {
    two_rows ? launch<2, kMaxTiles>(x, w, y, M, N, K, s) : launch<1, kMaxTiles>(x, w, y, M, N, K, s);
  }
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace

bool linear_cuda_supports(const Tensor& x, const Tensor& w, const Tensor& y) {
  if (x.device() != Device::kCUDA || w.device() != Device::kCUDA || y.device() != Device::kCUDA) return false;
  if (x.dtype() != DType::kBF16 || w.dtype() != DType::kBF16) return false;
  if (y.dtype() != DType::kBF16 && y.dtype() != DType::kF32) return false;
  if (x.ndim() != 2 || w.ndim() != 2 || y.ndim() != 2) return false;
  if (!x.is_contiguous() || !w.is_contiguous() || !y.is_contiguous()) return false;
  const int64_t M = x.dim(0), K = x.dim(1), N = w.dim(0);
  if (w.dim(1) != K || y.dim(0) != M || y.dim(1) != N) return false;
  if (K % kChunk != 0 || N % 16 != 0 || K > INT32_MAX || N > INT32_MAX || M > INT32_MAX) return false;
  return aligned16(x.data()) && aligned16(w.data());
}

void linear_cuda(const Tensor& x, const Tensor& w, const Tensor& y, cuda::Stream s) {
  NS_CHECK(linear_cuda_supports(x, w, y))
      << "linear_cuda: x " << dtype_name(x.dtype()) << x.shape_string() << ", w " << dtype_name(w.dtype())
      << w.shape_string() << ", y " << dtype_name(y.dtype()) << y.shape_string()
      << ": needs contiguous bf16 x and w, bf16 or f32 y, K % 64 == 0, N % 16 == 0, 16-byte aligned rows";
  const int M = static_cast<int>(x.dim(0)), N = static_cast<int>(w.dim(0)), K = static_cast<int>(x.dim(1));
  if (M == 0) return;
  const auto* xp = x.data_as<const uint16_t>();
  const auto* wp = w.data_as<const uint16_t>();
  if (y.dtype() == DType::kF32) {
    dispatch(xp, wp, y.data_as<float>(), M, N, K, s);
  } else {
    dispatch(xp, wp, y.data_as<uint16_t>(), M, N, K, s);
  }
}

}  // namespace nanoserve
