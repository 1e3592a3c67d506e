// The CUDA mixture of experts (moe_cuda.cuh): the routing on the device (router
// logits, softmax, top-k, weights, the counting sort of the slots by expert),
// the rank-order combine, and the layer's sequence of launches. The grouped
// expert GEMM is in moe_cuda_experts.cu.

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "core/check.h"
#include "core/cuda/cuda_check.cuh"
#include "ops/moe/moe_cuda.cuh"
#include "ops/silu_mul/silu_mul.cuh"
#include "ops/silu_mul/silu_mul_cuda.cuh"

namespace nanoserve {

namespace {

constexpr int kLogitWarps = 4;   // experts a block of the router kernel
constexpr int kLogitTokens = 8;  // tokens a block of the router kernel
constexpr int kSortThreads = 1024;
// Up to this many tokens the down kernel computes its input's SwiGLU itself
// (each block of an expert recomputes its rows': cheap beside the weights at
// decode); above, one silu_mul_cuda pass. Both give silu_mul_cuda's bits.
constexpr int64_t kFusedSwiGLUMaxTokens = 64;
constexpr int kPerLane = kMoeCudaMaxExperts / 32;  // probabilities a lane holds

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// logits[t][e] = router[e] . x[t], f32. Block (b, c): experts 4 b .. 4 b + 3
// (a warp each) for tokens 8 c .. 8 c + 7, so a router row is read once for
// 8 tokens. Lane l sums d = 4 q .. 4 q + 3 for q = l, l + 32, ... in order
// (16-byte router loads), for each token, and the lanes meet in a fixed
// butterfly: one order per D, whatever T is; then + bias[e] (gpt-oss; null:
// none). PRECOND: D % 4 == 0.
__global__ void __launch_bounds__(kLogitWarps * 32)
    moe_logits_kernel(const uint16_t* __restrict__ x, const float* __restrict__ router,
                      const float* __restrict__ bias, int T, int E, int D, float* __restrict__ logits) {
  const int e = blockIdx.x * kLogitWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  const int t0 = blockIdx.y * kLogitTokens;
  if (e >= E) return;
  const int nt = min(kLogitTokens, T - t0);
  const float4* re = reinterpret_cast<const float4*>(router + int64_t{e} * D);
  const uint2* xs = reinterpret_cast<const uint2*>(x + int64_t{t0} * D);  // 4 bf16 a uint2
  const int q4 = D / 4;
  float acc[kLogitTokens];
#pragma unroll
  for (int j = 0; j < kLogitTokens; ++j) acc[j] = 0.0f;
#pragma unroll 2
  for (int q = lane; q < q4; q += 32) {
    const float4 r = __ldg(re + q);
#pragma unroll
    for (int j = 0; j < kLogitTokens; ++j) {
      if (j < nt) {
        const uint2 v = xs[int64_t{j} * q4 + q];
        float a = acc[j];
        a = fmaf(swiglu::bf16_bits_to_f32(v.x & 0xffffu), r.x, a);
        a = fmaf(swiglu::bf16_bits_to_f32(v.x >> 16), r.y, a);
        a = fmaf(swiglu::bf16_bits_to_f32(v.y & 0xffffu), r.z, a);
        acc[j] = fmaf(swiglu::bf16_bits_to_f32(v.y >> 16), r.w, a);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kLogitTokens; ++j) {
    const float v = warp_sum(acc[j]);
    if (lane == 0 && j < nt) logits[int64_t{t0 + j} * E + e] = bias != nullptr ? v + bias[e] : v;
  }
}

// One block for the whole step. (1) Warp w routes tokens w, w + 32, ...:
// the softmax over all E (lane l holds experts l, l + 32, ...), the top_k by
// probability (highest first, the lower id on a tie, as moe_route), the
// weights (over their sum, added in rank order, when normalize); or with
// topk_first (gpt-oss) the top_k by logit and the softmax over those k
// (exp(l_j - l_0), summed in rank order, as moe_route); with forced, the
// given ids and weights instead (tests); counts per expert by
// shared atomics (exact in any order). (2) Warp 0 scans the counts
// into offsets and the active list. (3) Warp 0 places the slots 32 at a time
// in slot order: the lanes of one expert (__match_any_sync) take consecutive
// rows after its cursor, so within an expert rows go by token, then rank.
__global__ void __launch_bounds__(kSortThreads)
    moe_route_kernel(const float* __restrict__ logits, int T, int E, int k, bool normalize, bool topk_first,
                     const int32_t* __restrict__ forced, const float* __restrict__ forced_w,
                     int32_t* __restrict__ ids, float* __restrict__ weights,
                     int32_t* __restrict__ offsets, int32_t* __restrict__ active, int32_t* __restrict__ row_token,
                     int32_t* __restrict__ row_of_slot) {
  __shared__ int count[kMoeCudaMaxExperts];
  __shared__ int cursor[kMoeCudaMaxExperts + 1];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  for (int e = threadIdx.x; e < E; e += blockDim.x) count[e] = 0;
  __syncthreads();
  for (int t = warp; t < T; t += warps) {
    const float* l = logits + int64_t{t} * E;
    float p[kPerLane];
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane + 32 * i;
      p[i] = e < E ? l[e] : -INFINITY;
      mx = fmaxf(mx, p[i]);
    }
    // What ranks the experts: the probabilities (taken, or past E: -1, below
    // every one), or with topk_first the logits themselves (-inf below them).
    const float none = topk_first ? -INFINITY : -1.0f;
    if (!topk_first) {
      mx = warp_max(mx);
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int e = lane + 32 * i;
        p[i] = e < E ? expf(p[i] - mx) : none;
        if (e < E) sum += p[i];
      }
      sum = warp_sum(sum);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        if (lane + 32 * i < E) p[i] /= sum;
      }
    }
    float w[kMoeCudaMaxTopK];
    int sel[kMoeCudaMaxTopK];
#pragma unroll
    for (int j = 0; j < kMoeCudaMaxTopK; ++j) {
      if (j < k && forced != nullptr) {  // the given expert and weight
        sel[j] = forced[int64_t{t} * k + j];
        w[j] = forced_w[int64_t{t} * k + j];
      } else if (j < k) {
        // This lane's best (strict >: its lower id on a tie), then the
        // warp's: the higher probability, on a tie the lower id. A taken
        // expert's probability is -1.
        int best = -1;
        float bp = topk_first ? -INFINITY : -2.0f;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
          if (p[i] > bp) {
            best = lane + 32 * i;
            bp = p[i];
          }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
          const int ob = __shfl_xor_sync(0xffffffffu, best, o);
          const float op = __shfl_xor_sync(0xffffffffu, bp, o);
          if (op > bp || (op == bp && ob < best)) {
            best = ob;
            bp = op;
          }
        }
        sel[j] = best;
        w[j] = bp;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
          if (lane + 32 * i == best) p[i] = none;
        }
      }
    }
    if (lane == 0) {
      float s = 0.0f;
      if (topk_first && forced == nullptr) {  // w[0] is the largest selected logit
        for (int j = k - 1; j >= 0; --j) w[j] = expf(w[j] - w[0]);
      }
      for (int j = 0; j < k; ++j) s += w[j];
      for (int j = 0; j < k; ++j) {
        ids[int64_t{t} * k + j] = sel[j];
        weights[int64_t{t} * k + j] = forced == nullptr && (normalize || topk_first) ? w[j] / s : w[j];
        atomicAdd(&count[sel[j]], 1);
      }
    }
  }
  __syncthreads();  // the counts, and ids in global memory, seen by warp 0
  if (warp != 0) return;
  // Lane l owns experts [l * per, (l + 1) * per).
  const int per = (E + 31) / 32, e0 = min(E, lane * per), e1 = min(E, e0 + per);
  int rows = 0, used = 0;
  for (int e = e0; e < e1; ++e) {
    rows += count[e];
    used += count[e] > 0;
  }
  int rows_incl = rows, used_incl = used;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int r = __shfl_up_sync(0xffffffffu, rows_incl, o), u = __shfl_up_sync(0xffffffffu, used_incl, o);
    if (lane >= o) {
      rows_incl += r;
      used_incl += u;
    }
  }
  int at = rows_incl - rows, n = used_incl - used;
  for (int e = e0; e < e1; ++e) {
    offsets[e] = at;
    cursor[e] = at;
    if (count[e] > 0) active[1 + n++] = e;
    at += count[e];
  }
  if (lane == 31) {
    cursor[E] = 0;
    offsets[E] = rows_incl;
    active[0] = used_incl;
  }
  __syncwarp();
  const int S = T * k;
  const unsigned lt = (1u << lane) - 1u;
  for (int base = 0; base < S; base += 32) {
    const int s = base + lane;
    const int e = s < S ? ids[s] : E;  // E: past the end, a group of its own
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    const int first = cursor[e];
    __syncwarp();
    if (s < S) {
      const int row = first + __popc(peers & lt);
      row_of_slot[s] = row;
      row_token[row] = s / k;
    }
    if ((peers & lt) == 0 && e < E) cursor[e] = first + __popc(peers);  // the group's lowest lane
    __syncwarp();
  }
}

// y[t] = bf16(sum_r w[t][r] * ys[row_of_slot[t * k + r]]), r = 0 first, in f32.
__global__ void moe_combine_kernel(const float* __restrict__ ys, const int32_t* __restrict__ row_of_slot,
                                   const float* __restrict__ weights, int k, int D,
                                   uint16_t* __restrict__ y) {
  const int t = blockIdx.x;
  const int32_t* rows = row_of_slot + int64_t{t} * k;
  const float* w = weights + int64_t{t} * k;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float v = w[0] * ys[int64_t{rows[0]} * D + d];
    for (int r = 1; r < k; ++r) v = fmaf(w[r], ys[int64_t{rows[r]} * D + d], v);
    y[int64_t{t} * D + d] = static_cast<uint16_t>(swiglu::f32_to_bf16_bits(v));
  }
}

// act[r][f] = clamped_swiglu(gate_up[r][f], gate_up[r][F + f]), 8 outputs a
// thread (F % 8 == 0): the arithmetic of the down kernel's fused load.
__global__ void moe_clamped_swiglu_kernel(const uint16_t* __restrict__ gate_up, int64_t F, int64_t units,
                                          float alpha, float limit, uint16_t* __restrict__ act) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= units) return;
  const int64_t per_row = F / 8, r = idx / per_row, c = (idx - r * per_row) * 8;
  const uint16_t* g = gate_up + r * 2 * F + c;
  *reinterpret_cast<uint4*>(act + r * F + c) = swiglu::clamped_swiglu8(
      *reinterpret_cast<const uint4*>(g), *reinterpret_cast<const uint4*>(g + F), alpha, limit);
}

bool device_contiguous(const Tensor& t, DType dt) {
  return t.defined() && t.device() == Device::kCUDA && t.dtype() == dt && t.is_contiguous();
}

}  // namespace

std::string moe_cuda_unsupported(int64_t n_experts, int64_t top_k, int64_t dim, int64_t ffn) {
  if (n_experts < 1 || n_experts > kMoeCudaMaxExperts) {
    return std::to_string(n_experts) + " experts (the CUDA routing takes 1 to " +
           std::to_string(kMoeCudaMaxExperts) + ")";
  }
  if (top_k < 1 || top_k > kMoeCudaMaxTopK || top_k > n_experts) {
    return std::to_string(top_k) + " experts a token (the CUDA routing takes 1 to " +
           std::to_string(kMoeCudaMaxTopK) + ")";
  }
  if (dim % 64 != 0 || ffn % 64 != 0) {
    return "experts of dim " + std::to_string(dim) + " and ffn " + std::to_string(ffn) +
           " (the CUDA expert GEMM needs multiples of 64)";
  }
  return {};
}

MoeCudaWorkspace make_moe_cuda_workspace(int64_t max_tokens, int64_t n_experts, int64_t top_k, int64_t dim,
                                         int64_t ffn) {
  const std::string why = moe_cuda_unsupported(n_experts, top_k, dim, ffn);
  NS_CHECK(why.empty() && max_tokens >= 1)
      << "make_moe_cuda_workspace: " << why << ", " << max_tokens << " tokens";
  MoeCudaWorkspace ws;
  ws.max_tokens = max_tokens;
  ws.n_experts = n_experts;
  ws.top_k = top_k;
  ws.dim = dim;
  ws.ffn = ffn;
  const int64_t S = max_tokens * top_k;
  ws.logits = cuda::empty(DType::kF32, {max_tokens, n_experts});
  ws.ids = cuda::empty(DType::kI32, {S});
  ws.weights = cuda::empty(DType::kF32, {S});
  ws.offsets = cuda::empty(DType::kI32, {n_experts + 1});
  ws.active = cuda::empty(DType::kI32, {n_experts + 1});
  ws.row_token = cuda::empty(DType::kI32, {S});
  ws.row_of_slot = cuda::empty(DType::kI32, {S});
  ws.gate_up = cuda::empty(DType::kBF16, {S, 2 * ffn});
  ws.act = cuda::empty(DType::kBF16, {S, ffn});
  ws.ys = cuda::empty(DType::kF32, {S, dim});
  return ws;
}

int64_t moe_cuda_workspace_bytes(int64_t max_tokens, int64_t n_experts, int64_t top_k, int64_t dim,
                                 int64_t ffn) {
  const int64_t S = max_tokens * top_k;
  return max_tokens * n_experts * 4 + S * 4 * 4 + (n_experts + 1) * 4 * 2 + S * 2 * ffn * 2 + S * ffn * 2 +
         S * dim * 4;
}

void moe_route_cuda(const Tensor& x, const Tensor& router, const MoeParams& params, MoeCudaWorkspace& ws,
                    cuda::Stream s, const float* router_bias, const MoeForcedRouting& forced) {
  const int64_t T = x.dim(0), D = ws.dim, E = ws.n_experts, k = params.top_k;
  NS_CHECK(device_contiguous(x, DType::kBF16) && x.ndim() == 2 && x.dim(1) == D && T <= ws.max_tokens)
      << "moe_route_cuda: x " << dtype_name(x.dtype()) << x.shape_string() << " for a workspace of "
      << ws.max_tokens << " x " << D;
  NS_CHECK(device_contiguous(router, DType::kF32) && router.ndim() == 2 && router.dim(0) == E &&
           router.dim(1) == D)
      << "moe_route_cuda: router " << dtype_name(router.dtype()) << router.shape_string() << ", needs f32 ["
      << E << ", " << D << "]";
  NS_CHECK(k == ws.top_k) << "moe_route_cuda: top_k " << k << ", the workspace's " << ws.top_k;
  NS_CHECK((forced.ids == nullptr) == (forced.weights == nullptr)) << "moe_route_cuda: forced ids without weights";
  ws.n_tokens = T;
  if (T == 0) return;
  const dim3 grid(static_cast<unsigned>((E + kLogitWarps - 1) / kLogitWarps),
                  static_cast<unsigned>((T + kLogitTokens - 1) / kLogitTokens));
  moe_logits_kernel<<<grid, kLogitWarps * 32, 0, s>>>(
      x.data_as<const uint16_t>(), router.data_as<const float>(), router_bias, static_cast<int>(T),
      static_cast<int>(E), static_cast<int>(D), ws.logits.data_as<float>());
  NS_CUDA_CHECK(cudaGetLastError());
  moe_route_kernel<<<1, kSortThreads, 0, s>>>(
      ws.logits.data_as<const float>(), static_cast<int>(T), static_cast<int>(E), static_cast<int>(k),
      params.normalize, params.gating == MoeGating::kTopKThenSoftmax, forced.ids, forced.weights,
      ws.ids.data_as<int32_t>(),
      ws.weights.data_as<float>(), ws.offsets.data_as<int32_t>(), ws.active.data_as<int32_t>(),
      ws.row_token.data_as<int32_t>(), ws.row_of_slot.data_as<int32_t>());
  NS_CUDA_CHECK(cudaGetLastError());
}

void moe_clamped_swiglu_cuda(const Tensor& gate_up, const Tensor& act, float alpha, float limit,
                             cuda::Stream s) {
  NS_CHECK(device_contiguous(gate_up, DType::kBF16) && device_contiguous(act, DType::kBF16) &&
           act.ndim() == 2 && gate_up.ndim() == 2 && gate_up.dim(0) == act.dim(0) &&
           gate_up.dim(1) == 2 * act.dim(1) && act.dim(1) % 8 == 0)
      << "moe_clamped_swiglu_cuda: gate_up " << gate_up.shape_string() << ", act " << act.shape_string()
      << ": needs contiguous bf16 [S, 2F] and [S, F], F % 8 == 0";
  const int64_t units = act.numel() / 8;
  if (units == 0) return;
  constexpr int kThreads = 256;
  moe_clamped_swiglu_kernel<<<static_cast<unsigned>((units + kThreads - 1) / kThreads), kThreads, 0, s>>>(
      gate_up.data_as<const uint16_t>(), act.dim(1), units, alpha, limit, act.data_as<uint16_t>());
  NS_CUDA_CHECK(cudaGetLastError());
}

void moe_experts_cuda(const Tensor& x, const Tensor& gate_up, const Tensor& down, MoeCudaWorkspace& ws,
                      const Tensor& y, cuda::Stream s, const MoeParams& params, const MoeCudaBiases& biases) {
  const int64_t T = ws.n_tokens, S = T * ws.top_k, D = ws.dim;
  NS_CHECK(x.ndim() == 2 && x.dim(0) == T && device_contiguous(y, DType::kBF16) && y.ndim() == 2 &&
           y.dim(0) == T && y.dim(1) == D)
      << "moe_experts_cuda: x " << x.shape_string() << ", y " << dtype_name(y.dtype()) << y.shape_string()
      << " after a routing of " << T << " tokens";
  if (T == 0) return;
  const Tensor gu = ws.gate_up.slice_rows(0, S), act = ws.act.slice_rows(0, S), ys = ws.ys.slice_rows(0, S);
  MoeLinearExtras up_extras, down_extras;
  up_extras.bias = biases.gate_up;
  down_extras.bias = biases.down;
  down_extras.activation = params.activation;
  down_extras.swiglu_alpha = params.swiglu_alpha;
  down_extras.swiglu_limit = params.swiglu_limit;
  moe_grouped_linear_cuda(x, MoeRows::kGather, gate_up, ws, T, gu, s, up_extras);
  if (T <= kFusedSwiGLUMaxTokens) {
    moe_grouped_linear_cuda(gu, MoeRows::kSortedSwiGLU, down, ws, T, ys, s, down_extras);
  } else {
    if (params.activation == MoeActivation::kClampedSwiglu) {
      moe_clamped_swiglu_cuda(gu, act, params.swiglu_alpha, params.swiglu_limit, s);
    } else {
      silu_mul_cuda(gu, act, s);
    }
    moe_grouped_linear_cuda(act, MoeRows::kSorted, down, ws, T, ys, s, down_extras);
  }
  const int threads = static_cast<int>(std::min<int64_t>(256, (D + 31) / 32 * 32));
  moe_combine_kernel<<<static_cast<unsigned>(T), threads, 0, s>>>(
      ys.data_as<const float>(), ws.row_of_slot.data_as<const int32_t>(), ws.weights.data_as<const float>(),
      static_cast<int>(ws.top_k), static_cast<int>(D), y.data_as<uint16_t>());
  NS_CUDA_CHECK(cudaGetLastError());
}

void moe_ffn_cuda(const Tensor& x, const Tensor& router, const Tensor& gate_up, const Tensor& down,
                  const MoeParams& params, MoeCudaWorkspace& ws, const Tensor& y, cuda::Stream s,
                  const MoeCudaBiases& biases, const MoeForcedRouting& forced) {
  moe_route_cuda(x, router, params, ws, s, biases.router, forced);
  moe_experts_cuda(x, gate_up, down, ws, y, s, params, biases);
}

}  // namespace nanoserve
