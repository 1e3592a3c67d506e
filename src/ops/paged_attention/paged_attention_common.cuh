#pragma once
// What the CUDA paged attention kernels share (device code and the launch
// constants the host side needs): the geometry of a stage, the split plan, the
// pool strides, the kernels' parameters, and which rows
// a block computes. Included by paged_attention_kernels.cuh,
// paged_attention_reduce.cuh and paged_kv_write.cuh, and through them only by
// paged_attention_cuda.cu; and by paged_attention_tiles.cuh.

#include <cuda.h>  // CUtensorMap (the type only)

#include <cmath>
#include <cstdint>

#include "core/cuda/ptx.cuh"
#include "ops/paged_attention/paged_attention_cuda.cuh"

namespace nanoserve::paged_attention_kernels {

using cuda::Elem;
using cuda::fence_for_async_proxy;
using cuda::launch_dependents;
using cuda::ldmatrix_x4;
using cuda::ldmatrix_x4_trans;
using cuda::mbarrier_arrive_expect_tx;
using cuda::mbarrier_init;
using cuda::mbarrier_wait;
using cuda::tensor_copy_5d_hinted;
using cuda::wait_primary_grid;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
// Pipeline stages a warp has in flight: a launch parameter (it changes no sum).
constexpr int kDefaultStages = 2;
constexpr int kMaxStages = 4;
constexpr int kMaxSplits = PagedAttentionWorkspaceCuda::kMaxSplits;
constexpr int kMinSplitTiles = 4;  // a block streams at least 4 tiles: its fixed cost needs amortising
constexpr int kHoldStages = 3;     // the stages of a kernel that holds its first tile (two blocks an SM)
static_assert(kMaxSplits <= 32, "one lane per split in the combine");
constexpr float kLog2e = 1.4426950408889634f;
// Each warp's stage holds K and V for its kWarpTokens tokens: 8 KB at head_dim
// 64 or 128 (32 or 16 tokens), 16 KB at 256 (16 tokens: the mma's m-tile is
// 16 tokens, so a warp-stage holds no fewer). At 256 a block has at most
// kMaxStages256 stages (4 x 4 x 16 KB would pass the 227 KB an SM offers).
__host__ __device__ constexpr int stage_bytes_per_warp(int head_dim) {
  return head_dim == 256 ? 16384 : 8192;
}
constexpr int kMaxStages256 = 3;
__host__ __device__ constexpr int max_stages(int head_dim) {
  return head_dim == 256 ? kMaxStages256 : kMaxStages;
}
// A K (or V) row of a head is copied as 128-byte lines (head_dim / 64 of them),
// each line of a box landing in the 128-byte-swizzled order of a tensor copy:
// 16-byte chunk c of line r sits at chunk c ^ (r % 8), so the 8 rows an
// ldmatrix reads at one chunk fall in 8 different bank groups.
constexpr int kLineBytes = 128;
constexpr int kLineElems = kLineBytes / 2;
constexpr int kSwizzleAlign = 1024;  // the swizzle repeats every 8 lines

template <int HD>
struct Geometry {
  static_assert(HD == 64 || HD == 128 || HD == 256, "head_dim 64, 128 or 256");
  static constexpr int kHalves = HD / kLineElems;  // lines in a row
  static constexpr int kRowBytes = HD * 2;         // one head's K (or V) row
  static constexpr int kStageBytes = stage_bytes_per_warp(HD);
  static constexpr int kWarpTokens = kStageBytes / (2 * kRowBytes);  // 16 (HD 128, 256) or 32 (HD 64)
  static constexpr int kTileTokens = kWarps * kWarpTokens;           // a block's tokens per stage
  // A warp-stage: K then V, each [kHalves][kWarpTokens lines of 128 bytes].
  static constexpr int kRegionBytes = kWarpTokens * kLineBytes;
  static constexpr int kKvBytes = kHalves * kRegionBytes;
  static_assert(kWarpTokens % 16 == 0 && 2 * kKvBytes == kStageBytes, "whole mma tiles");
  static_assert(kRegionBytes % kSwizzleAlign == 0, "each region starts a swizzle period");
};

__host__ __device__ inline int tile_tokens(int head_dim) {
  return kWarps * (stage_bytes_per_warp(head_dim) / (4 * head_dim));
}
// Shared memory of the stages (all warps), the stages' mbarriers, and the
// slack to align the first stage to the swizzle period.
constexpr int kBarrierBytes = kWarps * kMaxStages * 8;
inline int smem_bytes(int head_dim, int stages) {
  return kSwizzleAlign + stages * kWarps * stage_bytes_per_warp(head_dim) + kBarrierBytes;
}
// Byte offset of 16-byte chunk c (dims 8 c .. 8 c + 7) of row r in a K or V
// region of a warp-stage.
template <int HD>
__device__ __forceinline__ int row_chunk_offset(int r, int c) {
  return (c >> 3) * Geometry<HD>::kRegionBytes + r * kLineBytes + (((c & 7) ^ (r & 7)) << 4);
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

// A sliding window of W positions (W > 0): the row at position pos = ctx - 1
// attends [pos + 1 - W, pos]. Its splits cover [first, ctx), first a whole
// tile at most 2 tiles before pos + 1 - W (the rest masked): a function of the
// tile that holds pos, so rows of one tile, which may share a thread block
// (window_rows), have the same first position and the same split plan alone or
// together. Every split then holds a visible position of every such row: the
// first reaches past pos + 1 - W (split_len >= kMinSplitTiles >= 2 tiles).
// 0 without a window.
__host__ __device__ inline int sliding_first(int ctx, int sliding_window, int tile) {
  if (sliding_window <= 0) return 0;
  const int pos = ctx - 1;
  const int v = pos - pos % tile - sliding_window;
  return v <= 0 ? 0 : v - v % tile;
}

// Strides of a pool in some unit (elements or 16-byte chunks): a block, a head,
// a token within its block.
struct PoolStrides {
  int64_t block, head, token;
};
// head_unit: one head's row (head_dim) in that unit; the pool is
// [num_blocks, block_size, n_kv_heads, head_dim].
inline PoolStrides pool_strides(int64_t block_size, int64_t n_kv, int64_t head_unit) {
  return {block_size * n_kv * head_unit, head_unit, n_kv * head_unit};
}

template <typename T>
struct AttnParams {
  // The pools ([num_blocks, block_size, n_kv_heads, HD]) as 5-d tensor maps,
  // innermost first: 64 elements of a row, the row's line (HD / 64), the
  // head, the slot, the block. A box is one line of box_rows slots of one head.
  CUtensorMap k_map;
  CUtensorMap v_map;
  const T* q;                // [T, n_heads, HD]
  T* out;                    // [T, n_heads, HD]
  const int32_t* row_meta;   // [T][2] the sequence of each token, its first position this step
  const int32_t* positions;  // [T]
  const int32_t* block_tables;
  float* partial_out;  // [rows, n_heads, kMaxSplits, HD]
  float* partial_lse;  // [rows, n_heads, kMaxSplits]
  int row_offset;      // this launch's first token row
  int row_end;         // one past its last
  bool pair_rows;      // PagedAttentionTuning::pair_rows, and the step has a sequence of several rows
  // With pair_rows, the launch's blocks (beyond the head groups) are this
  // list's: (leading row - row_offset) << kItemSplitBits | split, written by
  // attention_items_kernel, n_items of them.
  const int32_t* items;
  int n_items;
  int n_heads;
  int n_kv_heads;
  int n_rep;
  int n_groups;  // head groups of G per kv head: ceil(n_rep / G)
  int block_size_log2;
  int max_blocks_per_seq;
  int max_splits;
  int min_split_tiles;
  int stages;             // 2..kMaxStages
  bool early_kv;          // PagedAttentionTuning::early_kv, with a dependent launch
  bool hold_before_wait;  // PagedAttentionTuning::hold_before_wait
  float scale_log2;       // scale * log2(e)
  int sliding_window;     // 0: the whole history; else W (sliding_first)
  // Soft-capping (Gemma 2): a score s becomes softcap * tanh(s scale /
  // softcap), then times log2(e); 0: s scale_log2, as without it.
  float softcap;
  float scale;
  // Attention sinks (gpt-oss), [n_heads] f32 device, or null: query head h's
  // logit sinks[h] (not scaled) joins its softmax's denominator, weighing no
  // value. It enters once a row, where the splits' sums meet (the split
  // kernel's epilogue for a row of one split, combine_splits for the others),
  // so the partials, the split plan and every other sum are those without it.
  const float* sinks;
  float k_scale, v_scale;  // an fp8 pool's (KvScales): x = f32(q) * scale
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

// Rows of one sequence at consecutive positions within one aligned window of
// window_rows(G, kNT) positions share a thread block
// (PagedAttentionTuning::pair_rows): 8 kNT columns of the mma hold G
// heads of each. A window divides the tile, so its rows' contexts end in the
// same tile: they have the same split plan and the same tiles in every split.
// The block of the first of them in the launch computes them all; the blocks
// of the others return.
__host__ __device__ constexpr int window_rows(int G, int kNT) {
  int r = 1;
  while (2 * r * G <= 8 * kNT) r *= 2;
  return r;
}
// Whether row u + i of the launch [row_offset, row_end) continues the window
// of row u (sequence seq at position pos): the same sequence, position i
// further, the same window of R positions. Over the device's metadata or the
// host's copy of it.
__host__ __device__ inline bool continues_window(const int32_t* row_meta, const int32_t* positions,
                                                 int row_offset, int row_end, int u, int seq, int pos, int i,
                                                 int R) {
  if (R == 1 || u < row_offset || u + i >= row_end) return false;
  return row_meta[2 * (u + i)] == seq && positions[u + i] == pos + i && (pos + i) / R == pos / R;
}
template <typename T>
__device__ __forceinline__ bool continues_window(const AttnParams<T>& p, int u, const RowInfo& a, int i,
                                                 int R) {
  return continues_window(p.row_meta, p.positions, p.row_offset, p.row_end, u, a.seq, a.ctx - 1, i, R);
}

// The blocks (splits) that row t of the launch leads with windows of R rows:
// none if it continues the window of the row before, else its split count.
// One function for the list (device) and the grid that covers it (host).
__host__ __device__ inline int row_blocks(const int32_t* row_meta, const int32_t* positions, int row_offset,
                                          int row_end, int t, int R, int tile, int max_splits, int min_tiles,
                                          int sliding_window = 0) {
  if (t > row_offset && continues_window(row_meta, positions, row_offset, row_end, t - 1,
                                         row_meta[2 * (t - 1)], positions[t - 1], 1, R))
    return 0;
  const int ctx = positions[t] + 1;
  return plan_splits(ctx - sliding_first(ctx, sliding_window, tile), tile, max_splits, min_tiles).n_splits;
}
// The query-tiled kernel (paged_attention_tiles.cu): whether row t of a step
// of num_tokens rows starts a tile of R rows: its sequence has several rows
// in the step (a single row is the decode kernel's), and its index among
// them is a multiple of R. A tile runs from such a row to the next one or to
// its sequence's last row. One function for the list the device writes and
// the count the host sizes the grid by.
__host__ __device__ inline bool query_tile_starts(const int32_t* row_meta, const int32_t* positions, int t,
                                                  int R, int num_tokens) {
  const int seq = row_meta[2 * t];
  const bool several =
      (t > 0 && row_meta[2 * (t - 1)] == seq) || (t + 1 < num_tokens && row_meta[2 * (t + 1)] == seq);
  return several && (positions[t] - row_meta[2 * t + 1]) % R == 0;
}

// An item's split field: kMaxSplits <= 1 << kItemSplitBits.
constexpr int kItemSplitBits = 5;
static_assert(kMaxSplits <= 1 << kItemSplitBits, "a split fits its field of an item");

}  // namespace nanoserve::paged_attention_kernels
