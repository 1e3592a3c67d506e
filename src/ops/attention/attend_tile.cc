// The tile kernels of attend_tile.h. This file is compiled with
// -ffp-contract=off (CMakeLists.txt): every fma below is written out, and no
// multiply and add are fused behind our back, so the AVX2 build (also used,
// with its 32 registers, under AVX-512) and the plain C++ one compute the
// definition in attend_tile.h to the same bits.

#include "ops/attention/attend_tile.h"
#include "ops/math/exp_approx.h"

#include <cmath>
#include <cstring>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define NS_ATTN_AVX2 1
#endif

namespace nanoserve {

namespace {

// The 8 lanes of a dot or a sum, combined in the order of the definition.
inline float combine8(const float* a) {
  return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

#ifdef NS_ATTN_AVX2

// Lane i of the result: the definition's combination of the 8 lanes of a[i].
inline __m256 reduce8(const __m256* a) {
  __m256 s[4];
  for (int i = 0; i < 4; ++i) {
    const __m256 lo = _mm256_permute2f128_ps(a[2 * i], a[2 * i + 1], 0x20);
    const __m256 hi = _mm256_permute2f128_ps(a[2 * i], a[2 * i + 1], 0x31);
    s[i] = _mm256_add_ps(lo, hi);  // [a_2i: j + (j+4), j < 4 | a_2i+1: ...]
  }
  // hadd pairs neighbouring lanes: (0+4) + (1+5) and (2+6) + (3+7) per input.
  const __m256 h0 = _mm256_hadd_ps(s[0], s[1]);  // a0 a0 a2 a2 a1 a1 a3 a3
  const __m256 h1 = _mm256_hadd_ps(s[2], s[3]);  // a4 a4 a6 a6 a5 a5 a7 a7
  const __m256 f = _mm256_hadd_ps(h0, h1);       // a0 a2 a4 a6 a1 a3 a5 a7
  return _mm256_permutevar8x32_ps(f, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

inline float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

inline __m256i tail_mask(int64_t n) {  // lanes < n set
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// R rows x K keys (R * K a multiple of 8) of scores; keys beyond n_keys are
// computed on a repeated row and not stored.
template <int R, int K>
inline void qk_tile(const float* const* q, const float* const* k, int64_t n_keys, int64_t hd, float scale,
                    float* const* s) {
  static_assert(R * K % 8 == 0);
  const float* kr[K];
#pragma GCC unroll 32
  for (int c = 0; c < K; ++c) kr[c] = k[c < n_keys ? c : n_keys - 1];
  __m256 acc[R * K];
#pragma GCC unroll 32
  for (int i = 0; i < R * K; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t d = 0; d < hd; d += 8) {
    __m256 kv[K];
#pragma GCC unroll 32
    for (int c = 0; c < K; ++c) kv[c] = _mm256_loadu_ps(kr[c] + d);
#pragma GCC unroll 32
    for (int r = 0; r < R; ++r) {
      const __m256 qv = _mm256_loadu_ps(q[r] + d);
#pragma GCC unroll 32
      for (int c = 0; c < K; ++c) acc[r * K + c] = _mm256_fmadd_ps(qv, kv[c], acc[r * K + c]);
    }
  }
  alignas(32) float out[R * K];
#pragma GCC unroll 32
  for (int i = 0; i < R * K; i += 8) {
    _mm256_store_ps(out + i, _mm256_mul_ps(reduce8(acc + i), _mm256_set1_ps(scale)));
  }
  const int kn = n_keys < K ? static_cast<int>(n_keys) : K;
#pragma GCC unroll 32
  for (int r = 0; r < R; ++r) std::memcpy(s[r], out + r * K, sizeof(float) * kn);
}

// R rows x 8 * DV head dims, accumulated over n_keys shared V rows.
template <int R, int DV>
inline void pv_tile(const float* const* w, const float* const* v, int64_t n_keys, int64_t d0,
                    float* const* out, bool first) {
  __m256 acc[R][DV];
#pragma GCC unroll 32
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 32
    for (int j = 0; j < DV; ++j)
      acc[r][j] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(out[r] + d0 + 8 * j);
  }
  // Registers: R x DV accumulators, R weights and one V vector at a time.
  for (int64_t p = 0; p < n_keys; ++p) {
    __m256 wr[R];
#pragma GCC unroll 32
    for (int r = 0; r < R; ++r) wr[r] = _mm256_broadcast_ss(w[r] + p);
    const float* vp = v[p] + d0;
#pragma GCC unroll 32
    for (int j = 0; j < DV; ++j) {
      const __m256 vv = _mm256_loadu_ps(vp + 8 * j);
#pragma GCC unroll 32
      for (int r = 0; r < R; ++r) acc[r][j] = _mm256_fmadd_ps(wr[r], vv, acc[r][j]);
    }
  }
#pragma GCC unroll 32
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 32
    for (int j = 0; j < DV; ++j) _mm256_storeu_ps(out[r] + d0 + 8 * j, acc[r][j]);
  }
}

#if defined(__AVX512VL__)
constexpr int kQkRows = 4;  // 32 vector registers: a 4 x 4 tile and its operands
constexpr int kPvDims = 8;  // 3 rows x 64 dims of accumulators
#else
constexpr int kQkRows = 2;  // 16 registers: 2 x 4
constexpr int kPvDims = 4;  // 3 rows x 32 dims
#endif
constexpr int kPvRows = 3;

template <int R>
void pv_rows(const float* const* w, const float* const* v, int64_t n_keys, int64_t hd, float* const* out,
             bool first) {
  int64_t d0 = 0;
  for (; d0 + 8 * kPvDims <= hd; d0 += 8 * kPvDims) pv_tile<R, kPvDims>(w, v, n_keys, d0, out, first);
  for (; d0 < hd; d0 += 8) pv_tile<R, 1>(w, v, n_keys, d0, out, first);
}

#endif  // NS_ATTN_AVX2

// The definition in plain C++: any head_dim, and every machine without AVX2.
void qk_scalar(const float* const* q, int64_t n_rows, const float* const* k, int64_t n_keys, int64_t hd,
               float scale, float* const* s) {
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t c = 0; c < n_keys; ++c) {
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int64_t d = 0; d < hd; ++d) acc[d % 8] = std::fma(q[r][d], k[c][d], acc[d % 8]);
      s[r][c] = combine8(acc) * scale;
    }
  }
}

void pv_scalar(const float* const* w, int64_t n_rows, const float* const* v, int64_t n_keys, int64_t hd,
               float* const* out, bool first) {
  for (int64_t r = 0; r < n_rows; ++r) {
    if (first) std::memset(out[r], 0, sizeof(float) * hd);
    for (int64_t p = 0; p < n_keys; ++p) {
      for (int64_t d = 0; d < hd; ++d) out[r][d] = std::fma(w[r][p], v[p][d], out[r][d]);
    }
  }
}

}  // namespace

float attn_exp(float x) {
  return exp_approx(x);
}

const char* attn_tile_isa() {
#if defined(NS_ATTN_AVX2) && defined(__AVX512VL__)
  return "avx512";
#elif defined(NS_ATTN_AVX2)
  return "avx2";
#else
  return "scalar";
#endif
}

namespace attn {

void qk_block(const float* const* q, int64_t n_rows, const float* const* k, int64_t n_keys, int64_t hd,
              float scale, float* const* s) {
#ifdef NS_ATTN_AVX2
  if (hd % 8 == 0) {
    float* sr[kQkRows];
    for (int64_t c = 0; c < n_keys; c += 4) {
      int64_t r = 0;
      for (; r + kQkRows <= n_rows; r += kQkRows) {
        for (int i = 0; i < kQkRows; ++i) sr[i] = s[r + i] + c;
        qk_tile<kQkRows, 4>(q + r, k + c, n_keys - c, hd, scale, sr);
      }
      for (; r + 2 <= n_rows; r += 2) {
        for (int i = 0; i < 2; ++i) sr[i] = s[r + i] + c;
        qk_tile<2, 4>(q + r, k + c, n_keys - c, hd, scale, sr);
      }
      if (r < n_rows) {  // one row: 8 keys at a time, so this loop steps twice
        if (c % 8 == 0) {
          sr[0] = s[r] + c;
          qk_tile<1, 8>(q + r, k + c, n_keys - c, hd, scale, sr);
        }
      }
    }
    return;
  }
#endif
  qk_scalar(q, n_rows, k, n_keys, hd, scale, s);
}

void softmax_row(float* s, int64_t len, float sink) {
#ifdef NS_ATTN_AVX2
  const int64_t n8 = len & ~int64_t{7};
  const __m256i tail = tail_mask(len - n8);
  __m256 mv = _mm256_set1_ps(-INFINITY);
  for (int64_t i = 0; i < n8; i += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(s + i));
  if (n8 < len) {
    const __m256 x = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_maskload_ps(s + n8, tail),
                                      _mm256_castsi256_ps(tail));
    mv = _mm256_max_ps(mv, x);
  }
  float m_row = hmax8(mv);
  if (sink > m_row) m_row = sink;
  const __m256 m = _mm256_set1_ps(m_row);
  __m256 sum = _mm256_setzero_ps();
  for (int64_t i = 0; i < n8; i += 8) {
    const __m256 e = exp_approx8(_mm256_sub_ps(_mm256_loadu_ps(s + i), m));
    _mm256_storeu_ps(s + i, e);
    sum = _mm256_add_ps(sum, e);
  }
  if (n8 < len) {
    const __m256 e =
        _mm256_and_ps(exp_approx8(_mm256_sub_ps(_mm256_maskload_ps(s + n8, tail), m)), _mm256_castsi256_ps(tail));
    _mm256_maskstore_ps(s + n8, tail, e);
    sum = _mm256_add_ps(sum, e);  // +0 in the lanes past the row
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = combine8(lanes);
  if (sink > -INFINITY) total += exp_approx(sink - m_row);
  const __m256 inv = _mm256_set1_ps(1.0f / total);
  for (int64_t i = 0; i < n8; i += 8) _mm256_storeu_ps(s + i, _mm256_mul_ps(_mm256_loadu_ps(s + i), inv));
  if (n8 < len) _mm256_maskstore_ps(s + n8, tail, _mm256_mul_ps(_mm256_maskload_ps(s + n8, tail), inv));
#else
  float m = -INFINITY;
  for (int64_t p = 0; p < len; ++p) m = s[p] > m ? s[p] : m;
  if (sink > m) m = sink;
  float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t p = 0; p < len; ++p) {
    s[p] = exp_approx(s[p] - m);
    lanes[p % 8] = lanes[p % 8] + s[p];
  }
  float total = combine8(lanes);
  if (sink > -INFINITY) total += exp_approx(sink - m);
  const float inv = 1.0f / total;
  for (int64_t p = 0; p < len; ++p) s[p] = s[p] * inv;
#endif
}

void pv_block(const float* const* w, int64_t n_rows, const float* const* v, int64_t n_keys, int64_t hd,
              float* const* out, bool first) {
#ifdef NS_ATTN_AVX2
  if (hd % 8 == 0) {
    int64_t r = 0;
    for (; r + kPvRows <= n_rows; r += kPvRows) pv_rows<kPvRows>(w + r, v, n_keys, hd, out + r, first);
    if (n_rows - r == 2) pv_rows<2>(w + r, v, n_keys, hd, out + r, first);
    if (n_rows - r == 1) pv_rows<1>(w + r, v, n_keys, hd, out + r, first);
    return;
  }
#endif
  pv_scalar(w, n_rows, v, n_keys, hd, out, first);
}

}  // namespace attn

}  // namespace nanoserve
