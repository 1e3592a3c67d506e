// Activation quantization for the fast matmul (quant_blocks.h): the scalar
// definitions, and the SIMD versions the matmul calls (AVX-512 for the blocks
// of 32, AVX2 for the K-quant blocks of 256), which must equal them bit for bit
// (tests/ops/matmul/quantize_act_test.cc).
//
// Every input has a defined result (no float-to-int conversion ever sees a
// value outside int's range, which is undefined behaviour in C++):
//   - a block holding a NaN or an infinity gets d = s = NaN and q = 0, so the
//     matmul output of every row that reads it is NaN, as a float matmul would
//     propagate a NaN (an infinity, which a float matmul may turn into +-inf,
//     is reported as NaN too: the row is unusable either way);
//   - a block whose scale max|x| / 127 is below FLT_MIN (max|x| < ~1.5e-36),
//     where 1 / d could overflow to infinity, gets d = s = 0 and q = 0: its
//     values are too small to move any output a float matmul computes.

#include <cmath>
#include <cstring>
#include <limits>

#include "ops/matmul/quant_blocks.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif
#if defined(__AVX512F__) && defined(__AVX512VL__)
// GCC 12 flags its own AVX-512 intrinsics (the undefined-vector idiom) as
// maybe-uninitialized once inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace nanoserve::quant {

namespace {

constexpr float kFloatMax = std::numeric_limits<float>::max();
constexpr float kMinScale = std::numeric_limits<float>::min();  // smallest normal float

void set_non_finite(BlockQ8Act& out) {
  out.d = std::numeric_limits<float>::quiet_NaN();
  out.s = out.d;
  std::memset(out.qs, 0, sizeof out.qs);
}

void set_non_finite(BlockQ8KAct& out) {
  out.d = std::numeric_limits<float>::quiet_NaN();
  std::memset(out.qs, 0, sizeof out.qs);
  std::memset(out.bsums, 0, sizeof out.bsums);
}

// d from max |x| of a block; 0 below FLT_MIN, where 1 / d could overflow.
float scale_of(float amax) {
  const float d = amax / 127.0f;
  return d < kMinScale ? 0.0f : d;
}

// The largest |x| of n values into amax; false (amax unset) when one is NaN or +-inf.
bool abs_max_if_finite(const float* x, int n, float& amax) {
  float m = 0.0f;
  bool finite = true;
  for (int j = 0; j < n; ++j) {
    const float a = std::fabs(x[j]);
    finite = finite && a <= kFloatMax;  // false for NaN and +-inf
    m = std::fmax(m, a);
  }
  amax = m;
  return finite;
}

void set_bsums(BlockQ8KAct& out) {
  for (int i = 0; i < kSuperBlock / 16; ++i) {
    int sum = 0;
    for (int j = 0; j < 16; ++j) sum += out.qs[16 * i + j];
    out.bsums[i] = static_cast<int16_t>(sum);  // |sum| <= 16 * 127
  }
}

}  // namespace

void quantize_row_q8k_scalar(const float* x, int64_t K, BlockQ8KAct* out) {
  for (int64_t b = 0; b < K / kSuperBlock; ++b) {
    const float* xb = x + b * kSuperBlock;
    float amax = 0.0f;
    if (!abs_max_if_finite(xb, kSuperBlock, amax)) {
      set_non_finite(out[b]);
      continue;
    }
    const float d = scale_of(amax);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < kSuperBlock; ++j) out[b].qs[j] = static_cast<int8_t>(std::nearbyint(xb[j] * id));
    out[b].d = d;
    set_bsums(out[b]);
  }
}

#if defined(__AVX2__)
// The same values as the scalar loop, bit for bit: the non-finite test is an
// unordered compare (true for NaN) against FLT_MAX; the max of finite values
// does not depend on the order; cvtps rounds to nearest even like nearbyint;
// the saturating packs keep every value, all within [-127, 127].
void quantize_row_q8k(const float* x, int64_t K, BlockQ8KAct* out) {
  const __m256 vmax = _mm256_set1_ps(kFloatMax);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t b = 0; b < K / kSuperBlock; ++b) {
    const float* xb = x + b * kSuperBlock;
    __m256 amax = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    for (int j = 0; j < kSuperBlock; j += 8) {
      const __m256 a = _mm256_and_ps(_mm256_loadu_ps(xb + j), abs_mask);
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, vmax, _CMP_NLE_UQ));
      amax = _mm256_max_ps(amax, a);
    }
    if (_mm256_movemask_ps(bad) != 0) {
      set_non_finite(out[b]);
      continue;
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = scale_of(_mm_cvtss_f32(m));
    const __m256 vid = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    for (int j = 0; j < kSuperBlock; j += 32) {
      __m256i q[4];
      for (int i = 0; i < 4; ++i)
        q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + j + 8 * i), vid));
      // packs work per 128-bit lane: bytes come out as 4-value groups
      // (q0 q1 q2 q3 of lane 0, then of lane 1); the permute restores the order.
      const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
      const __m256i ordered = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].qs + j), ordered);
    }
    out[b].d = d;
    set_bsums(out[b]);
  }
}
#else
void quantize_row_q8k(const float* x, int64_t K, BlockQ8KAct* out) {
  quantize_row_q8k_scalar(x, K, out);
}
#endif

void quantize_row_q8_scalar(const float* x, int64_t K, BlockQ8Act* out) {
  for (int64_t b = 0; b < K / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    float amax = 0.0f;
    if (!abs_max_if_finite(xb, kBlock, amax)) {
      set_non_finite(out[b]);
      continue;
    }
    float d = amax / 127.0f;
    if (d < kMinScale) d = 0.0f;
    // |x * id| <= 127 (to within rounding), so the conversion below is defined.
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int j = 0; j < kBlock; ++j) {
      const int q = static_cast<int>(std::nearbyint(xb[j] * id));
      out[b].qs[j] = static_cast<int8_t>(q);
      sum += q;
    }
    out[b].d = d;
    out[b].s = d * static_cast<float>(sum);
  }
}

#if defined(__AVX512F__) && defined(__AVX512VL__)
// The same values as the scalar loop, bit for bit: the non-finite test is an
// unordered compare (true for NaN) against FLT_MAX; cvtps rounds to nearest
// even like nearbyint; vpmovdb keeps the low byte like static_cast<int8_t>.
// The scalar loop calls libm for fmax and nearbyint: ~10 us per decode step's
// K = 576 row, serial before every matmul.
void quantize_row_q8(const float* x, int64_t K, BlockQ8Act* out) {
  const __m512 vmax = _mm512_set1_ps(kFloatMax);
  for (int64_t b = 0; b < K / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    const __m512 x0 = _mm512_loadu_ps(xb), x1 = _mm512_loadu_ps(xb + 16);
    const __m512 a0 = _mm512_abs_ps(x0), a1 = _mm512_abs_ps(x1);
    const __mmask16 non_finite =
        _mm512_cmp_ps_mask(a0, vmax, _CMP_NLE_UQ) | _mm512_cmp_ps_mask(a1, vmax, _CMP_NLE_UQ);
    if (non_finite != 0) {
      set_non_finite(out[b]);
      continue;
    }
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
    float d = amax / 127.0f;
    if (d < kMinScale) d = 0.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const __m512 vid = _mm512_set1_ps(id);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, vid));
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, vid));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].qs), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].qs + 16), _mm512_cvtepi32_epi8(q1));
    const int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    out[b].d = d;
    out[b].s = d * static_cast<float>(sum);
  }
}
#else
void quantize_row_q8(const float* x, int64_t K, BlockQ8Act* out) {
  quantize_row_q8_scalar(x, K, out);
}
#endif

}  // namespace nanoserve::quant
