#pragma once
// The one reduction every CPU attention path shares, so the gather path and
// the fused paged read produce bitwise-identical outputs: scores in position
// order, an f32 softmax with max subtraction, and the output accumulated in
// position order. Only how a position's K/V row is found differs (an accessor).

#include <cmath>
#include <cstdint>

namespace nanoserve {

// The output is accumulated in a local array, kAttnAccDims dims at a time (one
// pass for head_dim <= 256): the compiler cannot prove that `out` does not
// overlap a V row, so accumulating in `out` itself costs a load and a store per
// element and position. Each element still sees the same operations in the
// same position order.
inline constexpr int64_t kAttnAccDims = 256;

// Dot product with a fixed order: 8 interleaved partial sums over head_dim,
// combined pairwise. The compiler vectorises it; the order never changes.
inline float attn_dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  }
  for (; i < n; ++i) acc[i & 7] += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// out[head_dim] = softmax(scale * q·K[0..n_ctx)) · V[0..n_ctx)
// k_row(p) / v_row(p) return the head_dim floats of position p.
// scores: scratch of n_ctx floats.
template <typename KRow, typename VRow>
inline void attend_row(const float* q, int64_t head_dim, int64_t n_ctx, KRow&& k_row, VRow&& v_row,
                       float scale, float* scores, float* out) {
  float max_score = -INFINITY;
  for (int64_t p = 0; p < n_ctx; ++p) {
    scores[p] = attn_dot(q, k_row(p), head_dim) * scale;
    max_score = scores[p] > max_score ? scores[p] : max_score;
  }
  float sum = 0.0f;
  for (int64_t p = 0; p < n_ctx; ++p) {
    scores[p] = std::exp(scores[p] - max_score);
    sum += scores[p];
  }
  const float inv = 1.0f / sum;
  for (int64_t d0 = 0; d0 < head_dim; d0 += kAttnAccDims) {
    const int64_t nd = head_dim - d0 < kAttnAccDims ? head_dim - d0 : kAttnAccDims;
    float acc[kAttnAccDims];
    for (int64_t d = 0; d < nd; ++d) acc[d] = 0.0f;
    for (int64_t p = 0; p < n_ctx; ++p) {
      const float w = scores[p] * inv;
      const float* v = v_row(p) + d0;
      for (int64_t d = 0; d < nd; ++d) acc[d] += w * v[d];
    }
    for (int64_t d = 0; d < nd; ++d) out[d0 + d] = acc[d];
  }
}

// attend_row for n_q query rows over one shared K/V history (the n_rep query
// heads of one kv head under GQA). Each K and V row is loaded once for all
// n_q queries instead of once per query, which is what keeps a long history
// from being streamed from memory n_rep times. Row r's arithmetic is exactly
// attend_row's, expression for expression and in the same position order, so
// the result is bitwise that of n_q attend_row calls.
//   q + r * q_stride, out + r * out_stride: row r (head_dim floats)
//   scores: scratch of n_q * n_ctx floats
template <typename KRow, typename VRow>
inline void attend_rows(const float* q, int64_t q_stride, int64_t n_q, int64_t head_dim, int64_t n_ctx,
                        KRow&& k_row, VRow&& v_row, float scale, float* scores, float* out,
                        int64_t out_stride) {
  constexpr int64_t kMaxRows = 16;  // rows per pass; more rows take another pass
  for (int64_t r0 = 0; r0 < n_q; r0 += kMaxRows) {
    const int64_t n = n_q - r0 < kMaxRows ? n_q - r0 : kMaxRows;
    float inv[kMaxRows];
    for (int64_t p = 0; p < n_ctx; ++p) {
      const float* k = k_row(p);
      for (int64_t r = 0; r < n; ++r)
        scores[r * n_ctx + p] = attn_dot(q + (r0 + r) * q_stride, k, head_dim) * scale;
    }
    for (int64_t r = 0; r < n; ++r) {
      float* s = scores + r * n_ctx;
      float max_score = -INFINITY;
      for (int64_t p = 0; p < n_ctx; ++p) max_score = s[p] > max_score ? s[p] : max_score;
      float sum = 0.0f;
      for (int64_t p = 0; p < n_ctx; ++p) {
        s[p] = std::exp(s[p] - max_score);
        sum += s[p];
      }
      inv[r] = 1.0f / sum;
    }
    for (int64_t d0 = 0; d0 < head_dim; d0 += kAttnAccDims) {
      const int64_t nd = head_dim - d0 < kAttnAccDims ? head_dim - d0 : kAttnAccDims;
      float acc[kMaxRows][kAttnAccDims];
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t d = 0; d < nd; ++d) acc[r][d] = 0.0f;
      }
      for (int64_t p = 0; p < n_ctx; ++p) {
        const float* v = v_row(p) + d0;
        for (int64_t r = 0; r < n; ++r) {
          const float w = scores[r * n_ctx + p] * inv[r];
          for (int64_t d = 0; d < nd; ++d) acc[r][d] += w * v[d];
        }
      }
      for (int64_t r = 0; r < n; ++r) {
        float* o = out + (r0 + r) * out_stride + d0;
        for (int64_t d = 0; d < nd; ++d) o[d] = acc[r][d];
      }
    }
  }
}

}  // namespace nanoserve
