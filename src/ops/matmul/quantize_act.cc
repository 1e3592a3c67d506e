// Activation quantization for the fast matmul (quant_blocks.h): the scalar
// definition, and the AVX-512 version the matmul calls, which must equal it
// bit for bit (tests/ops/matmul/quantize_act_test.cc).

#include <cmath>

#include "ops/matmul/quant_blocks.h"

#if defined(__AVX512F__) && defined(__AVX512VL__)
#include <immintrin.h>
// GCC 12 flags its own AVX-512 intrinsics (the undefined-vector idiom) as
// maybe-uninitialized once inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace nanoserve::quant {

void quantize_row_q8_scalar(const float* x, int64_t K, BlockQ8Act* out) {
  for (int64_t b = 0; b < K / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    float amax = 0.0f;
    for (int j = 0; j < kBlock; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
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
// The same values as the scalar loop, bit for bit, NaN included: max with the
// running max as the second operand skips a NaN like fmax; cvtps rounds to
// nearest even like nearbyint and gives INT_MIN for NaN like the scalar cast;
// vpmovdb keeps the low byte like static_cast<int8_t>. The scalar loop calls
// libm for fmax and nearbyint: ~10 us per decode step's K = 576 row, serial
// before every matmul.
void quantize_row_q8(const float* x, int64_t K, BlockQ8Act* out) {
  for (int64_t b = 0; b < K / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    const __m512 x0 = _mm512_loadu_ps(xb), x1 = _mm512_loadu_ps(xb + 16);
    __m512 m = _mm512_max_ps(_mm512_abs_ps(x0), _mm512_setzero_ps());
    m = _mm512_max_ps(_mm512_abs_ps(x1), m);
    const float amax = _mm512_reduce_max_ps(m);
    const float d = amax / 127.0f;
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
