// CUDA paged attention: KV write, split-KV attention (decode and extend in one
// kernel), and the split reduction. See paged_attention_cuda.cuh for layouts and
// docs/kernels.md for the design, its versions, predictions and measurements.
//
// Attention kernel (v2, tensor cores), one thread block of 4 warps per
// (query row, split, kv head group):
//  - the G <= 8 query heads that share a kv head are the M rows of one
//    mma.m16n8k16 tile (rows G..15 are zero), so each K/V byte of the split is
//    read from memory once for all of them (GQA), and S = Q K^T and O += P V
//    each cost one mma per 8 tokens x 16 dims instead of scalar FMA chains;
//  - each warp streams its own tokens global -> shared with bulk copies (one
//    K or V row of a head a copy, a lane a row, completing on the warp's
//    mbarrier for that stage; 2 to 4 stages deep; rows padded by 16 bytes so
//    ldmatrix is conflict-free) and reads them back with ldmatrix (.trans for
//    V): warps never wait for each other until the end of the split;
//  - the softmax is online, in f32, in the log2 domain; P is rounded to the KV
//    dtype for the P V product (as flash attention does), l stays f32;
//  - at the end the warps are merged in warp order through shared memory. A
//    row longer than one split writes (o, lse) partials, combined in split
//    order by one warp per head (reduce kernel, or the block that finishes last).

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
// cp.async stages a warp has in flight: a launch parameter (it changes no sum).
constexpr int kDefaultStages = 2;
constexpr int kMaxStages = 4;
constexpr int kMaxSplits = PagedAttentionWorkspaceCuda::kMaxSplits;
constexpr int kMinSplitTiles = 4;  // a block streams at least 4 tiles: its fixed cost needs amortising
static_assert(kMaxSplits <= 32, "one lane per split in the combine");
constexpr float kLog2e = 1.4426950408889634f;
// Each warp's stage holds K and V for its kWarpTokens tokens: 8 KB of them at
// either head_dim, in rows padded by one 16-byte chunk (8.5 or 9 KB).
constexpr int kStagePayloadPerWarp = 8192;

template <int HD>
struct Geometry {
  static_assert(HD == 64 || HD == 128, "head_dim 64 or 128");
  static constexpr int kChunks = HD / 8;                                   // 16-byte chunks in a row
  static constexpr int kRowBytes = HD * 2;                                 // one head's K (or V) row
  static constexpr int kRowChunks = kChunks + 1;                           // a row in shared memory, padded
  static constexpr int kWarpTokens = kStagePayloadPerWarp / (2 * kRowBytes);  // 16 (HD 128) or 32 (HD 64)
  static constexpr int kTileTokens = kWarps * kWarpTokens;                 // a block's tokens per stage
  static constexpr int kStageChunks = kWarpTokens * kRowChunks;            // K (or V) chunks a warp-stage
  static constexpr int kCopiesPerLane = 2 * kWarpTokens / 32;              // rows (K and V) a lane copies
  static_assert(kWarpTokens % 16 == 0 && (2 * kWarpTokens) % 32 == 0, "whole mma tiles, whole lanes");
};

__host__ __device__ inline int tile_tokens(int head_dim) {
  return kWarps * (kStagePayloadPerWarp / (4 * head_dim));
}
// Shared memory of one pipeline stage (all warps), and the stages' mbarriers.
inline int smem_bytes_per_stage(int head_dim) {
  return 2 * tile_tokens(head_dim) * (head_dim / 8 + 1) * 16;
}
constexpr int kBarrierBytes = kWarps * kMaxStages * 8;
inline int smem_bytes(int head_dim, int stages) {
  return stages * smem_bytes_per_stage(head_dim) + kBarrierBytes;
}

// A row's context [0, ctx) is cut into n_splits <= max_splits ranges of
// split_len tokens (the last shorter), split_len a whole number of tiles and at
// least min_tiles of them. Depends on ctx alone (and the two constants).
struct SplitPlan {
  int n_splits;
  int split_len;
};
__host__ __device__ inline SplitPlan plan_splits(int ctx, int tile, int max_splits, int min_tiles) {
  const int tiles = (ctx + tile - 1) / tile;
  const int per = max(min_tiles, (tiles + max_splits - 1) / max_splits);
  return {(tiles + per - 1) / per, per * tile};
}

// ---- element types -------------------------------------------------------------

template <typename T>
struct Elem;

template <>
struct Elem<__nv_bfloat16> {
  static __device__ __forceinline__ __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
  static __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
  }
  // D += A B, 16x8x16, bf16 in, f32 accumulate.
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

template <>
struct Elem<__half> {
  static __device__ __forceinline__ __half from_float(float x) { return __float2half_rn(x); }
  static __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
  }
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

// ---- small PTX helpers ---------------------------------------------------------

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// mbarriers (sm_90): a stage's copies complete on one; its phase flips when the
// expected bytes have all landed.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// Makes the barrier inits and earlier ordinary shared-memory stores visible to
// the bulk-copy engine (the async proxy).
__device__ __forceinline__ void fence_for_async_proxy() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
// Bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned)
// global -> shared, counted against `bar`'s expected bytes.
__device__ __forceinline__ void bulk_copy(void* smem, const void* gmem, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          smem_addr(smem)),
      "l"(gmem), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}
// Four 8x8 b16 matrices; lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  const uint32_t a = smem_addr(row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  const uint32_t a = smem_addr(row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
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

// Chunk c of row r of a [rows][kRowChunks] tile of 16-byte chunks: rows are
// padded by one chunk, so 8 consecutive rows at one chunk fall in 8 different
// bank groups.
template <int HD>
__device__ __forceinline__ int chunk_at(int r, int c) {
  return r * Geometry<HD>::kRowChunks + c;
}

// ---- kernels -------------------------------------------------------------------

// Strides of a pool in some unit (elements or 16-byte chunks): a block, a head,
// a token within its block.
struct PoolStrides {
  int64_t block, head, token;
};
// head_unit: one head's row (head_dim) in that unit.
inline PoolStrides pool_strides(PagedKvLayout layout, int64_t block_size, int64_t n_kv, int64_t head_unit) {
  if (layout == PagedKvLayout::kHeadMajor)
    return {n_kv * block_size * head_unit, block_size * head_unit, head_unit};
  return {block_size * n_kv * head_unit, head_unit, n_kv * head_unit};
}

template <typename T>
struct AttnParams {
  const T* q;       // [T, n_heads, HD]
  const T* k_pool;  // [num_blocks, block_size, n_kv_heads, HD] or [num_blocks, n_kv_heads, block_size, HD]
  const T* v_pool;
  // Element strides of the pools (PoolStrides): a block, a head, a token within its block.
  int64_t block_stride;
  int64_t head_stride;
  int64_t token_stride;
  T* out;                    // [T, n_heads, HD]
  const int32_t* row_meta;   // [T][2] the sequence of each token, its first position this step
  const int32_t* positions;  // [T]
  const int32_t* block_tables;
  float* partial_out;  // [rows, n_heads, kMaxSplits, HD]
  float* partial_lse;  // [rows, n_heads, kMaxSplits]
  int32_t* counters;   // [rows, n_heads]
  int row_offset;      // this launch's first token row
  int n_heads;
  int n_kv_heads;
  int n_rep;
  int n_groups;  // head groups of G per kv head: ceil(n_rep / G)
  int block_size_log2;
  int max_blocks_per_seq;
  int max_splits;
  int min_split_tiles;
  int stages;  // 2..kMaxStages
  bool reduce_in_last_block;
  bool early_kv;     // PagedAttentionCudaOptions::early_kv, with a dependent launch
  float scale_log2;  // scale * log2(e)
};

struct RowInfo {
  int seq;
  int ctx;     // positions [0, ctx) are visible to this row
  int stable;  // positions [0, stable) were written before this step
};

// Token t sees [0, positions[t]] of its sequence. Two independent loads (the
// host maps tokens to sequences once a step), not a search.
template <typename T>
__device__ __forceinline__ RowInfo row_info(const AttnParams<T>& p, int t) {
  const int2 meta = __ldg(reinterpret_cast<const int2*>(p.row_meta) + t);
  return {meta.x, __ldg(p.positions + t) + 1, meta.y};
}

// One warp combines the n_splits partials of one (row, head):
//   out = sum_s 2^(lse_s - M) o_s / sum_s 2^(lse_s - M), summed in split order.
// Lane s holds split s's weight; lane l owns dims [l * kVec, l * kVec + kVec).
// Loads bypass L1 (other blocks wrote these partials). The lse and the first
// kDepth splits' partials are all loaded before any is used: one round trip to
// L2 for up to kDepth splits, not one for the lse and then one for the partials.
template <typename T, int HD>
__device__ __forceinline__ void combine_splits(const float* po, const float* plse, int n_splits, T* out,
                                               int lane) {
  constexpr int kVec = HD / 32;
  constexpr int kDepth = 16;
  float v[kDepth][kVec];
  auto load = [&](int s0) {
#pragma unroll
    for (int i = 0; i < kDepth; ++i) {
      const float* src = po + (s0 + i) * HD + lane * kVec;
      if (s0 + i < n_splits) {
        if constexpr (kVec == 4) {
          const float4 x = __ldcg(reinterpret_cast<const float4*>(src));
          v[i][0] = x.x, v[i][1] = x.y, v[i][2] = x.z, v[i][3] = x.w;
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
#pragma unroll
  for (int k = 0; k < kVec; ++k) out[lane * kVec + k] = Elem<T>::from_float(acc[k] * inv);
}

template <typename T, int HD, int G>
__global__ void __launch_bounds__(kThreads, 3) paged_attention_split_kernel(const AttnParams<T> p) {
  using Geo = Geometry<HD>;
  constexpr int kWT = Geo::kWarpTokens;
  constexpr int kNT = kWT / 8;  // n-tiles of S (8 tokens each)
  constexpr int kKS = HD / 16;  // k-steps of S (16 dims each)
  constexpr int kOT = HD / 8;   // n-tiles of O (8 dims each)
  static_assert(G <= 8, "a head group fills at most the low 8 rows of the mma tile");
  // [kWarps][stages][K,V][kWT rows][kRowChunks], then the mbarriers
  // [kWarps][kMaxStages]; the rows are reused by the merge.
  extern __shared__ uint4 smem[];
  __shared__ int is_last_block;

  launch_dependents();  // the next kernel may be scheduled while this grid runs

  // Head groups vary fastest in the grid: the blocks of all kv heads of one
  // (row, split) run together and read whole slots (n_kv_heads x head_dim
  // contiguous) between them, not one head's 1/n_kv of every DRAM page.
  const int head_group = blockIdx.x;
  const int split = blockIdx.y;
  const int row_local = blockIdx.z;
  const int t = p.row_offset + row_local;
  const int kvh = head_group / p.n_groups;
  const int group = head_group % p.n_groups;
  const RowInfo ri = row_info(p, t);
  const SplitPlan plan = plan_splits(ri.ctx, Geo::kTileTokens, p.max_splits, p.min_split_tiles);
  if (split >= plan.n_splits) return;
  const int begin = split * plan.split_len;
  const int end = min(ri.ctx, begin + plan.split_len);
  const int n_tiles = (end - begin + Geo::kTileTokens - 1) / Geo::kTileTokens;

  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  const int32_t* table = p.block_tables + static_cast<int64_t>(ri.seq) * p.max_blocks_per_seq;
  // The block-table entries of this warp's part of `tile`: its kWT tokens span
  // at most 4 blocks (aligned, block_size >= 8), lane j < 4 holds the j-th.
  auto table_entries = [&](int tile) {
    const int first_pos = begin + tile * Geo::kTileTokens + warp * kWT;
    const int blk = (first_pos >> p.block_size_log2) + lane;
    return lane < 4 && tile < n_tiles && (blk << p.block_size_log2) < end ? __ldg(table + blk) : 0;
  };
  const int stages = p.stages;
  int32_t entries[kMaxStages];
#pragma unroll
  for (int i = 0; i < kMaxStages; ++i) entries[i] = i < stages ? table_entries(i) : 0;
  const int bs_mask = (1 << p.block_size_log2) - 1;
  const T* k_head = p.k_pool + kvh * p.head_stride;
  const T* v_head = p.v_pool + kvh * p.head_stride;
  uint4* warp_smem = smem + warp * (stages * 2 * Geo::kStageChunks);
  // One mbarrier a stage of this warp, after every stage's rows.
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + kWarps * stages * 2 * Geo::kStageChunks) + warp * kMaxStages;
  if (lane < stages) mbarrier_init(bars + lane, 1);
  // A row past the end of the split is not copied, so the P V product reads
  // whatever its stage held; P is 0 there, which keeps the output exact only if
  // the row is finite. Rows of an earlier tile are; fresh shared memory may not
  // be, so it is zeroed when a tile of this split is partial.
  if ((end - begin) % Geo::kTileTokens != 0) {
    for (int i = lane; i < stages * 2 * Geo::kStageChunks; i += 32) warp_smem[i] = make_uint4(0, 0, 0, 0);
  }
  fence_for_async_proxy();  // the inits and the zeros, before the copy engine writes here
  __syncwarp();

  // This warp's kWT tokens of `tile` into stage `slot`: lane l copies row l % kWT
  // of K (l < kWT) or V, and the next kWT rows when there are more (HD 64),
  // if its position is in [lo, hi). With `expect`, the stage's barrier is first
  // told the bytes of every row inside the split (a stage may be copied in two
  // calls, the second without `expect`).
  auto issue = [&](int tile, int slot, int32_t entry, bool expect, int lo, int hi) {
    uint4* sk = warp_smem + slot * (2 * Geo::kStageChunks);
    const int warp_begin = begin + tile * Geo::kTileTokens + warp * kWT;
    const int rows = max(0, min(kWT, end - warp_begin));
    if (expect) {
      if (lane == 0) mbarrier_arrive_expect_tx(bars + slot, 2 * rows * Geo::kRowBytes);
      __syncwarp();  // expected before any copy can complete
    }
    const int first_blk = warp_begin >> p.block_size_log2;
#pragma unroll
    for (int i = 0; i < Geo::kCopiesPerLane; ++i) {
      const int idx = lane + 32 * i;
      const int r = idx % kWT;
      const bool is_v = idx >= kWT;
      const int pos = warp_begin + r;
      const int32_t blk = __shfl_sync(0xffffffffu, entry, max(0, min(3, (pos >> p.block_size_log2) - first_blk)));
      if (r < rows && pos >= lo && pos < hi) {
        const int64_t off = blk * p.block_stride + (pos & bs_mask) * p.token_stride;
        bulk_copy(sk + (is_v ? Geo::kStageChunks : 0) + r * Geo::kRowChunks, (is_v ? v_head : k_head) + off,
                  Geo::kRowBytes, bars + slot);
      }
    }
  };

  // Every stage in flight from the start. Launched with programmatic dependent
  // launch, the kernel before this one may still be writing q, this step's K/V
  // or reading the partials; positions before this step's first were written
  // by earlier steps, so their rows are copied before the wait, the rest after.
  const int early_until = p.early_kv ? ri.stable : 0;
#pragma unroll
  for (int i = 0; i < kMaxStages; ++i) {
    if (i < stages && i < n_tiles) issue(i, i, entries[i], true, 0, early_until);
  }
  wait_primary_grid();
#pragma unroll
  for (int i = 0; i < kMaxStages; ++i) {
    if (i < stages && i < n_tiles) issue(i, i, entries[i], false, early_until, end);
  }

  const int gid = lane / 4, tig = lane % 4;  // mma fragment coordinates
  const int head0 = group * G;               // first head of the group within the kv head's n_rep
  const bool row_valid = gid < G && head0 + gid < p.n_rep;

  // Q as mma A fragments: row gid = head head0 + gid, rows 8..15 zero.
  uint32_t qa[kKS][4];
  {
    const T* q_row = p.q + (static_cast<int64_t>(t) * p.n_heads + kvh * p.n_rep + head0 + gid) * HD;
#pragma unroll
    for (int ks = 0; ks < kKS; ++ks) {
      qa[ks][0] = row_valid ? *reinterpret_cast<const uint32_t*>(q_row + 16 * ks + 2 * tig) : 0u;
      qa[ks][1] = 0u;
      qa[ks][2] = row_valid ? *reinterpret_cast<const uint32_t*>(q_row + 16 * ks + 8 + 2 * tig) : 0u;
      qa[ks][3] = 0u;
    }
  }

  int32_t next_entry = table_entries(stages);
  float m = -INFINITY;  // running max of row gid (same in the 4 lanes of a quad)
  float l = 0.0f;       // this lane's share of the row's running sum
  float o[kOT][4];      // O fragments: [0..1] row gid, dims 8 j + 2 tig + {0, 1}; [2..3] padding rows
#pragma unroll
  for (int j = 0; j < kOT; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;

  for (int tile = 0, slot = 0, phase = 0; tile < n_tiles; ++tile) {
    mbarrier_wait(bars + slot, phase);  // the stage's rows have landed
    const uint4* sk = warp_smem + slot * (2 * Geo::kStageChunks);
    const uint4* sv = sk + Geo::kStageChunks;
    const int warp_begin = begin + tile * Geo::kTileTokens + warp * kWT;

    // S = Q K^T for this warp's kWT tokens.
    float s[kNT][4];
#pragma unroll
    for (int j = 0; j < kNT; ++j) {
      s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
      for (int ks2 = 0; ks2 < kKS / 2; ++ks2) {
        uint32_t b[4];  // k-steps 2 ks2 and 2 ks2 + 1 of tokens 8 j .. 8 j + 7
        ldmatrix_x4(b, sk + chunk_at<HD>(8 * j + (lane & 7), 4 * ks2 + (lane >> 3)));
        Elem<T>::mma(s[j], qa[2 * ks2], b[0], b[1]);
        Elem<T>::mma(s[j], qa[2 * ks2 + 1], b[2], b[3]);
      }
    }
    // Online softmax over row gid (lane holds tokens 8 j + 2 tig + {0, 1}).
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kNT; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const bool visible = warp_begin + 8 * j + 2 * tig + e < end;
        s[j][e] = visible ? s[j][e] * p.scale_log2 : -INFINITY;
        tile_max = fmaxf(tile_max, s[j][e]);
      }
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
    const float m_new = fmaxf(m, tile_max);
    const float corr =
        m_new == -INFINITY ? 1.0f : exp2f(m - m_new);  // exp2(-inf) = 0 on the first visible tile
    m = m_new;
    l *= corr;
#pragma unroll
    for (int j = 0; j < kOT; ++j) {
      o[j][0] *= corr;
      o[j][1] *= corr;
    }
#pragma unroll
    for (int j = 0; j < kNT; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[j][e] = m_new == -INFINITY ? 0.0f : exp2f(s[j][e] - m_new);
        l += s[j][e];
      }
    }
    // O += P V, 16 tokens (two S n-tiles) per k-step.
#pragma unroll
    for (int kc = 0; kc < kNT / 2; ++kc) {
      uint32_t pa[4];
      pa[0] = Elem<T>::pack2(s[2 * kc][0], s[2 * kc][1]);
      pa[1] = 0u;
      pa[2] = Elem<T>::pack2(s[2 * kc + 1][0], s[2 * kc + 1][1]);
      pa[3] = 0u;
#pragma unroll
      for (int j2 = 0; j2 < kOT / 2; ++j2) {
        uint32_t b[4];  // dims 16 j2 .. 16 j2 + 15 of tokens 16 kc .. 16 kc + 15
        ldmatrix_x4_trans(
            b, sv + chunk_at<HD>(16 * kc + (lane & 7) + 8 * ((lane >> 3) & 1), 2 * j2 + (lane >> 4)));
        Elem<T>::mma(o[2 * j2], pa, b[0], b[1]);
        Elem<T>::mma(o[2 * j2 + 1], pa, b[2], b[3]);
      }
    }
    __syncwarp();  // every lane is done reading this stage: refill it
    if (tile + stages < n_tiles) issue(tile + stages, slot, next_entry, true, 0, end);
    next_entry = table_entries(tile + stages + 1);  // a whole iteration to arrive
    if (++slot == stages) slot = 0, phase ^= 1;
  }
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  __syncthreads();  // every warp is done with its stages: reuse them for the merge

  // Merge the warps, in warp order, through shared memory.
  float* sm_o = reinterpret_cast<float*>(smem);  // [kWarps][G][HD]
  float* sm_m = sm_o + kWarps * G * HD;          // [kWarps][G]
  float* sm_l = sm_m + kWarps * G;               // [kWarps][G]
  if (gid < G) {
#pragma unroll
    for (int j = 0; j < kOT; ++j) {
      sm_o[(warp * G + gid) * HD + 8 * j + 2 * tig] = o[j][0];
      sm_o[(warp * G + gid) * HD + 8 * j + 2 * tig + 1] = o[j][1];
    }
    if (tig == 0) {
      sm_m[warp * G + gid] = m;
      sm_l[warp * G + gid] = l;
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
      a_all = fmaf(sm_o[(w * G + g) * HD + d], f, a_all);
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
  __syncthreads();  // every thread's partials are written ...
  if (tid == 0) {
    __threadfence();  // ... and, cumulatively through the barrier, visible device-wide before we count
    int32_t* counter = p.counters + static_cast<int64_t>(row_local) * p.n_heads + head_group;
    const int prev = atomicAdd(counter, 1);
    is_last_block = prev == plan.n_splits - 1;
    if (is_last_block) *counter = 0;  // every other split has counted: ready for the next call
  }
  __syncthreads();
  if (!is_last_block) return;
  __threadfence();
  for (int g = warp; g < G; g += kWarps) {
    if (head0 + g >= p.n_rep) break;
    const int qh = kvh * p.n_rep + head0 + g;
    const int64_t ph = static_cast<int64_t>(row_local) * p.n_heads + qh;
    combine_splits<T, HD>(p.partial_out + ph * kMaxSplits * HD, p.partial_lse + ph * kMaxSplits,
                          plan.n_splits, p.out + (static_cast<int64_t>(t) * p.n_heads + qh) * HD, lane);
  }
}

// One warp per (row, query head): 4 heads a block.
template <typename T, int HD>
__global__ void __launch_bounds__(kThreads) paged_attention_reduce_kernel(const AttnParams<T> p) {
  launch_dependents();  // whatever follows may start its prologue now
  const int row_local = blockIdx.x;
  const int qh = blockIdx.y * kWarps + threadIdx.x / 32;
  const int t = p.row_offset + row_local;
  const RowInfo ri = row_info(p, t);
  const SplitPlan plan = plan_splits(ri.ctx, Geometry<HD>::kTileTokens, p.max_splits, p.min_split_tiles);
  if (plan.n_splits == 1 || qh >= p.n_heads) return;  // the split kernel wrote this row
  wait_primary_grid();                                // the partials are complete and visible
  const int64_t ph = static_cast<int64_t>(row_local) * p.n_heads + qh;
  combine_splits<T, HD>(p.partial_out + ph * kMaxSplits * HD, p.partial_lse + ph * kMaxSplits, plan.n_splits,
                        p.out + (static_cast<int64_t>(t) * p.n_heads + qh) * HD, threadIdx.x % 32);
}

// k_pool[slot_mapping[t]] = k[t], the same for v. A token's row is n_kv heads of
// head_chunks 16-byte chunks; s (PoolStrides in chunks) places head h of slot
// (block b, offset i) at b * block + h * head + i * token.
__global__ void paged_kv_write_kernel(const uint4* k, const uint4* v, uint4* k_pool, uint4* v_pool,
                                      const int32_t* slot_mapping, int n_kv, int head_chunks,
                                      int block_size_log2, PoolStrides s) {
  const int t = blockIdx.x;
  const int slot = slot_mapping[t];
  if (slot < 0) return;  // padding token
  const int chunks = n_kv * head_chunks;
  const int64_t src = static_cast<int64_t>(t) * chunks;
  const int64_t base = (slot >> block_size_log2) * s.block + (slot & ((1 << block_size_log2) - 1)) * s.token;
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
    const int64_t dst = base + (c / head_chunks) * s.head + c % head_chunks;
    k_pool[dst] = k[src + c];
    v_pool[dst] = v[src + c];
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

int head_group_size(int n_rep) {
  return n_rep <= 1 ? 1 : n_rep <= 2 ? 2 : n_rep <= 4 ? 4 : 8;
}

// block_size, n_kv_heads, head_dim of a 4-d pool in `layout`.
struct PoolDims {
  int64_t block_size, n_kv, head_dim;
};
PoolDims pool_dims(const Tensor& pool, PagedKvLayout layout) {
  if (layout == PagedKvLayout::kHeadMajor) return {pool.dim(2), pool.dim(1), pool.dim(3)};
  return {pool.dim(1), pool.dim(2), pool.dim(3)};
}

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
  row_meta_ = cuda::empty(DType::kI32, {max_tokens, 2});
  row_meta_host_.resize(2 * static_cast<size_t>(max_tokens));
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
  NS_CHECK_EQ(static_cast<int64_t>(batch.block_tables.size()),
              static_cast<int64_t>(b) * batch.max_blocks_per_seq);
  NS_CHECK_EQ(static_cast<int64_t>(batch.slot_mapping.size()), t);
  NS_CHECK_EQ(static_cast<int64_t>(batch.positions.size()), t);
  NS_CHECK(batch.seq_starts[0] == 0) << "seq_starts[0] must be 0";
  int32_t max_ctx = 0;
  for (int32_t i = 0; i < b; ++i) {
    const int32_t n = batch.seq_starts[i + 1] - batch.seq_starts[i];
    NS_CHECK(n >= 0) << "seq_starts not ascending at " << i;
    NS_CHECK(batch.context_lens[i] >= n)
        << "sequence " << i << ": context " << batch.context_lens[i] << " < " << n << " tokens this step";
    int32_t first = batch.context_lens[i];
    for (int32_t j = batch.seq_starts[i]; j < batch.seq_starts[i + 1]; ++j) {
      NS_CHECK(batch.positions[j] >= 0 && batch.positions[j] < batch.context_lens[i])
          << "token " << j << ": position " << batch.positions[j] << " outside its context of "
          << batch.context_lens[i];
      first = std::min(first, batch.positions[j]);
    }
    for (int32_t j = batch.seq_starts[i]; j < batch.seq_starts[i + 1]; ++j) {
      row_meta_host_[2 * j] = i;
      row_meta_host_[2 * j + 1] = first;
    }
    max_ctx = std::max(max_ctx, batch.context_lens[i]);
  }
  num_seqs_ = b;
  num_tokens_ = t;
  max_blocks_per_seq_ = batch.max_blocks_per_seq;
  max_context_len_ = max_ctx;
  cuda::copy_bytes_to_device(row_meta_.data(), row_meta_host_.data(), 8 * int64_t{t}, stream);
  cuda::copy_bytes_to_device(positions_.data(), batch.positions.data(), 4 * int64_t{t}, stream);
  cuda::copy_bytes_to_device(block_tables_.data(), batch.block_tables.data(),
                             4 * int64_t{b} * max_blocks_per_seq_, stream);
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
  int device = 0;
  NS_CUDA_CHECK(cudaGetDevice(&device));
  NS_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device));
  // Opt every attention kernel into its dynamic shared memory (over the 48 KB
  // default) once, here, outside any step loop or graph capture.
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (int hd : {64, 128}) {
      for (int g : {1, 2, 4, 8}) {
        dispatch(dt, hd, g, [&]<typename T, int HD, int G>() {
          NS_CUDA_CHECK(cudaFuncSetAttribute(paged_attention_split_kernel<T, HD, G>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             smem_bytes(HD, kMaxStages)));
        });
      }
    }
  }
}

// ---- entry points --------------------------------------------------------------

int paged_attention_cuda_num_splits(int ctx, int head_dim, const PagedAttentionCudaOptions& options) {
  const int max_splits = options.max_splits > 0 ? options.max_splits : kMaxSplits;
  const int min_tiles = options.min_split_tiles > 0 ? options.min_split_tiles : kMinSplitTiles;
  return plan_splits(ctx, tile_tokens(head_dim), max_splits, min_tiles).n_splits;
}

void paged_kv_write_cuda(const Tensor& k, const Tensor& v, const PagedBatchCuda& batch, const Tensor& k_pool,
                         const Tensor& v_pool, cuda::Stream stream, PagedKvLayout layout) {
  NS_CHECK(k.device() == Device::kCUDA && v.device() == Device::kCUDA && k_pool.device() == Device::kCUDA &&
           v_pool.device() == Device::kCUDA)
      << "paged_kv_write_cuda: tensors must be on the CUDA device";
  NS_CHECK(k_pool.ndim() == 4 && k_pool.shape() == v_pool.shape()) << "pools " << k_pool.shape_string();
  NS_CHECK(k.dtype() == k_pool.dtype() && v.dtype() == k_pool.dtype() && v_pool.dtype() == k_pool.dtype())
      << "K/V dtype must equal the pool dtype";
  const auto [block_size, n_kv, hd] = pool_dims(k_pool, layout);
  const int bs_log2 = log2_exact(block_size);
  NS_CHECK(bs_log2 >= 0) << "block_size " << block_size << " must be a power of two";
  NS_CHECK(k.ndim() == 3 && k.dim(0) == batch.num_tokens() && k.dim(1) == n_kv && k.dim(2) == hd &&
           v.shape() == k.shape())
      << "k " << k.shape_string() << " for " << batch.num_tokens() << " tokens into pool "
      << k_pool.shape_string();
  const int64_t head_bytes = dtype_bytes(k.dtype(), hd);
  NS_CHECK(head_bytes % 16 == 0) << "a head's row must be whole 16-byte chunks";
  if (batch.num_tokens() == 0) return;
  const int head_chunks = static_cast<int>(head_bytes / 16);
  const int chunks = static_cast<int>(n_kv) * head_chunks;
  const int threads = std::min(256, (chunks + 31) / 32 * 32);
  paged_kv_write_kernel<<<batch.num_tokens(), threads, 0, stream>>>(
      k.data_as<const uint4>(), v.data_as<const uint4>(), k_pool.data_as<uint4>(), v_pool.data_as<uint4>(),
      batch.slot_mapping(), static_cast<int>(n_kv), head_chunks, bs_log2,
      pool_strides(layout, block_size, n_kv, head_chunks));
  NS_CUDA_CHECK_LAUNCH();
}

void paged_attention_cuda(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                          const PagedBatchCuda& batch, int n_rep, float scale,
                          PagedAttentionWorkspaceCuda& ws, const Tensor& out, cuda::Stream stream,
                          const PagedAttentionCudaOptions& options) {
  NS_CHECK(q.device() == Device::kCUDA && out.device() == Device::kCUDA && k_pool.device() == Device::kCUDA &&
           v_pool.device() == Device::kCUDA)
      << "paged_attention_cuda: tensors must be on the CUDA device";
  NS_CHECK(k_pool.ndim() == 4 && k_pool.shape() == v_pool.shape()) << "pools " << k_pool.shape_string();
  const DType dt = k_pool.dtype();
  NS_CHECK(q.dtype() == dt && out.dtype() == dt && v_pool.dtype() == dt)
      << "q, out and pools must share a dtype";
  const auto [block_size, n_kv, hd] = pool_dims(k_pool, options.layout);
  const int bs_log2 = log2_exact(block_size);
  NS_CHECK(bs_log2 >= 3) << "block_size " << block_size << " must be a power of two >= 8";
  NS_CHECK(n_rep >= 1) << "n_rep " << n_rep;
  const int64_t n_heads = n_kv * n_rep;
  const int64_t t_all = batch.num_tokens();
  NS_CHECK(q.ndim() == 3 && q.dim(0) == t_all && q.dim(1) == n_heads && q.dim(2) == hd &&
           out.shape() == q.shape())
      << "q " << q.shape_string() << ", out " << out.shape_string() << " for " << t_all << " tokens, "
      << n_heads << " heads of " << hd;
  NS_CHECK(ws.n_heads() == n_heads && ws.head_dim() == hd) << "workspace made for other heads";
  NS_CHECK(static_cast<int64_t>(batch.max_context_len()) <= int64_t{batch.max_blocks_per_seq()} * block_size)
      << "context " << batch.max_context_len() << " exceeds the block table";
  const int max_splits = options.max_splits > 0 ? options.max_splits : kMaxSplits;
  const int min_tiles = options.min_split_tiles > 0 ? options.min_split_tiles : kMinSplitTiles;
  NS_CHECK(max_splits <= kMaxSplits) << "max_splits " << max_splits;
  if (t_all == 0) return;

  const int g = head_group_size(n_rep);
  const int n_groups = (n_rep + g - 1) / g;
  // n_splits is not monotonic in ctx (2048 tokens may split 32 ways, 2100 only
  // 17), so the grid covers the most any row up to the longest context can have.
  const int tile = tile_tokens(static_cast<int>(hd));
  const int grid_splits =
      std::min(max_splits, ((batch.max_context_len() + tile - 1) / tile + min_tiles - 1) / min_tiles);
  dispatch(dt, static_cast<int>(hd), g, [&]<typename T, int HD, int G>() {
    AttnParams<T> p{};
    p.q = q.data_as<const T>();
    p.k_pool = k_pool.data_as<const T>();
    p.v_pool = v_pool.data_as<const T>();
    const PoolStrides st = pool_strides(options.layout, block_size, n_kv, hd);
    p.block_stride = st.block;
    p.head_stride = st.head;
    p.token_stride = st.token;
    p.out = out.data_as<T>();
    p.row_meta = batch.row_meta();
    p.positions = batch.positions();
    p.block_tables = batch.block_tables();
    p.partial_out = ws.partial_out();
    p.partial_lse = ws.partial_lse();
    p.counters = ws.counters();
    p.n_heads = static_cast<int>(n_heads);
    p.n_kv_heads = static_cast<int>(n_kv);
    p.n_rep = n_rep;
    p.n_groups = n_groups;
    p.block_size_log2 = bs_log2;
    p.max_blocks_per_seq = batch.max_blocks_per_seq();
    p.max_splits = max_splits;
    p.min_split_tiles = min_tiles;
    // Deeper pipelines cost occupancy; they pay when the grid is one short wave
    // (a small batch), where each block's latency chain is the whole call. Three
    // stages (two blocks an SM) rather than four (one) let the next call's blocks
    // start their early copies beside this call's.
    const int64_t blocks = std::min<int64_t>({ws.max_rows(), t_all, 65535}) * grid_splits * n_kv * n_groups;
    // A stage beyond the longest split's tiles would only cost shared memory.
    const int split_tiles = plan_splits(batch.max_context_len(), tile, max_splits, min_tiles).split_len / tile;
    p.stages = options.stages > 0 ? options.stages
                                  : std::max(2, std::min(split_tiles, blocks <= 2 * int64_t{ws.sm_count()}
                                                                          ? 3
                                                                          : kDefaultStages));
    NS_CHECK(p.stages >= 2 && p.stages <= kMaxStages) << "stages " << p.stages;
    p.reduce_in_last_block = options.reduce == SplitReduce::kLastBlock;
    p.early_kv = options.early_kv && options.dependent_launch;
    p.scale_log2 = scale * kLog2e;
    // Rows in launches of at most the workspace's rows (and grid.z's 65535).
    for (int64_t r0 = 0, rows = 0; r0 < t_all; r0 += rows) {
      rows = std::min<int64_t>({ws.max_rows(), t_all - r0, 65535});
      p.row_offset = static_cast<int>(r0);
      const dim3 grid(static_cast<unsigned>(n_kv * n_groups), grid_splits, static_cast<unsigned>(rows));
      cudaLaunchAttribute pdl[1];
      pdl[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      pdl[0].val.programmaticStreamSerializationAllowed = 1;
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = grid;
      cfg.blockDim = dim3(kThreads);
      cfg.dynamicSmemBytes = static_cast<size_t>(smem_bytes(HD, p.stages));
      cfg.stream = stream;
      cfg.attrs = pdl;
      cfg.numAttrs = options.dependent_launch ? 1 : 0;
      NS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, paged_attention_split_kernel<T, HD, G>, p));
      NS_CUDA_CHECK_LAUNCH();
      if (grid_splits > 1 && options.reduce == SplitReduce::kKernel) {
        cudaLaunchConfig_t rcfg{};
        rcfg.gridDim =
            dim3(static_cast<unsigned>(rows), static_cast<unsigned>((n_heads + kWarps - 1) / kWarps));
        rcfg.blockDim = dim3(kThreads);
        rcfg.stream = stream;
        rcfg.attrs = pdl;
        rcfg.numAttrs = 1;
        NS_CUDA_CHECK(cudaLaunchKernelEx(&rcfg, paged_attention_reduce_kernel<T, HD>, p));
        NS_CUDA_CHECK_LAUNCH();
      }
    }
  });
}

}  // namespace nanoserve
