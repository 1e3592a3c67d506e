#pragma once
// The tile arithmetic of CUDA paged attention (device code), which both
// kernels of PagedAttentionKernel::kTiles perform to the bit: the query-tiled
// kernel (rows of sequences with several rows in the step: prefills, chunks,
// speculative rows) and the decode kernel (a sequence's single row), in
// paged_attention_tiles.cu and paged_attention_tile_decode.cuh.
//
// A (row, head) is a slot: the A row of mma.m16n8k16 (S = Q K^T, O += P V).
// Its keys [0, ctx) are cut into tiles of kTileKeys aligned at position 0,
// and the tiles into the split plan of its own context (plan_splits; 64-key
// tiles, at least kMinSplitTiles a split). Within a split, one chain:
//   S: each 8-key n-tile from C = 0 over the head dims' k-steps in order;
//   the tile's max over its 64 keys (exact, any order);
//   softmax_step: corr and the base from the running max;
//   P = 2^(s - base), rounded to the products' element (T, q's dtype; f16
//   over an fp8 pool) as the A fragment of P V;
//   O and l (l as O's 8-dim n-tile whose V is a column of ones: its C is
//   the sum of the rounded P) times corr, then + P V over the tile's four
//   16-key k-steps in order.
// A split ends with (m, l, O) unnormalised; the splits fold in split order
// (fold_weights, fold), the first taken as is; the output is O times the
// rounded reciprocal of l (times v_scale over an fp8 pool). Every operation
// is explicitly rounded, so no compiler contraction can differ between the
// kernels.
//
// Over an fp8 pool the products run in f16 on the E4M3 codes themselves
// (each exact in f16: one conversion a pair of a landed tile), q rounded
// to f16 (saturated; exact for bf16 values of magnitude 2^-14 to 65,504)
// and P rounded to f16; the scales leave the elements: k_scale joins the
// scores' factor (scale_log2), v_scale the output's. S's k within each
// 16-dim k-step is relabelled there (paged_attention_tile_layout.h), so that
// a lane's K fragment is four consecutive bytes of a key row: the decode
// kernel reads it by ldmatrix straight from the landed fp8 stage (k_codes).
//
// Which mma row a slot occupies and which warp computes which n-tile differ
// between the kernels; each element's operands and the order of its sums do
// not.

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/cuda/kv_quant.cuh"
#include "core/cuda/ptx.cuh"
#include "ops/paged_attention/paged_attention_common.cuh"
#include "ops/paged_attention/paged_attention_tile_layout.h"

namespace nanoserve::paged_attention_kernels {

constexpr int kTileThreads = 128;  // four warps a block, in both kernels
constexpr int kTileMaxRep = 16;    // query heads a kv head: the decode kernel's mma rows

// A row of context ctx: its splits of whole 64-key tiles.
__host__ __device__ inline SplitPlan tile_plan(int ctx) {
  return plan_splits(ctx, kTileKeys, kMaxSplits, kMinSplitTiles);
}

template <typename T>
struct TileParams {
  const T* q;          // [T, n_heads, HD]
  T* out;              // [T, n_heads, HD]
  const void* k_pool;  // T, or E4M3 bytes (KV: the kernel's pool element)
  const void* v_pool;
  float v_scale;        // an fp8 pool's, the output's factor; 1 over a T pool (its k_scale is in scale_log2)
  PoolStrides strides;  // elements: a block, a head, a slot
  const int32_t* row_meta;   // [T][2] the sequence of each token, its first position this step
  const int32_t* positions;  // [T]
  const int32_t* block_tables;
  const int32_t* tiles;  // [n_tiles] the first row of each query tile
  int n_tiles;
  const int32_t* decode_rows;  // DeviceBatch::decode_rows
  int decode_offset;           // this decode launch's first entry of decode_rows
  bool all_decode;             // every row is a decode row: decode_rows is 0, 1, ...
  float* partial_o;            // [rows, n_heads, kMaxSplits, HD] a decode split's O
  float2* partial_ml;          // [rows, n_heads, kMaxSplits] its (m, l)
  int num_tokens;
  int n_heads;
  int n_rep;
  int rows_per_tile;  // 64 / n_rep: a query tile's rows
  int block_size_log2;
  int max_blocks_per_seq;
  float scale_log2;
  bool early_kv;    // the decode kernel copies its history tiles before the dependency wait
  int split_group;  // the decode kernel's consecutive splits a block (tile_decode_shape)
};

// Bytes of a tile's K (or V) as computed on: [kTileKeys][HD] T elements.
template <int HD>
constexpr uint32_t tile_bytes() {
  return kTileKeys * HD * 2;
}
// Bytes of a stage as copied: K then V, in the pool's element.
template <typename KV, int HD>
constexpr uint32_t stage_bytes() {
  return 2 * kTileKeys * HD * static_cast<uint32_t>(sizeof(KV));
}

// The products' element: T over a T pool, f16 over an fp8 pool.
template <typename T, typename KV>
using ProductT = std::conditional_t<std::is_same_v<T, KV>, T, __half>;

// A word of q (a T pair) as the products read it: itself, or over an fp8
// pool the f16 pair of its values, saturated at f16's largest finite.
template <typename T, typename KV>
__device__ __forceinline__ uint32_t product_pair(uint32_t w) {
  if constexpr (std::is_same_v<T, KV>) {
    return w;
  } else {
    static_assert(std::is_same_v<T, __nv_bfloat16>, "fp8 pools take bf16 q");
    __nv_bfloat162 b;
    memcpy(&b, &w, 4);
    const float2 f = __bfloat1622float2(b);
    constexpr float kMax = 65504.0f;
    return cuda::Elem<__half>::pack2(fminf(fmaxf(f.x, -kMax), kMax), fminf(fmaxf(f.y, -kMax), kMax));
  }
}

// The f16 tiles an fp8 pool's landed stage is converted into, ahead of the
// stages: `tiles` of them (K and V: 2, V alone: 1); none over a T pool.
template <typename T, typename KV, int HD>
constexpr int converted_bytes(int tiles) {
  return std::is_same_v<T, KV> ? 0 : tiles * static_cast<int>(tile_bytes<HD>());
}

// S's A register `reg` of k-step ks for q's row at `row`: the word
// q_word names (relabelled over an fp8 pool) as the products read it.
template <typename T, typename KV>
__device__ __forceinline__ uint32_t q_fragment(const uint32_t* row, int ks, int tig, int reg) {
  return product_pair<T, KV>(__ldg(row + q_word(!std::is_same_v<T, KV>, ks, tig, reg)));
}

// Copies one row's tiles of kv head kvh into stages, in tile order (each
// copy(n) after copy(n - 1)). Tile n + 1's block-table entries are fetched
// when tile n's copies are issued, so that a copy waits on no table load of
// its own but the first. Tile `tile`'s K and V rows land in the stage at
// `dst` (K, then V kTileKeys * HD elements on); keys at or past kv_end are
// zeros. A T pool's rows land swizzled for ldmatrix (tile_offset), an fp8
// pool's too (fp8_stage_offset). Thread i of kTileThreads copies
// chunk i % kChunks of rows i / kChunks + kRowStep k. The pool's block and
// token strides fit in 32 bits (launch_tiles checks).
template <typename KV, typename T, int HD>
class TileLoader {
  static constexpr int kChunkElems = 16 / static_cast<int>(sizeof(KV));
  static constexpr int kChunks = HD / kChunkElems;  // 16-byte chunks a row
  static constexpr int kRowStep = kTileThreads / kChunks;
  static constexpr int kRows = kTileKeys / kRowStep;  // rows a thread copies
  static constexpr uint32_t kRowBytes = HD * sizeof(KV);
  // Rows r0 + kRowStep k share r0's swizzle: one destination offset.
  static_assert(kRowStep % 8 == 0 && kTileKeys % kRowStep == 0, "rows a thread copies");

 public:
  __device__ __forceinline__ TileLoader(const TileParams<T>& p, const int32_t* table, int kvh, int first_tile,
                                        int kv_end, int i)
      : table_(table),
        kv_end_(kv_end),
        log2_(p.block_size_log2),
        mask_((1 << p.block_size_log2) - 1),
        block_(static_cast<int>(p.strides.block)),
        token_(static_cast<int>(p.strides.token)),
        r0_(i / kChunks) {
    const int c = i % kChunks;
    const int64_t at = kvh * p.strides.head + c * kChunkElems;
    k_ = static_cast<const KV*>(p.k_pool) + at;
    v_ = static_cast<const KV*>(p.v_pool) + at;
    dst0_ = sizeof(KV) == 1 ? fp8_stage_offset<HD>(r0_, c) : tile_offset<HD>(r0_, c);
    fetch(first_tile);
  }

  __device__ __forceinline__ void copy(int tile, uint32_t dst) {
    int32_t page[kRows];
#pragma unroll
    for (int k = 0; k < kRows; ++k) page[k] = next_[k];
    fetch(tile + 1);
    constexpr uint32_t kHalf = stage_bytes<KV, HD>() / 2;
    const int key0 = tile * kTileKeys, tok0 = key0 & mask_;
#pragma unroll
    for (int k = 0; k < kRows; ++k) {
      const int r = r0_ + kRowStep * k;
      const bool valid = key0 + r < kv_end_;
      const int64_t off = valid ? static_cast<int64_t>(page[k]) * block_ + (tok0 + (r & mask_)) * token_ : 0;
      const uint32_t at = dst + dst0_ + k * kRowStep * kRowBytes;
      cuda::cp_async_16(at, k_ + off, valid);
      cuda::cp_async_16(at + kHalf, v_ + off, valid);
    }
  }

 private:
  // next_: the block-table entries of tile `tile`'s rows this thread copies (0 past kv_end).
  __device__ __forceinline__ void fetch(int tile) {
#pragma unroll
    for (int k = 0; k < kRows; ++k) {
      const int j = tile * kTileKeys + r0_ + kRowStep * k;
      next_[k] = j < kv_end_ ? __ldg(table_ + (j >> log2_)) : 0;
    }
  }

  const int32_t* table_;
  const KV* k_;  // this thread's chunk of kv head kvh in block 0
  const KV* v_;
  int kv_end_, log2_, mask_, block_, token_, r0_;
  uint32_t dst0_;        // the byte offset of row r0's chunk in a stage
  int32_t next_[kRows];  // the entries of the next tile to copy
};

// Rows [kBegin, kEnd) of a landed fp8 stage (K's rows 0 .. kTileKeys - 1,
// then V's) into the f16 tiles at `dst` (row kBegin first; swizzled as a T
// pool's copy leaves them): every element its code's value, exactly. K's
// rows are written in the relabelled k order (relabelled_pair), V's as they
// are. Thread i converts chunk i % kRowChunks of
// rows i / kRowChunks + kRowsAPass k, whose swizzles are one, so every
// address but the first ones is a constant offset. The whole block; the
// caller's barrier then orders the writes before the reads.
template <int HD, int kBegin, int kEnd>
__device__ __forceinline__ void convert_rows(const char* raw, char* dst, int i) {
  constexpr int kRowChunks = HD / 16;                    // a row's fp8 chunks
  constexpr int kRowsAPass = kTileThreads / kRowChunks;  // rows the block converts a pass
  static_assert(kTileThreads % kRowChunks == 0 && kRowsAPass % 8 == 0 && kTileKeys % kRowsAPass == 0 &&
                    kBegin % kRowsAPass == 0 && kEnd % kRowsAPass == 0,
                "whole rows a pass, one swizzle a thread");
  const int r0 = i / kRowChunks, c = i % kRowChunks;
  const uint32_t lo = tile_offset<HD>(r0, 2 * c), hi = tile_offset<HD>(r0, 2 * c + 1);
  const char* src = raw + fp8_stage_offset<HD>(r0, c);
#pragma unroll
  for (int r = kBegin; r < kEnd; r += kRowsAPass) {
    const uint4 q = *reinterpret_cast<const uint4*>(src + r * HD);
    uint32_t t2[8];
    cuda::kv_f8x16_codes_f16(q, t2);
    char* row = dst + (r - kBegin) * HD * 2;
    if (r < kTileKeys) {  // K: the relabelled order
      *reinterpret_cast<uint4*>(row + lo) = make_uint4(t2[relabelled_pair(0)], t2[relabelled_pair(1)],
                                                       t2[relabelled_pair(2)], t2[relabelled_pair(3)]);
      *reinterpret_cast<uint4*>(row + hi) = make_uint4(t2[relabelled_pair(4)], t2[relabelled_pair(5)],
                                                       t2[relabelled_pair(6)], t2[relabelled_pair(7)]);
    } else {
      *reinterpret_cast<uint4*>(row + lo) = make_uint4(t2[0], t2[1], t2[2], t2[3]);
      *reinterpret_cast<uint4*>(row + hi) = make_uint4(t2[4], t2[5], t2[6], t2[7]);
    }
  }
}

// S's B fragments of k-steps 2 pr and 2 pr + 1 for the warp's keys key0 ..
// key0 + 15 (n-tiles key0 / 8 and the next), read by one ldmatrix from a
// landed fp8 stage's K rows: codes[j] holds four codes of n-tile j / 2,
// k-step 2 pr + j % 2, which k_fragment makes f16.
template <int HD>
__device__ __forceinline__ void k_codes(uint32_t (&codes)[4], uint32_t stage, int key0, int pr, int lane) {
  cuda::ldmatrix_x4(codes, stage + fp8_stage_offset<HD>(key0 + x4_row(lane), 2 * pr + x4_chunk(lane)));
}
// k-step ks's B fragment of both n-tiles (b[0], b[1]: the first; b[2], b[3]:
// the second) from k_codes of its pair: in the relabelled k order, the
// same words the converted tile's ldmatrix gives.
template <int HD>
__device__ __forceinline__ void k_fragment(const uint32_t (&codes)[HD / 32][4], int ks, uint32_t (&b)[4]) {
  uint32_t lo[2], hi[2];
  cuda::kv_f8x4_codes_f16(codes[ks / 2][ks % 2], lo);
  cuda::kv_f8x4_codes_f16(codes[ks / 2][2 + ks % 2], hi);
  b[0] = lo[0], b[1] = lo[1], b[2] = hi[0], b[3] = hi[1];
}

// A score in the log2 domain, or -inf for a key past the slot's position.
__device__ __forceinline__ float tile_score(float s, int key, int pos, float scale_log2) {
  return key <= pos ? __fmul_rn(s, scale_log2) : -INFINITY;
}

// The running max m meets the tile's: the factor of the old O and l, and
// the base of the tile's exponentials (0 while nothing is visible).
struct SoftmaxStep {
  float corr, base;
};
__device__ __forceinline__ SoftmaxStep softmax_step(float& m, float tile_max) {
  const float m_new = fmaxf(m, tile_max);
  SoftmaxStep r;
  r.corr = m_new == -INFINITY ? 1.0f : cuda::exp2_approx(__fsub_rn(m, m_new));
  r.base = m_new == -INFINITY ? 0.0f : m_new;
  m = m_new;
  return r;
}
__device__ __forceinline__ float tile_prob(float s, float base) {
  return cuda::exp2_approx(__fsub_rn(s, base));
}

// The B fragment of l's n-tile: column 0 of V is ones (the lane of column
// gid holds rows 2 tig, 2 tig + 1 and 2 tig + 8, + 9 of it), the others zero.
template <typename T>
__device__ __forceinline__ uint32_t ones_column(int gid) {
  return gid == 0 ? cuda::Elem<T>::pack2(1.0f, 1.0f) : 0u;
}

// O's n-tiles and l's times the factors of the lane's two slots (A rows gid
// and gid + 8: C elements 0, 1 and 2, 3).
template <int N>
__device__ __forceinline__ void rescale(float (&o)[N][4], float (&lf)[4], const SoftmaxStep (&st)[2]) {
#pragma unroll
  for (int e = 0; e < 2; ++e) {
#pragma unroll
    for (int dt = 0; dt < N; ++dt) {
      o[dt][2 * e] = __fmul_rn(o[dt][2 * e], st[e].corr);
      o[dt][2 * e + 1] = __fmul_rn(o[dt][2 * e + 1], st[e].corr);
    }
    lf[2 * e] = __fmul_rn(lf[2 * e], st[e].corr);
    lf[2 * e + 1] = __fmul_rn(lf[2 * e + 1], st[e].corr);
  }
}

// P's A fragment of a 16-key k-step, from the C fragments of its two 8-key
// n-tiles, rounded to T.
template <typename T>
__device__ __forceinline__ uint4 p_fragment(const float (&lo)[4], const float (&hi)[4]) {
  return make_uint4(cuda::Elem<T>::pack2(lo[0], lo[1]), cuda::Elem<T>::pack2(lo[2], lo[3]),
                    cuda::Elem<T>::pack2(hi[0], hi[1]), cuda::Elem<T>::pack2(hi[2], hi[3]));
}

// One k-step of O += P V over O's n-tile pairs 0 .. NQ - 1 (v_frag(qd, b):
// V's B fragments of pair qd), then l's n-tile.
template <typename T, int NQ, typename VFrag>
__device__ __forceinline__ void pv_kstep(float (&o)[2 * NQ][4], float (&lf)[4], const uint4 pa,
                                         VFrag&& v_frag, uint32_t ones) {
  const uint32_t a[4] = {pa.x, pa.y, pa.z, pa.w};
#pragma unroll
  for (int qd = 0; qd < NQ; ++qd) {
    uint32_t b[4];
    v_frag(qd, b);
    cuda::Elem<T>::mma(o[2 * qd], a, b[0], b[1]);
    cuda::Elem<T>::mma(o[2 * qd + 1], a, b[2], b[3]);
  }
  cuda::Elem<T>::mma(lf, a, ones, ones);
}

// Folding split (m, l, O) into the running (acc_m, acc_l, acc_O): the
// weights of both sides, then fold() each of l and O's elements.
__device__ __forceinline__ void fold_weights(float& acc_m, float m, float& a, float& b) {
  const float mm = fmaxf(acc_m, m);
  a = cuda::exp2_approx(__fsub_rn(acc_m, mm));
  b = cuda::exp2_approx(__fsub_rn(m, mm));
  acc_m = mm;
}
__device__ __forceinline__ float fold(float acc, float a, float x, float b) {
  return __fmaf_rn(acc, a, __fmul_rn(x, b));
}
// The output's factor (v: an fp8 pool's v_scale; 1, exactly no factor,
// over a T pool), and an element of it.
__device__ __forceinline__ float out_scale(float l, float v) {
  return __fmul_rn(__frcp_rn(l), v);
}
__device__ __forceinline__ float out_elem(float o, float inv) {
  return __fmul_rn(o, inv);
}

}  // namespace nanoserve::paged_attention_kernels
