// Fast CPU paged attention. Work items are (tile, kv head, row group)
// triples, handed out dynamically (a causal prefill chunk has uneven rows). A
// tile is up to 8 consecutive tokens of one sequence; an item attends the
// query heads of its group, which share one kv head, for all the tile's
// tokens as one attend_tile call, so each K/V block is read once for all of
// those rows. The n_rep query heads are one group unless that leaves fewer
// than two items a thread (a single decode: n_kv_heads items), when they are
// cut into more. attend_tile's arithmetic is per row, the reduction the
// gather path's attend_row uses, so the two reads agree bitwise; which tile,
// group or thread a row falls in never changes its arithmetic.

#include <algorithm>
#include <atomic>
#include <climits>

#include "core/check.h"
#include "core/half.h"
#include "core/kv_quant.h"
#include "core/thread_pool.h"
#include "ops/attention/attend_row.h"
#include "ops/paged_attention/paged_attention.h"

namespace nanoserve {

namespace {

constexpr int64_t kMaxWidenedHeadDim = 512;  // 16-bit and fp8 pools

// Pool element types: f32 rows are read in place; 16-bit rows are widened
// (exactly) into a per-item block buffer first, so the reduction sees the same
// floats the gather path's widened copy holds; E4M3 rows are dequantized
// there (f32(q) * scale, as the gather path does).
struct F32Rows {
  using Elem = float;
  static constexpr bool kWidens = false;
  static void widen(const float*, float*, int64_t, float) {}
};
template <float (*kWiden)(uint16_t)>
struct Half16Rows {
  using Elem = uint16_t;
  static constexpr bool kWidens = true;
  static void widen(const uint16_t* p, float* buf, int64_t hd, float) {
    for (int64_t i = 0; i < hd; ++i) buf[i] = kWiden(p[i]);
  }
};
struct F8Rows {
  using Elem = uint8_t;
  static constexpr bool kWidens = true;
  static void widen(const uint8_t* p, float* buf, int64_t hd, float scale) {
    for (int64_t i = 0; i < hd; ++i) buf[i] = kv_f8_dequantize(p[i], scale);
  }
};

// Tokens per tile for groups of `group_rows` query heads: about 24 rows, at
// most 8 tokens (the causal diagonal of a tile computes up to 7 scores a row
// that the row does not use).
int64_t tile_tokens(int64_t group_rows) {
  const int64_t t = kPagedTileRows / group_rows;
  return t < 1 ? 1 : t > 8 ? 8 : t;
}

// Runs the items handed out by `next`: (token, kv head, row group), the tokens
// taken from the last (the longest histories of a causal chunk) to the first.
// Only a tile's first token (every tt-th of its sequence) does work: that
// item attends the tile's tokens. SlotOf maps (block table, position) to the
// physical slot; it is the only thing that differs between block sizes.
template <typename Rows, typename SlotOf>
void run_items(const PagedAttentionArgs& a, const typename Rows::Elem* k_pool,
               const typename Rows::Elem* v_pool, SlotOf slot_of, int64_t tt, int64_t groups,
               std::atomic<int64_t>& next, float* sc, int64_t scores_stride) {
  const int64_t hd = a.head_dim;
  const int64_t n_rep = a.n_heads / a.n_kv_heads;
  const int64_t group_rows = (n_rep + groups - 1) / groups;
  const int64_t row_stride = static_cast<int64_t>(a.n_kv_heads) * hd;  // elements per slot
  const int64_t n_items = int64_t{a.num_tokens} * a.n_kv_heads * groups;
  const float* kp[attn::kKeyBlock];
  const float* vp[attn::kKeyBlock];
  // 16-bit pools only: a key block of widened rows each for K and V.
  float widened[Rows::kWidens ? 2 * attn::kKeyBlock * kMaxWidenedHeadDim : 1];
  AttnRow rows[attn::kMaxTileRows];
  for (int64_t item = next.fetch_add(1, std::memory_order_relaxed); item < n_items;
       item = next.fetch_add(1, std::memory_order_relaxed)) {
    const int64_t t0 = a.num_tokens - 1 - item / (a.n_kv_heads * groups);
    // The sequence that owns token t0: the last b with seq_starts[b] <= t0.
    const int64_t b = std::upper_bound(a.seq_starts, a.seq_starts + a.num_seqs + 1, t0) - a.seq_starts - 1;
    if ((t0 - a.seq_starts[b]) % tt != 0) continue;  // not a tile's first token
    const int64_t n_tokens = std::min<int64_t>(tt, a.seq_starts[b + 1] - t0);
    const int64_t kvh = item / groups % a.n_kv_heads;
    const int64_t r0 = item % groups * group_rows;
    const int64_t heads = std::min(group_rows, n_rep - r0);
    if (heads <= 0) continue;
    const int32_t* table = a.block_tables + b * a.max_blocks_per_seq;
    int64_t n_rows = 0, p0 = INT64_MAX, p1 = 0;
    for (int64_t i = 0; i < n_tokens; ++i) {
      const int64_t t = t0 + i;
      const int64_t end = static_cast<int64_t>(a.positions[t]) + 1;
      const int64_t begin = attention_window_begin(a.positions[t], a.window);
      p0 = std::min(p0, begin);
      p1 = std::max(p1, end);
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t off = (t * a.n_heads + kvh * n_rep + r0 + h) * hd;
        const float sink = a.sinks != nullptr ? a.sinks[kvh * n_rep + r0 + h] : -INFINITY;
        rows[n_rows++] = {a.q + off, a.out + off, begin, end, sink};
      }
    }
    NS_CHECK(n_rows * (p1 - p0) <= scores_stride)
        << n_rows << " rows of context " << p1 - p0 << " exceed the scores scratch " << scores_stride;
    const auto* k_base = k_pool + kvh * hd;
    const auto* v_base = v_pool + kvh * hd;
    auto block = [&](const typename Rows::Elem* base, const float** ptrs, float* buf, int64_t p, int64_t n,
                     float scale) {
      for (int64_t i = 0; i < n; ++i) {
        const auto* row = base + slot_of(table, p + i) * row_stride;
        if constexpr (Rows::kWidens) {
          Rows::widen(row, buf + i * hd, hd, scale);
          ptrs[i] = buf + i * hd;
        } else {
          ptrs[i] = row;
        }
      }
      return static_cast<const float* const*>(ptrs);
    };
    float* kbuf = widened;
    float* vbuf = widened + (Rows::kWidens ? attn::kKeyBlock * hd : 0);
    attend_tile(
        rows, n_rows, hd, a.scale,
        [&](int64_t p, int64_t n) { return block(k_base, kp, kbuf, p, n, a.k_scale); },
        [&](int64_t p, int64_t n) { return block(v_base, vp, vbuf, p, n, a.v_scale); }, sc, a.softcap);
  }
}

template <typename Rows>
void run_pool(const PagedAttentionArgs& a, const typename Rows::Elem* k_pool,
              const typename Rows::Elem* v_pool, ThreadPool& pool, float* scores, int64_t scores_stride) {
  const int64_t bs = a.block_size;
  // A division per position costs as much as a 64-wide dot product, so the
  // usual power-of-two block sizes use a shift and a mask instead.
  const bool pow2 = (bs & (bs - 1)) == 0;
  const int shift = __builtin_ctzll(static_cast<uint64_t>(bs));
  const int64_t mask = bs - 1;
  // Row groups a kv head is cut into: the fewest that give every thread two
  // items, and at most kPagedTileRows rows each. Which rows go together never
  // changes a row's arithmetic.
  const int64_t n_rep = a.n_heads / a.n_kv_heads;
  int64_t groups = (n_rep + kPagedTileRows - 1) / kPagedTileRows;
  while (groups < n_rep && int64_t{a.num_tokens} * a.n_kv_heads * groups < 2 * int64_t{pool.num_threads()})
    ++groups;
  const int64_t tt = tile_tokens((n_rep + groups - 1) / groups);
  std::atomic<int64_t> next{0};
  pool.parallel_for(pool.num_threads(), [&](int64_t, int64_t, int thread) {
    float* sc = scores + thread * scores_stride;
    if (pow2) {
      auto slot_of = [shift, mask](const int32_t* table, int64_t p) {
        return (static_cast<int64_t>(table[p >> shift]) << shift) | (p & mask);
      };
      run_items<Rows>(a, k_pool, v_pool, slot_of, tt, groups, next, sc, scores_stride);
    } else {
      auto slot_of = [bs](const int32_t* table, int64_t p) {
        return static_cast<int64_t>(table[p / bs]) * bs + p % bs;
      };
      run_items<Rows>(a, k_pool, v_pool, slot_of, tt, groups, next, sc, scores_stride);
    }
  });
}

}  // namespace

void paged_attention_cpu(const PagedAttentionArgs& a, ThreadPool& pool, float* scores,
                         int64_t scores_stride) {
  NS_CHECK(a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0)
      << "n_heads " << a.n_heads << " n_kv_heads " << a.n_kv_heads;
  NS_CHECK(a.block_size > 0) << "block_size " << a.block_size;
  if (a.num_tokens == 0) return;
  switch (a.kv_dtype) {
    case DType::kF32: run_pool<F32Rows>(a, a.k_pool, a.v_pool, pool, scores, scores_stride); break;
    case DType::kF16:
      NS_CHECK(a.head_dim <= kMaxWidenedHeadDim) << "head_dim " << a.head_dim << " over a 16-bit pool";
      run_pool<Half16Rows<fp16_to_f32>>(a, a.k_pool16, a.v_pool16, pool, scores, scores_stride);
      break;
    case DType::kBF16:
      NS_CHECK(a.head_dim <= kMaxWidenedHeadDim) << "head_dim " << a.head_dim << " over a 16-bit pool";
      run_pool<Half16Rows<bf16_to_f32>>(a, a.k_pool16, a.v_pool16, pool, scores, scores_stride);
      break;
    case DType::kF8E4M3:
      NS_CHECK(a.head_dim <= kMaxWidenedHeadDim) << "head_dim " << a.head_dim << " over an fp8 pool";
      NS_CHECK(kv_scale_valid(a.k_scale) && kv_scale_valid(a.v_scale))
          << "KV scales " << a.k_scale << ", " << a.v_scale << " must be finite and > 0";
      run_pool<F8Rows>(a, a.k_pool8, a.v_pool8, pool, scores, scores_stride);
      break;
    default: NS_CHECK(false) << "paged attention over a " << dtype_name(a.kv_dtype) << " pool";
  }
}

}  // namespace nanoserve
