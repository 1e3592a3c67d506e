// CUDA paged attention: KV write, split-KV attention (decode and extend in one
// kernel), and the split reduction. See paged_attention_cuda.cuh for layouts and
// docs/kernels.md for the design, its predictions and measurements.
//
// Attention kernel, one thread block per (query row, split, kv head group):
//  - the G query heads that share a kv head are computed together, so each K/V
//    byte of the split is read from memory once for all of them (GQA);
//  - a lane holds 8 elements (16 bytes) of a K or V row: head_dim/8 lanes cover
//    one token, a warp covers 32/(head_dim/8) tokens per step;
//  - K/V move global -> shared with cp.async (16 bytes a lane, kStages deep).
//    Each thread reads back only the chunks it copied itself, so the pipeline
//    needs no block barrier, only cp.async.wait_group;
//  - scores are f32, scaled into the log2 domain, with an online softmax per
//    token group, merged across groups and warps in a fixed order at the end;
//  - a row whose context is longer than one split writes (o, lse) partials, and
//    the splits are combined in split order by the reduction.

#include "ops/paged_attention/paged_attention_cuda.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "core/cuda/cuda_check.cuh"

namespace nanoserve {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kUnroll = 8;  // tokens a token group takes per pipeline stage
constexpr int kStages = 3;  // cp.async pipeline depth
constexpr int kMaxSplits = PagedAttentionWorkspaceCuda::kMaxSplits;
constexpr float kLog2e = 1.4426950408889634f;
// [kStages][K,V][kUnroll][kThreads] 16-byte chunks.
constexpr int kSmemBytes = kStages * 2 * kUnroll * kThreads * 16;

template <int HD>
struct Geometry {
  static_assert(HD == 64 || HD == 128, "head_dim 64 or 128");
  static constexpr int kLanesPerToken = HD / 8;  // 8 elements = 16 bytes a lane
  static constexpr int kTokensPerWarp = 32 / kLanesPerToken;
  static constexpr int kTokensPerStep = kWarps * kTokensPerWarp;
  static constexpr int kTileTokens = kTokensPerStep * kUnroll;  // tokens per pipeline stage
};

__host__ __device__ inline int tile_tokens(int head_dim) { return kWarps * (32 / (head_dim / 8)) * kUnroll; }

// A row's context [0, ctx) is cut into n_splits ranges of split_len tokens (the
// last shorter), split_len a whole number of tiles. Depends on ctx alone.
struct SplitPlan {
  int n_splits;
  int split_len;
};
__host__ __device__ inline SplitPlan plan_splits(int ctx, int tile, int max_splits) {
  const int tiles = (ctx + tile - 1) / tile;
  const int per = (tiles + max_splits - 1) / max_splits;
  return {(tiles + per - 1) / per, per * tile};
}

// ---- element types -------------------------------------------------------------

template <typename T>
struct Elem;

template <>
struct Elem<__nv_bfloat16> {
  static __device__ __forceinline__ void to_float8(const uint4& v, float (&f)[8]) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
  static __device__ __forceinline__ __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
};

template <>
struct Elem<__half> {
  static __device__ __forceinline__ void to_float8(const uint4& v, float (&f)[8]) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      __half2 h;
      memcpy(&h, &w[i], sizeof(h));
      const float2 x = __half22float2(h);
      f[2 * i] = x.x;
      f[2 * i + 1] = x.y;
    }
  }
  static __device__ __forceinline__ __half from_float(float x) { return __float2half_rn(x); }
};

// ---- small PTX helpers ---------------------------------------------------------

// 16-byte global -> shared copy; with pred false it writes 16 zero bytes instead
// (so masked slots hold finite values: 0 * p stays 0).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool pred) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int n = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// Programmatic dependent launch (sm_90): let the dependent grid start early / wait
// for the primary grid's results.
__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_primary_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// ---- kernels -------------------------------------------------------------------

template <typename T>
struct AttnParams {
  const T* q;       // [T, n_heads, HD]
  const T* k_pool;  // [num_blocks, block_size, n_kv_heads, HD]
  const T* v_pool;
  T* out;  // [T, n_heads, HD]
  const int32_t* seq_starts;  // [B+1]
  const int32_t* positions;   // [T]
  const int32_t* block_tables;
  float* partial_out;  // [rows, n_heads, kMaxSplits, HD]
  float* partial_lse;  // [rows, n_heads, kMaxSplits]
  int32_t* counters;   // [rows, n_heads]
  int num_seqs;
  int row_offset;  // this launch's first token row
  int n_heads;
  int n_kv_heads;
  int n_rep;
  int n_groups;  // head groups of G per kv head: ceil(n_rep / G)
  int block_size_log2;
  int max_blocks_per_seq;
  int max_splits;
  bool reduce_in_last_block;
  float scale_log2;  // scale * log2(e)
};

struct RowInfo {
  int seq;
  int ctx;  // positions [0, ctx) are visible to this row
};

// Token t belongs to the sequence whose range holds it and sees [0, positions[t]].
__device__ __forceinline__ RowInfo row_info(const int32_t* seq_starts, const int32_t* positions, int num_seqs, int t) {
  int lo = 0, hi = num_seqs - 1;  // the largest b with seq_starts[b] <= t owns t
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (__ldg(seq_starts + mid) <= t) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return {lo, __ldg(positions + t) + 1};
}

// out = sum_s 2^(lse_s - M) o_s / sum_s 2^(lse_s - M), in split order. Loads bypass
// L1: other blocks wrote these partials.
template <int HD>
__device__ __forceinline__ float combine_splits(const float* po, const float* plse, int n_splits, int d) {
  float m = -INFINITY;
  for (int s = 0; s < n_splits; ++s) m = fmaxf(m, __ldcg(plse + s));
  float w_sum = 0.0f, acc = 0.0f;
  for (int s = 0; s < n_splits; ++s) {
    const float w = exp2f(__ldcg(plse + s) - m);
    w_sum += w;
    acc = fmaf(w, __ldcg(po + s * HD + d), acc);
  }
  return acc / w_sum;
}

template <typename T, int HD, int G>
__global__ void __launch_bounds__(kThreads) paged_attention_split_kernel(const AttnParams<T> p) {
  using Geo = Geometry<HD>;
  constexpr int kLanes = Geo::kLanesPerToken;
  extern __shared__ uint4 smem[];  // the cp.async stages; reused by the final merge
  __shared__ int is_last_block;

  launch_dependents();  // the reduction kernel may be scheduled while this grid runs

  const int row_local = blockIdx.x;
  const int t = p.row_offset + row_local;
  const int split = blockIdx.y;
  const int kvh = blockIdx.z / p.n_groups;
  const int group = blockIdx.z % p.n_groups;
  const RowInfo ri = row_info(p.seq_starts, p.positions, p.num_seqs, t);
  const SplitPlan plan = plan_splits(ri.ctx, Geo::kTileTokens, p.max_splits);
  if (split >= plan.n_splits) return;
  const int begin = split * plan.split_len;
  const int end = min(ri.ctx, begin + plan.split_len);
  const int n_tiles = (end - begin + Geo::kTileTokens - 1) / Geo::kTileTokens;

  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  const int grp = lane / kLanes;  // token group within the warp
  const int sub = lane % kLanes;  // which 8 elements of head_dim this lane holds
  const int step_tok = warp * Geo::kTokensPerWarp + grp;

  // This lane's 8 elements of each of the G query heads, in the log2 domain.
  const int head0 = group * G;  // first head of the group within the kv head's n_rep
  float q[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (head0 + g < p.n_rep) {
      const int qh = kvh * p.n_rep + head0 + g;
      const uint4 raw = *reinterpret_cast<const uint4*>(p.q + (static_cast<int64_t>(t) * p.n_heads + qh) * HD + sub * 8);
      Elem<T>::to_float8(raw, q[g]);
#pragma unroll
      for (int e = 0; e < 8; ++e) q[g][e] *= p.scale_log2;
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) q[g][e] = 0.0f;
    }
  }

  const int32_t* table = p.block_tables + static_cast<int64_t>(ri.seq) * p.max_blocks_per_seq;
  const int bs_mask = (1 << p.block_size_log2) - 1;
  const int64_t slot_stride = static_cast<int64_t>(p.n_kv_heads) * HD;  // elements per slot
  const T* k_base = p.k_pool + static_cast<int64_t>(kvh) * HD + sub * 8;
  const T* v_base = p.v_pool + static_cast<int64_t>(kvh) * HD + sub * 8;

  auto issue = [&](int tile) {
    uint4* st = smem + (tile % kStages) * (2 * kUnroll * kThreads);
    const int tile_begin = begin + tile * Geo::kTileTokens;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int pos = tile_begin + u * Geo::kTokensPerStep + step_tok;
      const bool ok = pos < end;
      const int64_t slot =
          ok ? (static_cast<int64_t>(__ldg(table + (pos >> p.block_size_log2))) << p.block_size_log2) | (pos & bs_mask)
             : 0;
      cp_async16(st + u * kThreads + tid, k_base + slot * slot_stride, ok);
      cp_async16(st + (kUnroll + u) * kThreads + tid, v_base + slot * slot_stride, ok);
    }
    cp_async_commit();
  };

#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < n_tiles) {
      issue(i);
    } else {
      cp_async_commit();  // empty group: keeps the wait_group count uniform
    }
  }

  float m[G], l[G], acc[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[g][e] = 0.0f;
  }

  for (int tile = 0; tile < n_tiles; ++tile) {
    cp_async_wait<kStages - 2>();  // this thread's copies of `tile` have landed
    if (tile + kStages - 1 < n_tiles) {
      issue(tile + kStages - 1);  // into the stage this thread finished with last iteration
    } else {
      cp_async_commit();
    }
    const uint4* st = smem + (tile % kStages) * (2 * kUnroll * kThreads);
    const int tile_begin = begin + tile * Geo::kTileTokens;

    float s[kUnroll][G];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float kf[8];
      Elem<T>::to_float8(st[u * kThreads + tid], kf);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float a = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) a = fmaf(q[g][e], kf[e], a);
        s[u][g] = a;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int g = 0; g < G; ++g) {
#pragma unroll
        for (int off = kLanes / 2; off > 0; off >>= 1) s[u][g] += __shfl_xor_sync(0xffffffffu, s[u][g], off);
      }
      if (tile_begin + u * Geo::kTokensPerStep + step_tok >= end) {
#pragma unroll
        for (int g = 0; g < G; ++g) s[u][g] = -INFINITY;
      }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float m_new = m[g];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) m_new = fmaxf(m_new, s[u][g]);
      if (m_new == -INFINITY) {  // nothing visible yet in this token group
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) s[u][g] = 0.0f;
        continue;
      }
      const float corr = exp2f(m[g] - m_new);  // 0 when m[g] is -inf
      m[g] = m_new;
      l[g] *= corr;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[g][e] *= corr;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        s[u][g] = exp2f(s[u][g] - m_new);
        l[g] += s[u][g];
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float vf[8];
      Elem<T>::to_float8(st[(kUnroll + u) * kThreads + tid], vf);
#pragma unroll
      for (int g = 0; g < G; ++g) {
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[g][e] = fmaf(s[u][g], vf[e], acc[g][e]);
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every thread is done with the stages: reuse them for the merge

  // Merge the token groups of each warp (butterfly over the group lanes).
#pragma unroll
  for (int off = kLanes; off < 32; off <<= 1) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float m_o = __shfl_xor_sync(0xffffffffu, m[g], off);
      const float l_o = __shfl_xor_sync(0xffffffffu, l[g], off);
      const float m_new = fmaxf(m[g], m_o);
      const float a = m[g] == -INFINITY ? 0.0f : exp2f(m[g] - m_new);
      const float b = m_o == -INFINITY ? 0.0f : exp2f(m_o - m_new);
      l[g] = l[g] * a + l_o * b;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float acc_o = __shfl_xor_sync(0xffffffffu, acc[g][e], off);
        acc[g][e] = acc[g][e] * a + acc_o * b;
      }
      m[g] = m_new;
    }
  }

  // Merge the warps, in warp order, through shared memory.
  float* sm_acc = reinterpret_cast<float*>(smem);  // [kWarps][G][HD]
  float* sm_m = sm_acc + kWarps * G * HD;          // [kWarps][G]
  float* sm_l = sm_m + kWarps * G;                 // [kWarps][G]
  if (grp == 0) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
#pragma unroll
      for (int e = 0; e < 8; ++e) sm_acc[(warp * G + g) * HD + sub * 8 + e] = acc[g][e];
      if (sub == 0) {
        sm_m[warp * G + g] = m[g];
        sm_l[warp * G + g] = l[g];
      }
    }
  }
  __syncthreads();

  for (int idx = tid; idx < G * HD; idx += kThreads) {
    const int g = idx / HD, d = idx % HD;
    if (head0 + g >= p.n_rep) continue;
    float m_all = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, sm_m[w * G + g]);
    float l_all = 0.0f, a_all = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float mw = sm_m[w * G + g];
      const float f = mw == -INFINITY ? 0.0f : exp2f(mw - m_all);
      l_all = fmaf(sm_l[w * G + g], f, l_all);
      a_all = fmaf(sm_acc[(w * G + g) * HD + d], f, a_all);
    }
    const int qh = kvh * p.n_rep + head0 + g;
    if (plan.n_splits == 1) {
      p.out[(static_cast<int64_t>(t) * p.n_heads + qh) * HD + d] = Elem<T>::from_float(a_all / l_all);
    } else {
      const int64_t ph = static_cast<int64_t>(row_local) * p.n_heads + qh;
      p.partial_out[(ph * kMaxSplits + split) * HD + d] = a_all / l_all;
      if (d == 0) p.partial_lse[ph * kMaxSplits + split] = m_all + log2f(l_all);
    }
  }
  if (plan.n_splits == 1 || !p.reduce_in_last_block) return;

  // The last block of this (row, head group) to finish combines the splits. The
  // order of the sum is the split order, whichever block comes last.
  __threadfence();  // this block's partials are visible device-wide before it is counted
  __syncthreads();
  if (tid == 0) {
    int32_t* counter = p.counters + static_cast<int64_t>(row_local) * p.n_heads + blockIdx.z;
    const int prev = atomicAdd(counter, 1);
    is_last_block = prev == plan.n_splits - 1;
    if (is_last_block) *counter = 0;  // every other split has counted: ready for the next call
  }
  __syncthreads();
  if (!is_last_block) return;
  __threadfence();
  for (int idx = tid; idx < G * HD; idx += kThreads) {
    const int g = idx / HD, d = idx % HD;
    if (head0 + g >= p.n_rep) continue;
    const int qh = kvh * p.n_rep + head0 + g;
    const int64_t ph = static_cast<int64_t>(row_local) * p.n_heads + qh;
    const float o = combine_splits<HD>(p.partial_out + ph * kMaxSplits * HD, p.partial_lse + ph * kMaxSplits,
                                       plan.n_splits, d);
    p.out[(static_cast<int64_t>(t) * p.n_heads + qh) * HD + d] = Elem<T>::from_float(o);
  }
}

// One block per (row, query head), one thread per element of head_dim.
template <typename T, int HD>
__global__ void __launch_bounds__(HD) paged_attention_reduce_kernel(const AttnParams<T> p) {
  const int row_local = blockIdx.x, qh = blockIdx.y, d = threadIdx.x;
  const int t = p.row_offset + row_local;
  const RowInfo ri = row_info(p.seq_starts, p.positions, p.num_seqs, t);
  const SplitPlan plan = plan_splits(ri.ctx, Geometry<HD>::kTileTokens, p.max_splits);
  if (plan.n_splits == 1) return;  // the split kernel wrote this row
  wait_primary_grid();             // the partials are complete and visible
  const int64_t ph = static_cast<int64_t>(row_local) * p.n_heads + qh;
  const float o =
      combine_splits<HD>(p.partial_out + ph * kMaxSplits * HD, p.partial_lse + ph * kMaxSplits, plan.n_splits, d);
  p.out[(static_cast<int64_t>(t) * p.n_heads + qh) * HD + d] = Elem<T>::from_float(o);
}

// k_pool[slot_mapping[t]] = k[t], the same for v; rows of `chunks` 16-byte chunks.
__global__ void paged_kv_write_kernel(const uint4* k, const uint4* v, uint4* k_pool, uint4* v_pool,
                                      const int32_t* slot_mapping, int chunks) {
  const int t = blockIdx.x;
  const int slot = slot_mapping[t];
  if (slot < 0) return;  // padding token
  const int64_t src = static_cast<int64_t>(t) * chunks, dst = static_cast<int64_t>(slot) * chunks;
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
    k_pool[dst + c] = k[src + c];
    v_pool[dst + c] = v[src + c];
  }
}

// ---- dispatch ------------------------------------------------------------------

// Calls f.template operator()<T, HD, G>() for the runtime (dtype, head_dim, G).
template <typename F>
void dispatch(DType dtype, int head_dim, int g, F&& f) {
  auto by_g = [&]<typename T, int HD>() {
    switch (g) {
      case 1: return f.template operator()<T, HD, 1>();
      case 2: return f.template operator()<T, HD, 2>();
      case 4: return f.template operator()<T, HD, 4>();
      case 8: return f.template operator()<T, HD, 8>();
    }
    NS_CHECK(false) << "unsupported head group " << g;
  };
  auto by_hd = [&]<typename T>() {
    if (head_dim == 64) return by_g.template operator()<T, 64>();
    if (head_dim == 128) return by_g.template operator()<T, 128>();
    NS_CHECK(false) << "unsupported head_dim " << head_dim << " (64 or 128)";
  };
  if (dtype == DType::kBF16) return by_hd.template operator()<__nv_bfloat16>();
  if (dtype == DType::kF16) return by_hd.template operator()<__half>();
  NS_CHECK(false) << "unsupported KV dtype " << dtype_name(dtype) << " (bf16 or f16)";
}

int head_group_size(int n_rep) { return n_rep <= 1 ? 1 : n_rep <= 2 ? 2 : n_rep <= 4 ? 4 : 8; }

int log2_exact(int64_t x) {
  int r = 0;
  while ((int64_t{1} << r) < x) ++r;
  return (int64_t{1} << r) == x ? r : -1;
}

}  // namespace

// ---- PagedBatchCuda ------------------------------------------------------------

PagedBatchCuda::PagedBatchCuda(int32_t max_tokens, int32_t max_seqs, int32_t max_blocks_per_seq)
    : cap_tokens_(max_tokens), cap_seqs_(max_seqs), cap_blocks_(max_blocks_per_seq) {
  NS_CHECK(max_tokens > 0 && max_seqs > 0 && max_blocks_per_seq > 0) << "PagedBatchCuda capacity";
  seq_starts_ = cuda::empty(DType::kI32, {max_seqs + 1});
  positions_ = cuda::empty(DType::kI32, {max_tokens});
  block_tables_ = cuda::empty(DType::kI32, {static_cast<int64_t>(max_seqs) * max_blocks_per_seq});
  slot_mapping_ = cuda::empty(DType::kI32, {max_tokens});
}

void PagedBatchCuda::upload(const ForwardBatch& batch, cuda::Stream stream) {
  const int32_t b = static_cast<int32_t>(batch.seq_starts.size()) - 1;
  const int32_t t = b >= 0 ? batch.seq_starts[b] : 0;
  NS_CHECK(b >= 1 && b <= cap_seqs_) << "batch of " << b << " sequences, capacity " << cap_seqs_;
  NS_CHECK(t <= cap_tokens_) << t << " tokens, capacity " << cap_tokens_;
  NS_CHECK(batch.max_blocks_per_seq > 0 && batch.max_blocks_per_seq <= cap_blocks_)
      << "max_blocks_per_seq " << batch.max_blocks_per_seq << ", capacity " << cap_blocks_;
  NS_CHECK_EQ(static_cast<int64_t>(batch.context_lens.size()), b);
  NS_CHECK_EQ(static_cast<int64_t>(batch.block_tables.size()), static_cast<int64_t>(b) * batch.max_blocks_per_seq);
  NS_CHECK_EQ(static_cast<int64_t>(batch.slot_mapping.size()), t);
  NS_CHECK_EQ(static_cast<int64_t>(batch.positions.size()), t);
  NS_CHECK(batch.seq_starts[0] == 0) << "seq_starts[0] must be 0";
  int32_t max_ctx = 0;
  for (int32_t i = 0; i < b; ++i) {
    const int32_t n = batch.seq_starts[i + 1] - batch.seq_starts[i];
    NS_CHECK(n >= 0) << "seq_starts not ascending at " << i;
    NS_CHECK(batch.context_lens[i] >= n) << "sequence " << i << ": context " << batch.context_lens[i] << " < " << n
                                         << " tokens this step";
    for (int32_t j = batch.seq_starts[i]; j < batch.seq_starts[i + 1]; ++j) {
      NS_CHECK(batch.positions[j] >= 0 && batch.positions[j] < batch.context_lens[i])
          << "token " << j << ": position " << batch.positions[j] << " outside its context of "
          << batch.context_lens[i];
    }
    max_ctx = std::max(max_ctx, batch.context_lens[i]);
  }
  num_seqs_ = b;
  num_tokens_ = t;
  max_blocks_per_seq_ = batch.max_blocks_per_seq;
  max_context_len_ = max_ctx;
  cuda::copy_bytes_to_device(seq_starts_.data(), batch.seq_starts.data(), 4 * int64_t{b + 1}, stream);
  cuda::copy_bytes_to_device(positions_.data(), batch.positions.data(), 4 * int64_t{t}, stream);
  cuda::copy_bytes_to_device(block_tables_.data(), batch.block_tables.data(), 4 * int64_t{b} * max_blocks_per_seq_,
                             stream);
  cuda::copy_bytes_to_device(slot_mapping_.data(), batch.slot_mapping.data(), 4 * int64_t{t}, stream);
}

// ---- workspace -----------------------------------------------------------------

PagedAttentionWorkspaceCuda::PagedAttentionWorkspaceCuda(int32_t max_rows, int32_t n_heads, int32_t head_dim)
    : max_rows_(max_rows), n_heads_(n_heads), head_dim_(head_dim) {
  NS_CHECK(max_rows > 0 && n_heads > 0 && (head_dim == 64 || head_dim == 128))
      << "workspace: rows " << max_rows << ", heads " << n_heads << ", head_dim " << head_dim;
  partial_out_ = cuda::empty(DType::kF32, {max_rows, n_heads, kMaxSplits, head_dim});
  partial_lse_ = cuda::empty(DType::kF32, {max_rows, n_heads, kMaxSplits});
  counters_ = cuda::empty(DType::kI32, {max_rows, n_heads});
  cuda::fill_bytes(counters_, 0);
  // Opt every attention kernel into its dynamic shared memory (over the 48 KB
  // default) once, here, outside any step loop or graph capture.
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (int hd : {64, 128}) {
      for (int g : {1, 2, 4, 8}) {
        dispatch(dt, hd, g, [&]<typename T, int HD, int G>() {
          NS_CUDA_CHECK(cudaFuncSetAttribute(paged_attention_split_kernel<T, HD, G>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
        });
      }
    }
  }
}

// ---- entry points --------------------------------------------------------------

int paged_attention_cuda_num_splits(int ctx, int head_dim, int max_splits) {
  return plan_splits(ctx, tile_tokens(head_dim), max_splits > 0 ? max_splits : kMaxSplits).n_splits;
}

void paged_kv_write_cuda(const Tensor& k, const Tensor& v, const PagedBatchCuda& batch, const Tensor& k_pool,
                         const Tensor& v_pool, cuda::Stream stream) {
  NS_CHECK(k.device() == Device::kCUDA && v.device() == Device::kCUDA && k_pool.device() == Device::kCUDA &&
           v_pool.device() == Device::kCUDA)
      << "paged_kv_write_cuda: tensors must be on the CUDA device";
  NS_CHECK(k_pool.ndim() == 4 && k_pool.shape() == v_pool.shape()) << "pools " << k_pool.shape_string();
  NS_CHECK(k.dtype() == k_pool.dtype() && v.dtype() == k_pool.dtype() && v_pool.dtype() == k_pool.dtype())
      << "K/V dtype must equal the pool dtype";
  const int64_t n_kv = k_pool.dim(2), hd = k_pool.dim(3);
  NS_CHECK(k.ndim() == 3 && k.dim(0) == batch.num_tokens() && k.dim(1) == n_kv && k.dim(2) == hd &&
           v.shape() == k.shape())
      << "k " << k.shape_string() << " for " << batch.num_tokens() << " tokens into pool " << k_pool.shape_string();
  const int64_t row_bytes = dtype_bytes(k.dtype(), n_kv * hd);
  NS_CHECK(row_bytes % 16 == 0) << "a slot's row must be whole 16-byte chunks";
  if (batch.num_tokens() == 0) return;
  const int chunks = static_cast<int>(row_bytes / 16);
  const int threads = std::min(256, (chunks + 31) / 32 * 32);
  paged_kv_write_kernel<<<batch.num_tokens(), threads, 0, stream>>>(
      k.data_as<const uint4>(), v.data_as<const uint4>(), k_pool.data_as<uint4>(), v_pool.data_as<uint4>(),
      batch.slot_mapping(), chunks);
  NS_CUDA_CHECK_LAUNCH();
}

void paged_attention_cuda(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool, const PagedBatchCuda& batch,
                          int n_rep, float scale, PagedAttentionWorkspaceCuda& ws, const Tensor& out,
                          cuda::Stream stream, const PagedAttentionCudaOptions& options) {
  NS_CHECK(q.device() == Device::kCUDA && out.device() == Device::kCUDA && k_pool.device() == Device::kCUDA &&
           v_pool.device() == Device::kCUDA)
      << "paged_attention_cuda: tensors must be on the CUDA device";
  NS_CHECK(k_pool.ndim() == 4 && k_pool.shape() == v_pool.shape()) << "pools " << k_pool.shape_string();
  const DType dt = k_pool.dtype();
  NS_CHECK(q.dtype() == dt && out.dtype() == dt && v_pool.dtype() == dt) << "q, out and pools must share a dtype";
  const int64_t block_size = k_pool.dim(1), n_kv = k_pool.dim(2), hd = k_pool.dim(3);
  const int bs_log2 = log2_exact(block_size);
  NS_CHECK(bs_log2 >= 3) << "block_size " << block_size << " must be a power of two >= 8";
  NS_CHECK(n_rep >= 1) << "n_rep " << n_rep;
  const int64_t n_heads = n_kv * n_rep;
  const int64_t t_all = batch.num_tokens();
  NS_CHECK(q.ndim() == 3 && q.dim(0) == t_all && q.dim(1) == n_heads && q.dim(2) == hd && out.shape() == q.shape())
      << "q " << q.shape_string() << ", out " << out.shape_string() << " for " << t_all << " tokens, " << n_heads
      << " heads of " << hd;
  NS_CHECK(ws.n_heads() == n_heads && ws.head_dim() == hd) << "workspace made for other heads";
  NS_CHECK(static_cast<int64_t>(batch.max_context_len()) <= int64_t{batch.max_blocks_per_seq()} * block_size)
      << "context " << batch.max_context_len() << " exceeds the block table";
  const int max_splits = options.max_splits > 0 ? options.max_splits : kMaxSplits;
  NS_CHECK(max_splits <= kMaxSplits) << "max_splits " << max_splits;
  if (t_all == 0) return;

  const int g = head_group_size(n_rep);
  const int n_groups = (n_rep + g - 1) / g;
  // n_splits is not monotonic in ctx (2048 tokens may split 32 ways, 2100 only
  // 17), so the grid covers the most any row up to the longest context can have.
  const int tile = tile_tokens(static_cast<int>(hd));
  const int grid_splits = std::min(max_splits, (batch.max_context_len() + tile - 1) / tile);
  dispatch(dt, static_cast<int>(hd), g, [&]<typename T, int HD, int G>() {
    AttnParams<T> p{};
    p.q = q.data_as<const T>();
    p.k_pool = k_pool.data_as<const T>();
    p.v_pool = v_pool.data_as<const T>();
    p.out = out.data_as<T>();
    p.seq_starts = batch.seq_starts();
    p.positions = batch.positions();
    p.block_tables = batch.block_tables();
    p.partial_out = ws.partial_out();
    p.partial_lse = ws.partial_lse();
    p.counters = ws.counters();
    p.num_seqs = batch.num_seqs();
    p.n_heads = static_cast<int>(n_heads);
    p.n_kv_heads = static_cast<int>(n_kv);
    p.n_rep = n_rep;
    p.n_groups = n_groups;
    p.block_size_log2 = bs_log2;
    p.max_blocks_per_seq = batch.max_blocks_per_seq();
    p.max_splits = max_splits;
    p.reduce_in_last_block = options.reduce == SplitReduce::kLastBlock;
    p.scale_log2 = scale * kLog2e;
    for (int64_t r0 = 0; r0 < t_all; r0 += ws.max_rows()) {
      const int rows = static_cast<int>(std::min<int64_t>(ws.max_rows(), t_all - r0));
      p.row_offset = static_cast<int>(r0);
      const dim3 grid(rows, grid_splits, static_cast<unsigned>(n_kv * n_groups));
      paged_attention_split_kernel<T, HD, G><<<grid, kThreads, kSmemBytes, stream>>>(p);
      NS_CUDA_CHECK_LAUNCH();
      if (grid_splits > 1 && options.reduce == SplitReduce::kKernel) {
        cudaLaunchConfig_t cfg{};
        cfg.gridDim = dim3(rows, static_cast<unsigned>(n_heads));
        cfg.blockDim = dim3(HD);
        cfg.stream = stream;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        NS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, paged_attention_reduce_kernel<T, HD>, p));
        NS_CUDA_CHECK_LAUNCH();
      }
    }
  });
}

}  // namespace nanoserve
