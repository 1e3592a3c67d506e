// Activation quantization for the fast matmul (quant_blocks.h): the scalar
// definition, and the AVX-512 version the matmul calls, which must equal it
// bit for bit (tests/ops/matmul/quantize_act_test.cc).
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

#if defined(__AVX512F__) && defined(__AVX512VL__)
#include <immintrin.h>
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

}  // namespace

void quantize_row_q8_scalar(const float* x, int64_t K, BlockQ8Act* out) {
  for (int64_t b = 0; b < K / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    float amax = 0.0f;
    bool finite = true;
    for (int j = 0; j < kBlock; ++j) {
      const float a = std::fabs(xb[j]);
      finite = finite && a <= kFloatMax;  // false for NaN and +-inf
      amax = std::fmax(amax, a);
    }
    if (!finite) {
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
