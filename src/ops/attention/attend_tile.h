#pragma once
// Query-tiled CPU attention: a tile of query rows that read one K/V history
// (the query heads of one kv head, for one or several tokens of a sequence)
// shares each block of K and V rows, and the three steps run as small SIMD
// kernels: QK^T as register tiles of rows x keys, the softmax vectorised over
// positions, PV as rows x head dims. A decode row is a tile of its query
// heads; a prefill chunk's tile holds several tokens. Either way, each row's
// arithmetic is the definition below, which never looks at the other rows, so
// a row's output bits do not depend on the tile, the key blocking, the thread
// or the batch (batch invariance).
//
// Per row (query q, keys [begin, end), len = end - begin):
//   score_p  = dot(q, k_p) * scale, where dot keeps 8 partial sums (lane j
//              takes dims d = j mod 8, in order of d, each step one fma from
//              +0) combined as ((a0 + a4) + (a1 + a5)) + ((a2 + a6) + (a3 + a7));
//   m        = max over the row's scores;
//   e_p      = attn_exp(score_p - m);
//   sum      = 8 partial sums over p (lane j takes p - begin = j mod 8, in
//              order), combined as the dot's lanes;
//   with a sink logit s (gpt-oss: one a head), m = max(m, s) above and
//              sum += attn_exp(s - m) after the lanes are combined: the sink
//              joins the denominator only, and weighs no value;
//   w_p      = e_p * (1 / sum);
//   out[d]   = sum over p in position order of fma(w_p, v_p[d], acc), from +0.
// Every multiply-add above is one fma and nothing else is fused: the kernels'
// file is compiled without contraction, so the SIMD builds and the plain C++
// one give the same bits.

#include <cmath>
#include <cstdint>

namespace nanoserve {

// exp(x) for the softmax's x <= 0: a degree-7 polynomial on the reduced
// argument, within 2 ulps; exactly 0 below -87.3 (near where exp leaves the
// normal range: a weight below 2^-125 of the largest) and 1 at 0. The same
// bits as the vector form inside the kernels.
float attn_exp(float x);

// The instruction set the kernels were built for: "avx512", "avx2" or "scalar".
const char* attn_tile_isa();

namespace attn {

// Keys per K/V block a tile reads at once (the rows' pointer arrays are this long).
inline constexpr int64_t kKeyBlock = 32;
// Rows one attend_tile call takes at most.
inline constexpr int64_t kMaxTileRows = 64;

// scores of n_rows rows x n_keys keys: s[r][j] = dot(q[r], k[j]) * scale.
void qk_block(const float* const* q, int64_t n_rows, const float* const* k, int64_t n_keys, int64_t head_dim,
              float scale, float* const* s);
// In place: a row of len scores becomes its softmax weights w_p; a finite
// sink joins the denominator (-inf: none, the same bits as without).
void softmax_row(float* s, int64_t len, float sink = -INFINITY);
// out[r][d] = fma(w[r][j], v[j][d], out[r][d]) for j in order, from +0 when
// `first` (else from what out[r] holds). Rows of one call share their keys.
void pv_block(const float* const* w, int64_t n_rows, const float* const* v, int64_t n_keys, int64_t head_dim,
              float* const* out, bool first);

}  // namespace attn

// One query row of a tile: keys [begin, end) of the shared history.
struct AttnRow {
  const float* q;
  float* out;
  int64_t begin, end;
  float sink = -INFINITY;  // the row's sink logit (gpt-oss); -inf: none
};

// out[r] = softmax(scale * q_r K[begin_r, end_r)^T) V[begin_r, end_r) for the
// n_rows (<= attn::kMaxTileRows) rows, by the definition above.
//   k_block(p0, n) / v_block(p0, n): an array of the n rows (head_dim floats
//     each) of positions p0 .. p0 + n - 1 (n <= kKeyBlock), valid until that
//     accessor's next call
//   scores: scratch of n_rows * (max end - min begin) floats
// softcap > 0: each score becomes softcap * tanh(score / softcap) before the
// softmax (Gemma 2's attention soft-cap; std::tanh, the same in every build).
template <typename KBlock, typename VBlock>
inline void attend_tile(const AttnRow* rows, int64_t n_rows, int64_t head_dim, float scale, KBlock&& k_block,
                        VBlock&& v_block, float* scores, float softcap = 0.0f) {
  if (n_rows <= 0) return;
  int64_t p0 = rows[0].begin, p1 = rows[0].end;
  for (int64_t r = 1; r < n_rows; ++r) {
    p0 = rows[r].begin < p0 ? rows[r].begin : p0;
    p1 = rows[r].end > p1 ? rows[r].end : p1;
  }
  const int64_t len = p1 - p0;
  auto row_scores = [&](int64_t r) { return scores + r * len + (rows[r].begin - p0); };
  const float* qp[attn::kMaxTileRows];
  float* sp[attn::kMaxTileRows];
  // Scores, a key block at a time, for the rows whose range meets the block
  // (runs of consecutive rows, so that they share the block's loads).
  for (int64_t kb = p0; kb < p1; kb += attn::kKeyBlock) {
    const int64_t nk = p1 - kb < attn::kKeyBlock ? p1 - kb : attn::kKeyBlock;
    const float* const* k = nullptr;
    int64_t n = 0;
    for (int64_t r = 0; r <= n_rows; ++r) {
      const bool meets = r < n_rows && rows[r].begin < kb + nk && rows[r].end > kb;
      if (meets) {
        qp[n] = rows[r].q;
        sp[n] = scores + r * len + (kb - p0);
        ++n;
      } else if (n > 0) {
        if (k == nullptr) k = k_block(kb, nk);
        attn::qk_block(qp, n, k, nk, head_dim, scale, sp);
        n = 0;
      }
    }
  }
  if (softcap > 0.0f) {
    for (int64_t r = 0; r < n_rows; ++r) {
      float* s = row_scores(r);
      for (int64_t p = 0; p < rows[r].end - rows[r].begin; ++p) s[p] = softcap * std::tanh(s[p] / softcap);
    }
  }
  for (int64_t r = 0; r < n_rows; ++r)
    attn::softmax_row(row_scores(r), rows[r].end - rows[r].begin, rows[r].sink);
  // Values, a key block at a time; rows with the same key range in the block
  // (the query heads of one token) share each V row's loads.
  const float* wp[attn::kMaxTileRows];
  float* op[attn::kMaxTileRows];
  for (int64_t kb = p0; kb < p1; kb += attn::kKeyBlock) {
    const int64_t nk = p1 - kb < attn::kKeyBlock ? p1 - kb : attn::kKeyBlock;
    const float* const* v = nullptr;
    for (int64_t r = 0; r < n_rows;) {
      const int64_t lo = rows[r].begin > kb ? rows[r].begin : kb;
      const int64_t hi = rows[r].end < kb + nk ? rows[r].end : kb + nk;
      int64_t n = 1;
      while (r + n < n_rows && rows[r + n].begin == rows[r].begin && rows[r + n].end == rows[r].end) ++n;
      if (lo < hi) {
        if (v == nullptr) v = v_block(kb, nk);
        for (int64_t i = 0; i < n; ++i) {
          wp[i] = scores + (r + i) * len + (lo - p0);
          op[i] = rows[r + i].out;
        }
        attn::pv_block(wp, n, v + (lo - kb), hi - lo, head_dim, op, lo == rows[r].begin);
      }
      r += n;
    }
  }
}

}  // namespace nanoserve
