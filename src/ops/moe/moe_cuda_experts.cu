// The grouped expert GEMM of moe_cuda.cuh: for each active expert, its weight
// rows over its rows of the routing, on linear_cuda's arithmetic
// (ops/matmul/linear_cuda_common.cuh), so that every output element is the
// same chain as linear_cuda's for its K: four warps, warp w summing the
// 64-wide chunks of K slice w in order (each chunk four k16 mma steps with
// the chunk's k relabelling), the four partial sums added in warp order.
// Which rows share a block (and how many) never changes an element's order.
//
// Grid: (N / (MT * 16) row blocks) x (min(E, S) expert places). Place j runs
// the j-th active expert (ws.active) or, past their count, returns at once:
// the grid depends on T alone, so a captured graph serves any routing. A
// block streams its MT * 16 weight rows once for each group of up to NT * 8
// of the expert's rows, NT chosen for the rows an expert is expected to
// have (launch_for): the weights are read once from memory, a further pass
// finding them in L2.

#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "core/check.h"
#include "core/cuda/cuda_check.cuh"
#include "ops/matmul/linear_cuda_common.cuh"
#include "ops/moe/moe_cuda.cuh"
#include "ops/silu_mul/silu_mul.cuh"

namespace nanoserve {

namespace {

using linear_detail::kChunk;
using linear_detail::kSlices;
using linear_detail::slice_begin;
using linear_detail::store;

constexpr int kWarps = kSlices;  // one K slice a warp
// Bytes of weight loads in flight a lane, over its MT row tiles: 4 chunks of
// two 16-byte units for two rows (linear_cuda's streaming kernel's figure).
constexpr int kWeightBytesInFlight = 256;

__device__ __forceinline__ uint4 load_weight(const uint4* p, bool stream) {
  return stream ? __ldcs(p) : __ldg(p);
}

// The x rows of the kernel: as they are, or the SwiGLU of gate_up rows
// (silu_mul_cuda's bits), or its clamped form (gpt-oss: moe_clamped_swiglu_cuda's).
enum class XAct : int { kNone, kSilu, kClamped };

// x: [*, K] bf16 rows (x row of sorted row i: row_token[i] when gather, else
// i), or with kAct != kNone [S, 2K] gate_up rows whose SwiGLU is x (each
// lane computes its 16 values of a chunk with silu_mul.cuh); w: [E, N, K]
// bf16; y: [S, N], each element + bias[e][n] in f32 where bias is not null
// (after the chain: the sum's order is the same with it).
template <int MT, int NT, XAct kAct, typename Out>
__global__ void __launch_bounds__(kWarps * 32)
    moe_linear_kernel(const uint16_t* __restrict__ x, const int32_t* __restrict__ row_token,
                      const uint16_t* __restrict__ w, const int32_t* __restrict__ offsets,
                      const int32_t* __restrict__ active, const float* __restrict__ bias, float alpha,
                      float limit, Out* __restrict__ y, int N, int K) {
  constexpr bool kSwiGLU = kAct != XAct::kNone;
  constexpr int kAcc = MT * NT * 4;
  constexpr int kRows = NT * 8;  // the expert's rows a pass
  __shared__ float partial[kWarps - 1][kAcc][32];
  if (static_cast<int>(blockIdx.y) >= active[0]) return;
  const int e = active[1 + blockIdx.y];
  const int r_begin = offsets[e], r_end = offsets[e + 1];

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int row0 = blockIdx.x * (MT * 16);
  const int chunks = K / kChunk;
  const int c_begin = slice_begin(warp, chunks), c_end = slice_begin(warp + 1, chunks);
  const int64_t k4 = K / 8;                  // uint4 a row of w
  const int64_t x4 = kSwiGLU ? 2 * k4 : k4;  // uint4 a row of x (gate_up: gate, then up)
  constexpr int kWChunk = kChunk / 8;
  const uint4* wrow[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      wrow[mt][h] =
          reinterpret_cast<const uint4*>(w) + (int64_t{e} * N + row0 + mt * 16 + g + 8 * h) * k4 + 2 * t;
    }
  }
  // One pass: weights streamed past L2 (read once); several: kept for the next pass.
  const bool stream_weights = r_end - r_begin <= kRows;
  constexpr int U = kWeightBytesInFlight / (16 * 2 * 2) / MT;  // chunks loaded ahead
  for (int p0 = r_begin; p0 < r_end; p0 += kRows) {
    // Lane (g, t)'s x rows: rows past the expert's read its first row and are
    // never stored (an mma column does not touch the others).
    const uint4* xrow[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int r = p0 + j * 8 + g < r_end ? p0 + j * 8 + g : p0;
      const int src = row_token != nullptr ? __ldg(row_token + r) : r;
      xrow[j] = reinterpret_cast<const uint4*>(x) + int64_t{src} * x4 + 2 * t;
    }
    // Token tiles with at least one of the expert's rows (uniform in the block).
    const int tiles = min(NT, (r_end - p0 + 7) / 8);

    float acc[MT][NT][4];
    linear_detail::zero_acc(acc);
    uint4 wv[U][MT][2][2];
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
              for (int v = 0; v < 2; ++v)
                wv[u][mt][h][v] = load_weight(wrow[mt][h] + off + v, stream_weights);
            }
          }
        }
      }
    };
    load_chunks(c_begin);
    for (int c = c_begin; c < c_end; c += U) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (c + u < c_end) {
          uint32_t a[MT][4][4];
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int s = 0; s < 4; ++s) linear_detail::a_frag(a[mt][s], wv[u][mt][0], wv[u][mt][1], s);
          }
          const int64_t off = int64_t{c + u} * (kChunk / 8);
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            if (j < tiles) {
              uint4 xv[2];
              if constexpr (kAct == XAct::kSilu) {
                xv[0] = swiglu::silu_mul8(__ldg(xrow[j] + off), __ldg(xrow[j] + k4 + off));
                xv[1] = swiglu::silu_mul8(__ldg(xrow[j] + off + 1), __ldg(xrow[j] + k4 + off + 1));
              } else if constexpr (kAct == XAct::kClamped) {
                xv[0] =
                    swiglu::clamped_swiglu8(__ldg(xrow[j] + off), __ldg(xrow[j] + k4 + off), alpha, limit);
                xv[1] = swiglu::clamped_swiglu8(__ldg(xrow[j] + off + 1), __ldg(xrow[j] + k4 + off + 1),
                                                alpha, limit);
              } else {
                xv[0] = __ldg(xrow[j] + off);
                xv[1] = __ldg(xrow[j] + off + 1);
              }
              linear_detail::mma_chunk_tile(acc, a, xv, j);
            }
          }
        }
      }
      if (c + U < c_end) load_chunks(c + U);
    }

    // The slices meet in warp order: ((S0 + S1) + S2) + S3.
    linear_detail::meet_slices(acc, partial, warp, lane, [&](int mt, int j, int i, float v) {
      const int row = row0 + mt * 16 + g + (i >= 2 ? 8 : 0);
      const int r = p0 + j * 8 + 2 * t + (i & 1);
      if (bias != nullptr) v += __ldg(bias + int64_t{e} * N + row);
      if (r < r_end) store(y + int64_t{r} * N + row, v);
    });
    __syncthreads();  // partial is rewritten by the next pass
  }
}

template <int MT, int NT, typename Out>
void launch(const uint16_t* x, XAct act, const int32_t* row_token, const uint16_t* w,
            const MoeCudaWorkspace& ws, Out* y, int places, int N, int K, const MoeLinearExtras& ex,
            cuda::Stream s) {
  const dim3 grid(static_cast<unsigned>(N / (MT * 16)), static_cast<unsigned>(places));
  auto kernel = moe_linear_kernel<MT, NT, XAct::kNone, Out>;
  if constexpr (std::is_same_v<Out, float>) {  // the SwiGLU input feeds down, whose y is f32
    if (act == XAct::kSilu) kernel = moe_linear_kernel<MT, NT, XAct::kSilu, Out>;
    if (act == XAct::kClamped) kernel = moe_linear_kernel<MT, NT, XAct::kClamped, Out>;
  } else {
    NS_CHECK(act == XAct::kNone) << "moe_grouped_linear_cuda: the SwiGLU input with a bf16 y";
  }
  kernel<<<grid, kWarps * 32, 0, s>>>(x, row_token, w, ws.offsets.data_as<const int32_t>(),
                                      ws.active.data_as<const int32_t>(), ex.bias, ex.swiglu_alpha,
                                      ex.swiglu_limit, y, N, K);
  NS_CUDA_CHECK(cudaGetLastError());
}

// Token tiles a pass: for the rows an expert is expected to have (T top_k /
// E, doubled for the spread of a random routing; at most T), the fewest
// that hold them, up to 8; an expert with more runs further passes (its
// weights again, from L2). Two row tiles once four token tiles run (half
// the x reads). Decode at batch 64 of top-8 of 128 (4 rows an expert on
// average) so runs 8 rows a pass at 126 registers rather than 64 at 228.
// None of this changes any element's order.
template <typename Out>
void launch_for(const uint16_t* x, XAct swiglu, const int32_t* row_token, const uint16_t* w,
                const MoeCudaWorkspace& ws, Out* y, int64_t T, int places, int N, int K,
                const MoeLinearExtras& ex, cuda::Stream s) {
  const bool two_rows = N % 32 == 0;
  const int64_t rows = std::min<int64_t>(T, 2 * ((T * ws.top_k + ws.n_experts - 1) / ws.n_experts));
  if (rows <= 8) {
    launch<1, 1>(x, swiglu, row_token, w, ws, y, places, N, K, ex, s);
  } else if (rows <= 16) {
    launch<1, 2>(x, swiglu, row_token, w, ws, y, places, N, K, ex, s);
  } else if (rows <= 32) {
    two_rows ? launch<2, 4>(x, swiglu, row_token, w, ws, y, places, N, K, ex, s)
             : launch<1, 4>(x, swiglu, row_token, w, ws, y, places, N, K, ex, s);
  } else {
    two_rows ? launch<2, 8>(x, swiglu, row_token, w, ws, y, places, N, K, ex, s)
             : launch<1, 8>(x, swiglu, row_token, w, ws, y, places, N, K, ex, s);
  }
}

}  // namespace

void moe_grouped_linear_cuda(const Tensor& x, MoeRows rows, const Tensor& w, const MoeCudaWorkspace& ws,
                             int64_t T, const Tensor& y, cuda::Stream s, const MoeLinearExtras& extras) {
  const int64_t S = T * ws.top_k, E = ws.n_experts;
  const bool gather = rows == MoeRows::kGather, swiglu = rows == MoeRows::kSortedSwiGLU;
  auto on_device = [](const Tensor& t) {
    return t.defined() && t.device() == Device::kCUDA && t.is_contiguous();
  };
  NS_CHECK(on_device(x) && on_device(w) && on_device(y) && x.dtype() == DType::kBF16 &&
           w.dtype() == DType::kBF16 && (y.dtype() == DType::kBF16 || y.dtype() == DType::kF32) &&
           x.ndim() == 2 && w.ndim() == 3 && y.ndim() == 2)
      << "moe_grouped_linear_cuda: x " << dtype_name(x.dtype()) << x.shape_string() << ", w "
      << dtype_name(w.dtype()) << w.shape_string() << ", y " << dtype_name(y.dtype()) << y.shape_string()
      << ": needs contiguous device bf16 x [rows, K], bf16 w [E, N, K], bf16 or f32 y [S, N]";
  const int64_t N = w.dim(1), K = w.dim(2);
  NS_CHECK(w.dim(0) == E && x.dim(1) == (swiglu ? 2 * K : K) && x.dim(0) == (gather ? T : S) &&
           y.dim(0) == S && y.dim(1) == N && K % kChunk == 0 && N % 16 == 0 && T <= ws.max_tokens)
      << "moe_grouped_linear_cuda: x " << x.shape_string() << ", w " << w.shape_string() << ", y "
      << y.shape_string() << " for " << T << " tokens of top_k " << ws.top_k << " (K % 64, N % 16)";
  if (T == 0) return;
  const int places = static_cast<int>(std::min(E, S));
  const int32_t* rt = gather ? ws.row_token.data_as<const int32_t>() : nullptr;
  const auto* xd = x.data_as<const uint16_t>();
  const auto* wd = w.data_as<const uint16_t>();
  const int n = static_cast<int>(N), k = static_cast<int>(K);
  const XAct act = !swiglu                                              ? XAct::kNone
                   : extras.activation == MoeActivation::kClampedSwiglu ? XAct::kClamped
                                                                        : XAct::kSilu;
  if (y.dtype() == DType::kF32) {
    launch_for(xd, act, rt, wd, ws, y.data_as<float>(), T, places, n, k, extras, s);
  } else {
    launch_for(xd, act, rt, wd, ws, y.data_as<uint16_t>(), T, places, n, k, extras, s);
  }
}

}  // namespace nanoserve
