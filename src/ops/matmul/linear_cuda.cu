// The streaming kernel of linear_cuda.cuh (small M), and the dispatch between
// it and the tiled kernel (linear_cuda_wgmma.cu), for x or (linear_swiglu_cuda)
// the SwiGLU of gate_up. The fragment layout and the
// k relabelling they share are in linear_cuda_common.cuh: each lane reads its
// 32 bytes of a chunk row straight from global memory, so every weight row is
// read as whole 128-byte lines.

#include "ops/matmul/linear_cuda.cuh"

#include "core/check.h"
#include "core/cuda/cuda_check.cuh"
#include "core/cuda/launch.cuh"
#include "core/cuda/ptx.cuh"
#include "ops/matmul/linear_cuda_common.cuh"
#include "ops/silu_mul/silu_mul_cuda.cuh"

namespace nanoserve {

namespace {

using linear_detail::kChunk;
using linear_detail::kSlices;
using linear_detail::mma_step;
using linear_detail::slice_begin;
using linear_detail::store;

constexpr int kWarps = kSlices;  // one K slice per warp
constexpr int kMaxTiles = 8;     // n8 token tiles a block holds: 64 tokens
constexpr int kWeightRegs = 4;   // chunk-rows of weight loads in flight per warp (x MT)

__device__ __forceinline__ uint4 load_weight(const uint4* p, bool stream) {
  return stream ? __ldcs(p) : __ldg(p);
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
  const int c_begin = slice_begin(warp, chunks), c_end = slice_begin(warp + 1, chunks);

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
  linear_detail::zero_acc(acc);

  constexpr int U = kWeightRegs / MT;  // chunks whose weights are loaded ahead
  uint4 wv[U][MT][2][2];
  auto load_chunks = [&](int c) {
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
  };
  // The weights are never written: the first chunks' loads go out before the
  // wait, while the kernel before (attention, a norm) still runs.
  load_chunks(c_begin);

  // x is the previous kernel's output (launched dependent: core/cuda/launch.cuh).
  cuda::wait_primary_grid();
  cuda::launch_dependents();
  for (int c = c_begin; c < c_end; c += U) {
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
              mma_step(acc[mt][j], wv[u][mt][0][s >> 1], wv[u][mt][1][s >> 1], xv[s >> 1], s);
            }
          }
        }
      }
    }
    if (c + U < c_end) load_chunks(c + U);
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
  const bool stream_weights = groups == 1;
  cuda::launch_pdl(linear_kernel<MT, NT, Out>, dim3(static_cast<unsigned>(blocks)), dim3(kWarps * 32), 0, s,
                   x, w, y, M, N, K, groups, stream_weights);
}

// Token tiles per group: the fewest that hold M (padding is computed, not
// stored). Two row tiles halve the x reads once the tokens fill four tiles.
// Neither choice changes any element's order.
template <typename Out>
void launch_stream(const uint16_t* x, const uint16_t* w, Out* y, int M, int N, int K, cuda::Stream s) {
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

// Whether the path runs the tiled kernel, which reads a permuted copy of x.
bool tiled(int64_t M, LinearPath path) {
  return path == LinearPath::kAuto ? M > 32 : path != LinearPath::kStream;
}

// x is the input, or with swiglu the [M, 2K] gate_up whose SwiGLU the tiled
// kernel's permute computes.
template <typename Out>
void dispatch(const uint16_t* x, bool swiglu, uint16_t* xp, const uint16_t* w, Out* y, int M, int N, int K,
              LinearPath path, cuda::Stream s) {
  using linear_detail::WgmmaTile;
  if (!tiled(M, path)) {
    // A group of more than 64 tokens runs as several groups, each rereading the weights.
    launch_stream(x, w, y, M, N, K, s);
    return;
  }
  const WgmmaTile tile = path == LinearPath::kTile128x64          ? WgmmaTile::k128x64
                         : path == LinearPath::kTile128x128       ? WgmmaTile::k128x128
                         : path == LinearPath::kTile128x256       ? WgmmaTile::k128x256
                         : path == LinearPath::kTile256x128       ? WgmmaTile::k256x128
                         : path == LinearPath::kTile128x128WholeK ? WgmmaTile::k128x128WholeK
                         : path == LinearPath::kTile128x64WholeK  ? WgmmaTile::k128x64WholeK
                                                                  : linear_detail::choose_tile(M, N);
  linear_detail::launch_linear_wgmma(x, swiglu, xp, w, y, M, N, K, tile, s);
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Whether linear_cuda runs the problem; with swiglu, linear_swiglu_cuda (x
// is then the [M, 2K] gate_up).
bool supports(const Tensor& x, const Tensor& w, const Tensor& y, bool swiglu) {
  if (x.device() != Device::kCUDA || w.device() != Device::kCUDA || y.device() != Device::kCUDA) return false;
  if (x.dtype() != DType::kBF16 || w.dtype() != DType::kBF16) return false;
  if (y.dtype() != DType::kBF16 && y.dtype() != DType::kF32) return false;
  if (x.ndim() != 2 || w.ndim() != 2 || y.ndim() != 2) return false;
  if (!x.is_contiguous() || !w.is_contiguous() || !y.is_contiguous()) return false;
  const int64_t M = x.dim(0), K = w.dim(1), N = w.dim(0);
  if (x.dim(1) != (swiglu ? 2 * K : K) || y.dim(0) != M || y.dim(1) != N) return false;
  if (K % kChunk != 0 || N % 16 != 0 || 2 * K > INT32_MAX || N > INT32_MAX || M > INT32_MAX) return false;
  return aligned16(x.data()) && aligned16(w.data()) && aligned16(y.data());
}

template <bool kSwiGLU>
void run(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor* scratch, cuda::Stream s,
         LinearPath path) {
  const char* name = kSwiGLU ? "linear_swiglu_cuda" : "linear_cuda";
  NS_CHECK(supports(x, w, y, kSwiGLU))
      << name << ": " << (kSwiGLU ? "gate_up " : "x ") << dtype_name(x.dtype()) << x.shape_string() << ", w "
      << dtype_name(w.dtype()) << w.shape_string() << ", y " << dtype_name(y.dtype()) << y.shape_string()
      << ": needs contiguous bf16 " << (kSwiGLU ? "gate_up [M, 2K]" : "x [M, K]")
      << " and w [N, K], bf16 or f32 y [M, N], K % 64 == 0, N % 16 == 0, 16-byte aligned";
  const int M = static_cast<int>(x.dim(0)), N = static_cast<int>(w.dim(0)), K = static_cast<int>(w.dim(1));
  if (M == 0) return;
  const bool tile = tiled(M, path);
  Tensor own;
  uint16_t* xp = nullptr;
  if (tile || kSwiGLU) {
    if (scratch == nullptr) {
      own = cuda::empty(DType::kBF16, {int64_t{M} * K});
      scratch = &own;
    }
    NS_CHECK(scratch->device() == Device::kCUDA && scratch->dtype() == DType::kBF16 &&
             scratch->is_contiguous() && scratch->numel() >= int64_t{M} * K && aligned16(scratch->data()))
        << name << ": the scratch needs " << int64_t{M} * K << " contiguous bf16 on the device";
    xp = scratch->data_as<uint16_t>();
  }
  const uint16_t* xd = x.data_as<const uint16_t>();
  const bool swiglu_in_permute = kSwiGLU && tile;
  if (kSwiGLU && !tile) {
    // The streaming kernel reads each input once per block of 16 rows: the
    // SwiGLU is computed once, into the scratch, and read from there.
    const Tensor act = scratch->reshape({scratch->numel()}).slice_rows(0, int64_t{M} * K).reshape({M, K});
    silu_mul_cuda(x, act, s);
    xd = xp;
  }
  const auto* wd = w.data_as<const uint16_t>();
  if (y.dtype() == DType::kF32) {
    dispatch(xd, swiglu_in_permute, xp, wd, y.data_as<float>(), M, N, K, path, s);
  } else {
    dispatch(xd, swiglu_in_permute, xp, wd, y.data_as<uint16_t>(), M, N, K, path, s);
  }
  if (own.defined()) cuda::synchronize();  // the scratch is freed on return
}

}  // namespace

bool linear_cuda_supports(const Tensor& x, const Tensor& w, const Tensor& y) {
  return supports(x, w, y, false);
}

bool linear_swiglu_cuda_supports(const Tensor& gate_up, const Tensor& w, const Tensor& y) {
  return supports(gate_up, w, y, true);
}

int64_t linear_cuda_scratch_elems(int64_t M, int64_t K) {
  return M > 32 ? M * K : 0;
}

int64_t linear_swiglu_cuda_scratch_elems(int64_t M, int64_t K) {
  return M * K;
}

bool linear_cuda_tiled(int64_t M) {
  return tiled(M, LinearPath::kAuto);
}

void linear_cuda_permuted(const Tensor& xp, const Tensor& w, const Tensor& y, cuda::Stream s) {
  NS_CHECK(supports(xp, w, y, false))
      << "linear_cuda_permuted: x " << dtype_name(xp.dtype()) << xp.shape_string() << ", w "
      << dtype_name(w.dtype()) << w.shape_string() << ", y " << dtype_name(y.dtype()) << y.shape_string();
  const int M = static_cast<int>(xp.dim(0)), N = static_cast<int>(w.dim(0)), K = static_cast<int>(w.dim(1));
  NS_CHECK(linear_cuda_tiled(M)) << "linear_cuda_permuted: " << M << " tokens take the streaming kernel";
  // x == nullptr: the tiled kernel reads xp as it is.
  auto* xpd = const_cast<uint16_t*>(xp.data_as<const uint16_t>());
  const auto* wd = w.data_as<const uint16_t>();
  if (y.dtype() == DType::kF32) {
    dispatch<float>(nullptr, false, xpd, wd, y.data_as<float>(), M, N, K, LinearPath::kAuto, s);
  } else {
    dispatch<uint16_t>(nullptr, false, xpd, wd, y.data_as<uint16_t>(), M, N, K, LinearPath::kAuto, s);
  }
}

void linear_cuda(const Tensor& x, const Tensor& w, const Tensor& y, cuda::Stream s, LinearPath path) {
  run<false>(x, w, y, nullptr, s, path);
}

void linear_cuda(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& scratch, cuda::Stream s,
                 LinearPath path) {
  run<false>(x, w, y, &scratch, s, path);
}

void linear_swiglu_cuda(const Tensor& gate_up, const Tensor& w, const Tensor& y, const Tensor& scratch,
                        cuda::Stream s, LinearPath path) {
  run<true>(gate_up, w, y, &scratch, s, path);
}

void linear_swiglu_cuda(const Tensor& gate_up, const Tensor& w, const Tensor& y, cuda::Stream s,
                        LinearPath path) {
  run<true>(gate_up, w, y, nullptr, s, path);
}

}  // namespace nanoserve
