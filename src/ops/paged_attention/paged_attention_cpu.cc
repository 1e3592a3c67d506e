// Fast CPU paged attention. Work items are (token, kv head, row group)
// triples, handed out dynamically (a causal prefill chunk has uneven rows);
// each item attends the query heads of its group, which share one kv head,
// together (attend_rows), so each K/V row is read once per item. The n_rep
// query heads are one group unless that leaves fewer than two items a thread
// (a single decode: n_kv_heads items), when they are cut into more. attend_rows is attend_row's
// arithmetic row for row, the reduction the gather path uses, so the two reads
// agree bitwise; which thread runs an item never changes its arithmetic.

#include <algorithm>
#include <atomic>
#include <type_traits>

#include "core/check.h"
#include "core/half.h"
#include "core/thread_pool.h"
#include "ops/attention/attend_row.h"
#include "ops/paged_attention/paged_attention.h"

namespace nanoserve {

namespace {

constexpr int64_t kMaxWidenedHeadDim = 512;  // 16-bit pools: a row buffer on the stack

// Pool element types: f32 rows are read in place; 16-bit rows are widened
// (exactly) into a per-item row buffer first, so the reduction sees the same
// floats the gather path's widened copy holds.
struct F32Rows {
  using Elem = float;
  static const float* row(const float* p, float*) { return p; }
};
template <float (*kWiden)(uint16_t)>
struct Half16Rows {
  using Elem = uint16_t;
  static const float* row(const uint16_t* p, float* buf, int64_t hd) {
    for (int64_t i = 0; i < hd; ++i) buf[i] = kWiden(p[i]);
    return buf;
  }
};

// Runs the items handed out by `next`. SlotOf maps (block table, position) to
// the physical slot; it is the only thing that differs between block sizes.
template <typename Rows, typename SlotOf>
void run_items(const PagedAttentionArgs& a, const typename Rows::Elem* k_pool,
               const typename Rows::Elem* v_pool, SlotOf slot_of, int64_t groups, std::atomic<int64_t>& next,
               float* sc, int64_t scores_stride) {
  const int64_t hd = a.head_dim;
  const int64_t n_rep = a.n_heads / a.n_kv_heads;
  const int64_t group_rows = (n_rep + groups - 1) / groups;
  const int64_t row_stride = static_cast<int64_t>(a.n_kv_heads) * hd;  // elements per slot
  const int64_t n_items = static_cast<int64_t>(a.num_tokens) * a.n_kv_heads * groups;
  float kbuf[kMaxWidenedHeadDim], vbuf[kMaxWidenedHeadDim];  // 16-bit pools only
  for (int64_t item = next.fetch_add(1, std::memory_order_relaxed); item < n_items;
       item = next.fetch_add(1, std::memory_order_relaxed)) {
    const int64_t t = item / (a.n_kv_heads * groups);
    const int64_t kvh = item / groups % a.n_kv_heads;
    const int64_t r0 = item % groups * group_rows;
    const int64_t rows = std::min(group_rows, n_rep - r0);
    if (rows <= 0) continue;
    // The sequence that owns token t: the last b with seq_starts[b] <= t.
    const int64_t b = std::upper_bound(a.seq_starts, a.seq_starts + a.num_seqs + 1, t) - a.seq_starts - 1;
    const int32_t* table = a.block_tables + b * a.max_blocks_per_seq;
    const int64_t n_ctx = static_cast<int64_t>(a.positions[t]) + 1;
    const int64_t p0 = attention_window_begin(a.positions[t], a.window);
    NS_CHECK(n_rep * n_ctx <= scores_stride)
        << n_rep << " rows of context " << n_ctx << " exceed the scores scratch " << scores_stride;
    const auto* k_base = k_pool + kvh * hd;
    const auto* v_base = v_pool + kvh * hd;
    const int64_t off = (t * a.n_heads + kvh * n_rep + r0) * hd;
    if constexpr (std::is_same_v<Rows, F32Rows>) {
      auto k_row = [&](int64_t p) { return k_base + slot_of(table, p) * row_stride; };
      auto v_row = [&](int64_t p) { return v_base + slot_of(table, p) * row_stride; };
      attend_rows(a.q + off, hd, rows, hd, p0, n_ctx, k_row, v_row, a.scale, sc, a.out + off, hd, a.softcap);
    } else {
      // attend_rows uses a K row before it asks for the next, and a V row
      // likewise, so one buffer each suffices.
      auto k_row = [&](int64_t p) { return Rows::row(k_base + slot_of(table, p) * row_stride, kbuf, hd); };
      auto v_row = [&](int64_t p) { return Rows::row(v_base + slot_of(table, p) * row_stride, vbuf, hd); };
      attend_rows(a.q + off, hd, rows, hd, p0, n_ctx, k_row, v_row, a.scale, sc, a.out + off, hd, a.softcap);
    }
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
  // items. Which rows go together never changes a row's arithmetic.
  const int64_t n_rep = a.n_heads / a.n_kv_heads;
  int64_t groups = 1;
  while (groups < n_rep && int64_t{a.num_tokens} * a.n_kv_heads * groups < 2 * int64_t{pool.num_threads()})
    ++groups;
  std::atomic<int64_t> next{0};
  pool.parallel_for(pool.num_threads(), [&](int64_t, int64_t, int thread) {
    float* sc = scores + thread * scores_stride;
    if (pow2) {
      auto slot_of = [shift, mask](const int32_t* table, int64_t p) {
        return (static_cast<int64_t>(table[p >> shift]) << shift) | (p & mask);
      };
      run_items<Rows>(a, k_pool, v_pool, slot_of, groups, next, sc, scores_stride);
    } else {
      auto slot_of = [bs](const int32_t* table, int64_t p) {
        return static_cast<int64_t>(table[p / bs]) * bs + p % bs;
      };
      run_items<Rows>(a, k_pool, v_pool, slot_of, groups, next, sc, scores_stride);
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
    default: NS_CHECK(false) << "paged attention over a " << dtype_name(a.kv_dtype) << " pool";
  }
}

}  // namespace nanoserve
