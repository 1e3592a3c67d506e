#pragma once
// The one reduction every CPU attention path shares, so the gather path and
// the fused paged read produce bitwise-identical outputs: attend_tile.h's
// per-row definition (scores, an f32 softmax with max subtraction, the output
// accumulated in position order). Only how a position's K/V row is found
// differs (an accessor).

#include <cstdint>

#include "ops/attention/attend_tile.h"

namespace nanoserve {

// out[n_q rows] = softmax(scale * q_r·K[p_begin..n_ctx)) · V[p_begin..n_ctx)
// for n_q query rows over one shared K/V history (the n_rep query heads of
// one kv head under GQA); p_begin > 0 is a sliding window's first position
// (attention_window_begin). The rows form one tile of attend_tile (16 rows a
// pass), so each K/V row is loaded once for all of them; row r's arithmetic is
// attend_tile.h's definition and does not depend on the other rows.
//   q + r * q_stride, out + r * out_stride: row r (head_dim floats)
//   k_row(p) / v_row(p): the head_dim floats of position p, valid for the
//     whole call (f32 storage read in place)
//   scores: scratch of min(n_q, 16) * (n_ctx - p_begin) floats
// softcap > 0 caps each scaled score to softcap * tanh(score / softcap) before
// the softmax (Gemma 2); 0: none. sinks: row r's sink logit is sinks[r]
// (gpt-oss's per-head sinks, attend_tile.h); null: none.
template <typename KRow, typename VRow>
inline void attend_rows(const float* q, int64_t q_stride, int64_t n_q, int64_t head_dim, int64_t p_begin,
                        int64_t n_ctx, KRow&& k_row, VRow&& v_row, float scale, float* scores, float* out,
                        int64_t out_stride, float softcap = 0.0f, const float* sinks = nullptr) {
  constexpr int64_t kMaxRows = 16;  // rows per pass; more rows take another pass
  const float* kp[attn::kKeyBlock];
  const float* vp[attn::kKeyBlock];
  auto k_block = [&](int64_t p0, int64_t n) {
    for (int64_t i = 0; i < n; ++i) kp[i] = k_row(p0 + i);
    return static_cast<const float* const*>(kp);
  };
  auto v_block = [&](int64_t p0, int64_t n) {
    for (int64_t i = 0; i < n; ++i) vp[i] = v_row(p0 + i);
    return static_cast<const float* const*>(vp);
  };
  AttnRow rows[kMaxRows];
  for (int64_t r0 = 0; r0 < n_q; r0 += kMaxRows) {
    const int64_t n = n_q - r0 < kMaxRows ? n_q - r0 : kMaxRows;
    for (int64_t r = 0; r < n; ++r)
      rows[r] = {q + (r0 + r) * q_stride, out + (r0 + r) * out_stride, p_begin, n_ctx,
                 sinks != nullptr ? sinks[r0 + r] : -INFINITY};
    attend_tile(rows, n, head_dim, scale, k_block, v_block, scores, softcap);
  }
}

// One query row: attend_rows with n_q = 1, so every path that uses either
// gives bitwise the same output for a row.
//   scores: scratch of n_ctx - p_begin floats
template <typename KRow, typename VRow>
inline void attend_row(const float* q, int64_t head_dim, int64_t p_begin, int64_t n_ctx, KRow&& k_row,
                       VRow&& v_row, float scale, float* scores, float* out, float softcap = 0.0f,
                       const float* sink = nullptr) {
  attend_rows(q, head_dim, 1, head_dim, p_begin, n_ctx, k_row, v_row, scale, scores, out, head_dim, softcap,
              sink);
}

// The first position a query at `position` attends with a sliding window of
// `window` positions (itself and the window - 1 before it, as transformers'
// q - k < window); 0 without one (window 0).
inline int64_t attention_window_begin(int64_t position, int64_t window) {
  return window > 0 && position + 1 > window ? position + 1 - window : 0;
}

}  // namespace nanoserve
