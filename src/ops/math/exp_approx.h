#pragma once
// exp(x) in float by one fixed sequence of operations, the same bits in its
// plain C++ and its AVX2 (8-lane) forms: x = n ln2 + r with n = nearbyint(x
// log2 e) and |r| <= ln2 / 2 (ln2 in two parts, so n ln2_hi is exact),
// exp(r) = 1 + r + r^2 P(r) with P the degree-5 minimax fit of
// (exp(r) - 1 - r) / r^2 (the coefficients of Cephes' expf), within 2 ulps.
// Exactly 0 below -87.3 (where exp leaves the normal range), +inf from 88.38
// up (2^128), 1 at 0, NaN for NaN. Users compile with -ffp-contract=off
// (CMakeLists.txt) so that no other multiply-add is fused and both forms agree:
// the CPU attention's softmax (attn_exp) and silu_mul.

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace nanoserve {

namespace exp_approx_detail {
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kP0 = 1.9875691500e-4f;
constexpr float kP1 = 1.3981999507e-3f;
constexpr float kP2 = 8.3334519073e-3f;
constexpr float kP3 = 4.1665795894e-2f;
constexpr float kP4 = 1.6666665459e-1f;
constexpr float kP5 = 5.0000001201e-1f;
constexpr float kExpMin = -87.3f;  // below: 0 (exp < 2^-126)
constexpr float kExpMax = 88.5f;   // above: taken as 88.5, whose n = 128 makes 2^n (and exp) +inf
}  // namespace exp_approx_detail

inline float exp_approx(float x) {
  using namespace exp_approx_detail;
  x = kExpMax < x ? kExpMax : x;  // NaN stays NaN
  const float n = std::nearbyint(x * kLog2e);
  float r = std::fma(n, -kLn2Hi, x);
  r = std::fma(n, -kLn2Lo, r);
  float p = std::fma(kP0, r, kP1);
  p = std::fma(p, r, kP2);
  p = std::fma(p, r, kP3);
  p = std::fma(p, r, kP4);
  p = std::fma(p, r, kP5);
  const float r2 = r * r;
  p = std::fma(p, r2, r);
  p = p + 1.0f;
  // 2^n for n in [-126, 128] (128: +inf): the exponent field alone. NaN x keeps p NaN.
  const int32_t ni = x >= kExpMin ? static_cast<int32_t>(n) : 0;
  uint32_t bits = static_cast<uint32_t>(ni + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  const float y = p * two_n;
  return x >= kExpMin || x != x ? y : 0.0f;
}

#if defined(__AVX2__) && defined(__FMA__)
inline __m256 exp_approx8(__m256 x) {
  using namespace exp_approx_detail;
  x = _mm256_min_ps(_mm256_set1_ps(kExpMax), x);  // the second operand (x) where x is NaN
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-kLn2Hi), x);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(-kLn2Lo), r);
  __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(kP0), r, _mm256_set1_ps(kP1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP5));
  const __m256 r2 = _mm256_mul_ps(r, r);
  p = _mm256_fmadd_ps(p, r2, r);
  p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
  const __m256 in_range = _mm256_cmp_ps(x, _mm256_set1_ps(kExpMin), _CMP_GE_OQ);
  const __m256i ni = _mm256_and_si256(_mm256_cvtps_epi32(n), _mm256_castps_si256(in_range));
  const __m256 two_n =
      _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(ni, _mm256_set1_epi32(127)), 23));
  const __m256 y = _mm256_mul_ps(p, two_n);
  // Lanes below the range give 0; NaN lanes stay NaN (p is NaN there).
  const __m256 keep = _mm256_or_ps(in_range, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  return _mm256_and_ps(y, keep);
}
#endif

}  // namespace nanoserve
