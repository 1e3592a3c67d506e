// The streaming kernel of linear_cuda.cuh (small M), and the dispatch between
// it, the tiled kernel (linear_cuda_wgmma.cu) and the FP8 kernel
// (linear_cuda_fp8.cu), for x or (linear_swiglu_cuda) the SwiGLU of gate_up.
// The fragment layout and the k relabelling the bf16 kernels share are in
// linear_cuda_common.cuh: each lane reads its 32 bytes of a chunk row straight
// from global memory, so every weight row is read as whole 32-byte sectors.
// Also the FP8 quantization of weight rows.

#include "ops/matmul/linear_cuda.cuh"

#include <algorithm>
#include <string>

#include "core/check.h"
#include "core/cuda/cuda_check.cuh"
#include "core/cuda/launch.cuh"
#include "core/cuda/ptx.cuh"
#include "ops/matmul/fp8_quant.cuh"
#include "ops/matmul/linear_cuda_common.cuh"
#include "ops/matmul/linear_cuda_layout.cuh"
#include "ops/silu_mul/silu_mul_cuda.cuh"

namespace nanoserve {

namespace {

using linear_detail::kChunk;
using linear_detail::kSlices;
using linear_detail::slice_begin;
using linear_detail::store;
using linear_detail::WeightRef;

constexpr int kWarps = kSlices;  // one K slice per warp
constexpr int kMaxTiles = 8;     // n8 token tiles a block holds: 64 tokens
// Bytes of weight loads in flight per lane, over its MT row tiles: 4 chunks
// (two rows of 32 bytes each).
constexpr int kWeightBytesInFlight = 256;

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
  constexpr int kUnitsPerRow = 2;  // 16-byte units of a lane's chunk row
  __shared__ float partial[kWarps - 1][kAcc][32];

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int group = blockIdx.x % groups;
  const int row0 = (blockIdx.x / groups) * (MT * 16);
  const int tok0 = group * (NT * 8);
  const int chunks = K / kChunk;
  const int c_begin = slice_begin(warp, chunks), c_end = slice_begin(warp + 1, chunks);

  // Lane (g, t)'s weight rows (g and g + 8 of each 16-row tile) and token rows,
  // as uint4 pointers at its bytes of chunk 0. Tokens past M read row 0 and
  // are never stored (a column of the mma does not touch the others).
  const int64_t k4 = K / 8;            // uint4 per row (x and w)
  constexpr int kWChunk = kChunk / 8;  // uint4 per chunk row
  const uint4* wrow[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      wrow[mt][h] = reinterpret_cast<const uint4*>(w) + int64_t{row0 + mt * 16 + g + 8 * h} * k4 +
                    kUnitsPerRow * t;
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

  constexpr int U = kWeightBytesInFlight / (16 * kUnitsPerRow * 2) / MT;  // chunks loaded ahead
  uint4 wv[U][MT][2][kUnitsPerRow];
  auto load_chunks = [&](int c) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (c + u < c_end) {
        const int64_t off = int64_t{c + u} * kWChunk;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
#pragma unroll
            for (int v = 0; v < kUnitsPerRow; ++v) wv[u][mt][h][v] = load_weight(wrow[mt][h] + off + v, stream_weights);
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
        // The chunk's A fragments, made once for all the token tiles.
        uint32_t a[MT][4][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int s = 0; s < 4; ++s) {
            linear_detail::a_frag(a[mt][s], wv[u][mt][0], wv[u][mt][1], s);
          }
        }
        const int64_t off = int64_t{c + u} * (kChunk / 8);
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const uint4 xv[2] = {__ldg(xrow[j] + off), __ldg(xrow[j] + off + 1)};
          linear_detail::mma_chunk_tile(acc, a, xv, j);
        }
      }
    }
    if (c + U < c_end) load_chunks(c + U);
  }

  // The slices meet in warp order: ((S0 + S1) + S2) + S3.
  linear_detail::meet_slices(acc, partial, warp, lane, [&](int mt, int j, int i, float v) {
    const int row = row0 + mt * 16 + g + (i >= 2 ? 8 : 0);
    const int tok = tok0 + j * 8 + 2 * t + (i & 1);
    if (tok < M) store(y + int64_t{tok} * N + row, v);
  });
}

template <int MT, int NT, typename Out>
void launch(const uint16_t* x, const uint16_t* w, Out* y, int M, int N, int K, cuda::Stream s) {
  const int groups = (M + NT * 8 - 1) / (NT * 8);
  const int64_t blocks = int64_t{N / (MT * 16)} * groups;
  NS_CHECK(blocks <= INT32_MAX) << "linear_cuda: " << M << " x " << N << " needs too many blocks";
  // One group reads each weight once: stream it past L2. Several groups reread
  // it from L2, so there it is cached normally.
  const bool stream_weights = groups == 1;
  cuda::launch_pdl(linear_kernel<MT, NT, Out>, dim3(static_cast<unsigned>(blocks)), dim3(kWarps * 32), 0, s, x, w,
                   y, M, N, K, groups, stream_weights);
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

// Whether the path runs the bf16 tiled kernel, which reads a permuted copy of
// x: past kStreamMaxTokens (linear_cuda.cuh). FP8 weights have their own kernel.
bool tiled(int64_t M, bool fp8, LinearPath path) {
  if (fp8) return false;
  if (path != LinearPath::kAuto) return path != LinearPath::kStream;
  return M > kStreamMaxTokens;
}

// x is the input, or with swiglu the [M, 2K] gate_up whose SwiGLU the tiled
// kernel's permute computes.
template <typename Out>
void dispatch(const uint16_t* x, bool swiglu, uint16_t* xp, const uint16_t* w, Out* y, int M, int N, int K,
              LinearPath path, cuda::Stream s) {
  using linear_detail::WgmmaTile;
  NS_CHECK(path != LinearPath::kTile64WholeK && path != LinearPath::kTile192x128WholeK)
      << "linear_cuda: the 64-row and 192-row whole-K tiles are FP8's";
  if (!tiled(M, false, path)) {
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

// The FP8 kernel's tile for a path: kStream is its decode tile (64 rows x
// the fewest n8 blocks), the rest as named; it has no 128 x 256 or 256 x 128.
linear_detail::Fp8Tile fp8_tile(int M, int N, LinearPath path) {
  using linear_detail::Fp8Tile;
  switch (path) {
    case LinearPath::kAuto: return linear_detail::choose_fp8_tile(M, N);
    case LinearPath::kStream: return Fp8Tile::kNarrow;
    case LinearPath::kTile64WholeK: return Fp8Tile::kNarrowWholeK;
    case LinearPath::kTile128x64: return Fp8Tile::k128x64;
    case LinearPath::kTile128x128: return Fp8Tile::k128x128;
    case LinearPath::kTile128x64WholeK: return Fp8Tile::k128x64WholeK;
    case LinearPath::kTile128x128WholeK: return Fp8Tile::k128x128WholeK;
    case LinearPath::kTile192x128WholeK: return Fp8Tile::k192x128WholeK;
    case LinearPath::kTile128x256:
    case LinearPath::kTile256x128: break;
  }
  NS_CHECK(false) << "linear_cuda: FP8 weights have no tile for path " << static_cast<int>(path);
  return Fp8Tile::kNarrow;
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Whether linear_cuda runs the problem; with swiglu, linear_swiglu_cuda (x
// is then the [M, 2K] gate_up).
bool supports(const Tensor& x, const LinearWeight& lw, const Tensor& y, bool swiglu) {
  const Tensor& w = lw.w;
  if (!x.defined() || !w.defined() || !y.defined()) return false;
  if (x.device() != Device::kCUDA || w.device() != Device::kCUDA || y.device() != Device::kCUDA) return false;
  if (x.dtype() != DType::kBF16) return false;
  if (y.dtype() != DType::kBF16 && y.dtype() != DType::kF32) return false;
  if (x.ndim() != 2 || w.ndim() != 2 || y.ndim() != 2) return false;
  if (!x.is_contiguous() || !w.is_contiguous() || !y.is_contiguous()) return false;
  const int64_t M = x.dim(0), K = w.dim(1), N = w.dim(0);
  if (w.dtype() == DType::kF8E4M3) {
    if (y.dtype() != DType::kBF16) return false;  // the tiled kernel's FP8 tiles write bf16
    const Tensor& sc = lw.scale;
    if (!sc.defined() || sc.device() != Device::kCUDA || sc.dtype() != DType::kF32 || !sc.is_contiguous() ||
        sc.numel() != N || !aligned16(sc.data()))
      return false;
  } else if (w.dtype() != DType::kBF16 || lw.scale.defined()) {
    return false;
  }
  if (x.dim(1) != (swiglu ? 2 * K : K) || y.dim(0) != M || y.dim(1) != N) return false;
  if (K % kChunk != 0 || N % 16 != 0 || 2 * K > INT32_MAX || N > INT32_MAX || M > INT32_MAX) return false;
  return aligned16(x.data()) && aligned16(w.data()) && aligned16(y.data());
}

std::string describe(const char* name, bool swiglu, const Tensor& x, const LinearWeight& w, const Tensor& y) {
  std::string d = std::string(name) + ": " + (swiglu ? "gate_up " : "x ") + dtype_name(x.dtype()) +
                  x.shape_string() + ", w " + dtype_name(w.w.dtype()) + w.w.shape_string();
  if (w.scale.defined()) d += ", scale " + std::string(dtype_name(w.scale.dtype())) + w.scale.shape_string();
  return d + ", y " + dtype_name(y.dtype()) + y.shape_string();
}

// One block a row: scale = max |w| / 448 (1 for a zero row), q = w / scale
// rounded to nearest even, saturated (the host's f32_to_f8e4m3, bit for bit).
__global__ void __launch_bounds__(256)
    quantize_fp8_rows_kernel(const uint16_t* __restrict__ w, uint8_t* __restrict__ q, float* __restrict__ scale,
                             int K) {
  __shared__ float warp_max[8];
  const uint16_t* row = w + int64_t{blockIdx.x} * K;
  float m = 0.0f;
  for (int k = threadIdx.x; k < K; k += blockDim.x) m = fmaxf(m, fabsf(__uint_as_float(uint32_t{row[k]} << 16)));
  const float sc = linear_detail::e4m3_block_scale(m, warp_max);
  if (threadIdx.x == 0) scale[blockIdx.x] = sc;
  uint8_t* out = q + int64_t{blockIdx.x} * K;
  for (int k = threadIdx.x; k < K; k += blockDim.x) {
    out[k] = static_cast<uint8_t>(linear_detail::e4m3_code(__uint_as_float(uint32_t{row[k]} << 16), sc));
  }
}

// The scratch's bytes: the FP8 kernel's E4M3 tokens and scales, or the
// tiled kernel's permuted x (or the streaming kernel's SwiGLU), M x K bf16.
int64_t scratch_bytes(int64_t M, int64_t K, bool fp8) {
  return fp8 ? linear_detail::fp8_tokens_bytes(M, K) : M * K * 2;
}

template <bool kSwiGLU>
void run(const Tensor& x, const LinearWeight& lw, const Tensor& y, const Tensor* scratch, cuda::Stream s,
         LinearPath path) {
  const char* name = kSwiGLU ? "linear_swiglu_cuda" : "linear_cuda";
  NS_CHECK(supports(x, lw, y, kSwiGLU))
      << describe(name, kSwiGLU, x, lw, y) << ": needs contiguous bf16 "
      << (kSwiGLU ? "gate_up [M, 2K]" : "x [M, K]")
      << ", w [N, K] bf16 (or F8_E4M3 with an f32 scale [N]), bf16 or f32 y [M, N], K % 64 == 0, N % 16 == 0, "
         "16-byte aligned";
  const Tensor& w = lw.w;
  const int M = static_cast<int>(x.dim(0)), N = static_cast<int>(w.dim(0)), K = static_cast<int>(w.dim(1));
  if (M == 0) return;
  const bool fp8 = lw.fp8(), tile = tiled(M, fp8, path);
  Tensor own;
  uint16_t* xp = nullptr;
  if (tile || kSwiGLU || fp8) {
    const int64_t bytes = scratch_bytes(M, K, fp8), elems = (bytes + 1) / 2;
    if (scratch == nullptr) {
      own = cuda::empty(DType::kBF16, {elems});
      scratch = &own;
    }
    NS_CHECK(scratch->device() == Device::kCUDA && scratch->dtype() == DType::kBF16 &&
             scratch->is_contiguous() && scratch->numel() >= elems && aligned16(scratch->data()))
        << name << ": the scratch needs " << elems << " contiguous bf16 on the device";
    xp = scratch->data_as<uint16_t>();
  }
  const uint16_t* xd = x.data_as<const uint16_t>();
  if (fp8) {
    NS_CHECK(y.dtype() == DType::kBF16) << name << ": FP8 weights write bf16";
    const WeightRef wr{lw.w.data(), lw.scale.data_as<const float>()};
    linear_detail::launch_linear_fp8(xd, kSwiGLU, xp, wr, y.data_as<uint16_t>(), M, N, K, fp8_tile(M, N, path), s);
    if (own.defined()) cuda::synchronize();  // the scratch is freed on return
    return;
  }
  const bool swiglu_in_permute = kSwiGLU && tile;
  if (kSwiGLU && !tile) {
    // The streaming kernel reads each input once per block of 16 rows: the
    // SwiGLU is computed once, into the scratch, and read from there.
    const Tensor act = scratch->reshape({scratch->numel()}).slice_rows(0, int64_t{M} * K).reshape({M, K});
    silu_mul_cuda(x, act, s);
    xd = xp;
  }
  const uint16_t* wd = lw.w.data_as<const uint16_t>();
  if (y.dtype() == DType::kF32) {
    dispatch(xd, swiglu_in_permute, xp, wd, y.data_as<float>(), M, N, K, path, s);
  } else {
    dispatch(xd, swiglu_in_permute, xp, wd, y.data_as<uint16_t>(), M, N, K, path, s);
  }
  if (own.defined()) cuda::synchronize();  // the scratch is freed on return
}

}  // namespace

bool linear_cuda_supports(const Tensor& x, const LinearWeight& w, const Tensor& y) {
  return supports(x, w, y, false);
}

bool linear_swiglu_cuda_supports(const Tensor& gate_up, const LinearWeight& w, const Tensor& y) {
  return supports(gate_up, w, y, true);
}

int64_t linear_cuda_scratch_elems(int64_t M, int64_t K) {
  // bf16 past the streaming kernel, FP8 (fewer bytes) at any M.
  return M == 0 ? 0 : std::max(M * K, (linear_detail::fp8_tokens_bytes(M, K) + 1) / 2);
}

int64_t linear_swiglu_cuda_scratch_elems(int64_t M, int64_t K) {
  return M * K;
}

bool linear_cuda_tiled(int64_t M, const LinearWeight& w) {
  return tiled(M, w.fp8(), LinearPath::kAuto);
}

void linear_cuda_permuted(const Tensor& xp, const LinearWeight& w, const Tensor& y, cuda::Stream s) {
  NS_CHECK(supports(xp, w, y, false)) << describe("linear_cuda_permuted", false, xp, w, y);
  const int M = static_cast<int>(xp.dim(0)), N = static_cast<int>(w.rows()), K = static_cast<int>(w.cols());
  NS_CHECK(linear_cuda_tiled(M, w)) << "linear_cuda_permuted: " << M << " tokens take the streaming kernel";
  // x == nullptr: the tiled kernel reads xp as it is.
  auto* xpd = const_cast<uint16_t*>(xp.data_as<const uint16_t>());
  const uint16_t* wd = w.w.data_as<const uint16_t>();
  if (y.dtype() == DType::kF32) {
    dispatch<float>(nullptr, false, xpd, wd, y.data_as<float>(), M, N, K, LinearPath::kAuto, s);
  } else {
    dispatch<uint16_t>(nullptr, false, xpd, wd, y.data_as<uint16_t>(), M, N, K, LinearPath::kAuto, s);
  }
}

void linear_cuda_fp8_tokens(const Tensor& scratch, const LinearWeight& w, const Tensor& y, cuda::Stream s) {
  // The tokens' shape is y's rows by w's columns: supports() on a view of the scratch as x.
  const int64_t M = y.defined() && y.ndim() == 2 ? y.dim(0) : -1;
  const bool fits = w.fp8() && M >= 0 && scratch.defined() && scratch.device() == Device::kCUDA &&
                    scratch.dtype() == DType::kBF16 && scratch.is_contiguous() &&
                    scratch.numel() >= linear_cuda_scratch_elems(M, w.cols()) && w.cols() > 0;
  NS_CHECK(fits && supports(scratch.reshape({scratch.numel()}).slice_rows(0, M * w.cols()).reshape({M, w.cols()}),
                            w, y, false))
      << "linear_cuda_fp8_tokens: needs FP8 weights, bf16 y [M, N] and the scratch of M tokens; "
      << describe("linear_cuda_fp8_tokens", false, scratch, w, y);
  if (M == 0) return;
  const int N = static_cast<int>(w.rows()), K = static_cast<int>(w.cols());
  const WeightRef wr{w.w.data(), w.scale.data_as<const float>()};
  linear_detail::launch_linear_fp8(nullptr, false, const_cast<void*>(scratch.data()), wr, y.data_as<uint16_t>(),
                                   static_cast<int>(M), N, K, linear_detail::choose_fp8_tile(static_cast<int>(M), N), s);
}

void linear_cuda(const Tensor& x, const LinearWeight& w, const Tensor& y, cuda::Stream s, LinearPath path) {
  run<false>(x, w, y, nullptr, s, path);
}

void linear_cuda(const Tensor& x, const LinearWeight& w, const Tensor& y, const Tensor& scratch, cuda::Stream s,
                 LinearPath path) {
  run<false>(x, w, y, &scratch, s, path);
}

void linear_swiglu_cuda(const Tensor& gate_up, const LinearWeight& w, const Tensor& y, const Tensor& scratch,
                        cuda::Stream s, LinearPath path) {
  run<true>(gate_up, w, y, &scratch, s, path);
}

void linear_swiglu_cuda(const Tensor& gate_up, const LinearWeight& w, const Tensor& y, cuda::Stream s,
                        LinearPath path) {
  run<true>(gate_up, w, y, nullptr, s, path);
}

LinearWeight quantize_fp8_rows_cuda(const Tensor& w, cuda::Stream s) {
  NS_CHECK(w.defined() && w.device() == Device::kCUDA && w.dtype() == DType::kBF16 && w.ndim() == 2 &&
           w.is_contiguous() && w.dim(0) <= INT32_MAX && w.dim(1) <= INT32_MAX)
      << "quantize_fp8_rows_cuda: needs a contiguous bf16 [N, K] device matrix, got " << dtype_name(w.dtype())
      << w.shape_string();
  LinearWeight out(cuda::empty(DType::kF8E4M3, {w.dim(0), w.dim(1)}), cuda::empty(DType::kF32, {w.dim(0)}));
  if (w.dim(0) == 0) return out;
  quantize_fp8_rows_kernel<<<static_cast<unsigned>(w.dim(0)), 256, 0, s>>>(
      w.data_as<const uint16_t>(), out.w.data_as<uint8_t>(), out.scale.data_as<float>(), static_cast<int>(w.dim(1)));
  NS_CUDA_CHECK(cudaGetLastError());
  return out;
}

}  // namespace nanoserve
