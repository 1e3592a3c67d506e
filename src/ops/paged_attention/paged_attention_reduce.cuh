#pragma once
// The split reduction of CUDA paged attention (device code): one warp combines
// the split partials of one (row, head), called by the reduction kernel here
// or by the split kernel's last block (paged_attention_kernels.cuh).

#include "ops/paged_attention/paged_attention_common.cuh"

namespace nanoserve::paged_attention_kernels {

// One warp combines the n_splits partials of one (row, head):
//   out = sum_s 2^(lse_s - M) o_s / (sum_s 2^(lse_s - M) + 2^(sink_log2 - M)), summed in split order
// (sink_log2: the row's sink logit times log2(e), -inf without one: the same bits).
// Lane s holds split s's weight; lane l owns dims [l * kVec, l * kVec + kVec).
// Loads bypass L1 (other blocks wrote these partials). The lse and the first
// kDepth splits' partials are all loaded before any is used: one round trip to
// L2 for up to kDepth splits, not one for the lse and then one for the partials.
template <typename T, int HD>
__device__ __forceinline__ void combine_splits(const float* po, const float* plse, int n_splits, T* out,
                                               int lane, float sink_log2 = -INFINITY) {
  constexpr int kVec = HD / 32;
  constexpr int kDepth = 16;
  float v[kDepth][kVec];
  auto load = [&](int s0) {
#pragma unroll
    for (int i = 0; i < kDepth; ++i) {
      const float* src = po + (s0 + i) * HD + lane * kVec;
      if (s0 + i < n_splits) {
        if constexpr (kVec >= 4) {  // one or two 16-byte loads (HD 128, 256)
#pragma unroll
          for (int h = 0; h < kVec / 4; ++h) {
            const float4 x = __ldcg(reinterpret_cast<const float4*>(src) + h);
            v[i][4 * h] = x.x, v[i][4 * h + 1] = x.y, v[i][4 * h + 2] = x.z, v[i][4 * h + 3] = x.w;
          }
        } else {
          const float2 x = __ldcg(reinterpret_cast<const float2*>(src));
          v[i][0] = x.x, v[i][1] = x.y;
        }
      } else {
#pragma unroll
        for (int k = 0; k < kVec; ++k) v[i][k] = 0.0f;
      }
    }
  };
  const float lse = lane < n_splits ? __ldcg(plse + lane) : -INFINITY;
  load(0);
  float m = lse;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  const float w = lane < n_splits ? exp2f(lse - m) : 0.0f;
  float w_sum = w;  // butterfly: every lane ends with the same sum
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) w_sum += __shfl_xor_sync(0xffffffffu, w_sum, off);
  if (sink_log2 > -INFINITY) w_sum = __fadd_rn(w_sum, exp2f(__fsub_rn(sink_log2, m)));  // every lane alike
  float acc[kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) acc[k] = 0.0f;
  for (int s0 = 0; s0 < n_splits; s0 += kDepth) {
    if (s0 > 0) load(s0);
#pragma unroll
    for (int i = 0; i < kDepth; ++i) {
      const float ws = __shfl_sync(0xffffffffu, w, (s0 + i) & 31);  // 0 past n_splits
#pragma unroll
      for (int k = 0; k < kVec; ++k) acc[k] = fmaf(ws, v[i][k], acc[k]);
    }
  }
  const float inv = 1.0f / w_sum;
  // The lane's kVec dims in one store.
  if constexpr (kVec == 8) {
    uint4 packed;
    packed.x = Elem<T>::pack2(acc[0] * inv, acc[1] * inv);
    packed.y = Elem<T>::pack2(acc[2] * inv, acc[3] * inv);
    packed.z = Elem<T>::pack2(acc[4] * inv, acc[5] * inv);
    packed.w = Elem<T>::pack2(acc[6] * inv, acc[7] * inv);
    *reinterpret_cast<uint4*>(out + lane * kVec) = packed;
  } else if constexpr (kVec == 4) {
    uint2 packed;
    packed.x = Elem<T>::pack2(acc[0] * inv, acc[1] * inv);
    packed.y = Elem<T>::pack2(acc[2] * inv, acc[3] * inv);
    *reinterpret_cast<uint2*>(out + lane * kVec) = packed;
  } else {
    *reinterpret_cast<uint32_t*>(out + lane * kVec) = Elem<T>::pack2(acc[0] * inv, acc[1] * inv);
  }
}

// One warp per (row, query head), one a block.
template <typename T, int HD>
__global__ void __launch_bounds__(32) paged_attention_reduce_kernel(const __grid_constant__ AttnParams<T> p) {
  launch_dependents();  // whatever follows may start its prologue now
  const int row_local = blockIdx.x;
  const int qh = blockIdx.y;
  const int t = p.row_offset + row_local;
  const RowInfo ri = row_info(p, t);
  constexpr int kTile = Geometry<HD>::kTileTokens;
  const SplitPlan plan = plan_splits(ri.ctx - sliding_first(ri.ctx, p.sliding_window, kTile), kTile,
                                     p.max_splits, p.min_split_tiles);
  if (plan.n_splits == 1 || qh >= p.n_heads) return;  // the split kernel wrote this row
  wait_primary_grid();                                // the partials are complete and visible
  const int64_t ph = static_cast<int64_t>(row_local) * p.n_heads + qh;
  const float sink_log2 = p.sinks != nullptr ? __fmul_rn(__ldg(p.sinks + qh), kLog2e) : -INFINITY;
  combine_splits<T, HD>(p.partial_out + ph * kMaxSplits * HD, p.partial_lse + ph * kMaxSplits, plan.n_splits,
                        p.out + (static_cast<int64_t>(t) * p.n_heads + qh) * HD, threadIdx.x % 32, sink_log2);
  __syncwarp();
}

}  // namespace nanoserve::paged_attention_kernels
