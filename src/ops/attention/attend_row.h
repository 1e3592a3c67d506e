#pragma once
// The one reduction every CPU attention path shares, so the gather path and
// the fused paged read produce bitwise-identical outputs: scores in position
// order, an f32 softmax with max subtraction, and the output accumulated in
// position order. Only how a position's K/V row is found differs (an accessor).

#include <cmath>
#include <cstdint>
#include <cstring>

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
  const int64_t n8 = n & ~int64_t{7};
  for (int64_t i = 0; i < n8; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  }
  for (int64_t j = 0; j < n - n8; ++j) acc[j] += a[n8 + j] * b[n8 + j];  // element n8 + j is lane j
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// 8 floats as one value (a GCC/Clang vector): lane j of an accumulator is
// attn_dot's acc[j], and an element-wise update is the scalar loop's, so the
// vector forms below are the same arithmetic, written so that the compiler
// vectorises along the head dimension (left to itself, it vectorised the value
// loop along positions, with gathers).
typedef float AttnVec8 __attribute__((vector_size(32)));
inline AttnVec8 attn_load8(const float* p) {
  AttnVec8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// attn_dot for n = 8 * kVecs known at compile time.
template <int64_t kVecs>
inline float attn_dot_fixed(const float* a, const float* b) {
  AttnVec8 acc = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t j = 0; j < kVecs; ++j) acc += attn_load8(a + 8 * j) * attn_load8(b + 8 * j);
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// attend_rows' body for a head_dim known at compile time (kHD > 0, a multiple
// of 8: the dot products and the value accumulators unroll and stay in
// registers) or not (kHD == 0). The same arithmetic either way.
template <int64_t kHD, typename KRow, typename VRow>
inline void attend_rows_impl(const float* q, int64_t q_stride, int64_t n_q, int64_t head_dim, int64_t p_begin,
                             int64_t n_ctx, KRow&& k_row, VRow&& v_row, float scale, float* scores,
                             float* out, int64_t out_stride, float softcap) {
  static_assert(kHD % 8 == 0, "a fixed head_dim is whole vectors");
  const int64_t hd = kHD > 0 ? kHD : head_dim;
  const int64_t len = n_ctx - p_begin;  // positions attended: [p_begin, n_ctx)
  constexpr int64_t kMaxRows = 16;  // rows per pass; more rows take another pass
  for (int64_t r0 = 0; r0 < n_q; r0 += kMaxRows) {
    const int64_t n = n_q - r0 < kMaxRows ? n_q - r0 : kMaxRows;
    // Scores, position by position: each K row is loaded once for all rows.
    for (int64_t p = p_begin; p < n_ctx; ++p) {
      const float* k = k_row(p);
      for (int64_t r = 0; r < n; ++r) {
        const float* qr = q + (r0 + r) * q_stride;
        float dot;
        if constexpr (kHD > 0) {
          dot = attn_dot_fixed<kHD / 8>(qr, k);
        } else {
          dot = attn_dot(qr, k, hd);
        }
        scores[r * len + (p - p_begin)] = dot * scale;
      }
    }
    for (int64_t r = 0; r < n; ++r) {
      float* s = scores + r * len;
      if (softcap > 0.0f) {  // cap * tanh(score / cap) (Gemma 2), before the softmax
        for (int64_t p = 0; p < len; ++p) s[p] = softcap * std::tanh(s[p] / softcap);
      }
      float max_score = -INFINITY;
      for (int64_t p = 0; p < len; ++p) max_score = s[p] > max_score ? s[p] : max_score;
      float sum = 0.0f;
      for (int64_t p = 0; p < len; ++p) {
        s[p] = std::exp(s[p] - max_score);
        sum += s[p];
      }
      const float inv = 1.0f / sum;
      // Values, row by row, in position order, into accumulators that stay in
      // registers (a V row is read once a row: from cache after the first).
      float* o = out + (r0 + r) * out_stride;
      if constexpr (kHD > 0) {
        AttnVec8 acc[kHD / 8];
        for (int64_t j = 0; j < kHD / 8; ++j) acc[j] = AttnVec8{0, 0, 0, 0, 0, 0, 0, 0};
        for (int64_t p = 0; p < len; ++p) {
          const float w = s[p] * inv;
          const float* v = v_row(p_begin + p);
          for (int64_t j = 0; j < kHD / 8; ++j) acc[j] += w * attn_load8(v + 8 * j);
        }
        std::memcpy(o, acc, sizeof acc);
      } else {
        for (int64_t d0 = 0; d0 < hd; d0 += kAttnAccDims) {
          const int64_t nd = hd - d0 < kAttnAccDims ? hd - d0 : kAttnAccDims;
          float acc[kAttnAccDims];
          for (int64_t d = 0; d < nd; ++d) acc[d] = 0.0f;
          for (int64_t p = 0; p < len; ++p) {
            const float w = s[p] * inv;
            const float* v = v_row(p_begin + p) + d0;
            for (int64_t d = 0; d < nd; ++d) acc[d] += w * v[d];
          }
          for (int64_t d = 0; d < nd; ++d) o[d0 + d] = acc[d];
        }
      }
    }
  }
}

// out[n_q rows] = softmax(scale * q_r·K[p_begin..n_ctx)) · V[p_begin..n_ctx)
// for n_q query rows over one shared K/V history (the n_rep query heads of
// one kv head under GQA); p_begin > 0 is a sliding window's first position
// (attention_window_begin). Each K row is loaded once for all n_q queries, which is what keeps a
// long history from being streamed from memory n_rep times. Row r's arithmetic
// does not depend on the other rows: scores in position order, max, exp and
// sum in position order, values accumulated in position order.
// softcap > 0 caps each scaled score to softcap * tanh(score / softcap) before
// the softmax (Gemma 2); 0: none.
//   q + r * q_stride, out + r * out_stride: row r (head_dim floats)
//   k_row(p) / v_row(p): the head_dim floats of position p
//   scores: scratch of min(n_q, 16) * (n_ctx - p_begin) floats
template <typename KRow, typename VRow>
inline void attend_rows(const float* q, int64_t q_stride, int64_t n_q, int64_t head_dim, int64_t p_begin,
                        int64_t n_ctx, KRow&& k_row, VRow&& v_row, float scale, float* scores, float* out,
                        int64_t out_stride, float softcap = 0.0f) {
  if (head_dim == 64) {
    attend_rows_impl<64>(q, q_stride, n_q, head_dim, p_begin, n_ctx, k_row, v_row, scale, scores, out,
                         out_stride, softcap);
  } else if (head_dim == 128) {
    attend_rows_impl<128>(q, q_stride, n_q, head_dim, p_begin, n_ctx, k_row, v_row, scale, scores, out,
                          out_stride, softcap);
  } else {
    attend_rows_impl<0>(q, q_stride, n_q, head_dim, p_begin, n_ctx, k_row, v_row, scale, scores, out,
                        out_stride, softcap);
  }
}

// One query row: attend_rows with n_q = 1, so every path that uses either
// gives bitwise the same output for a row.
//   scores: scratch of n_ctx - p_begin floats
template <typename KRow, typename VRow>
inline void attend_row(const float* q, int64_t head_dim, int64_t p_begin, int64_t n_ctx, KRow&& k_row,
                       VRow&& v_row, float scale, float* scores, float* out, float softcap = 0.0f) {
  attend_rows(q, head_dim, 1, head_dim, p_begin, n_ctx, k_row, v_row, scale, scores, out, head_dim, softcap);
}

// The first position a query at `position` attends with a sliding window of
// `window` positions (itself and the window - 1 before it, as transformers'
// q - k < window); 0 without one (window 0).
inline int64_t attention_window_begin(int64_t position, int64_t window) {
  return window > 0 && position + 1 > window ? position + 1 - window : 0;
}

}  // namespace nanoserve
