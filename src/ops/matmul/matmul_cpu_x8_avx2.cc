// The x8 kernels with AVX2 alone: maddubs (u8 x s8 pairs into int16) and madd
// against ones (into int32), exact for the quants here (|pair| <= 2 x 128 x 127).
// Compiled with -mavx2 -mfma -mf16c and without AVX-512 (CMakeLists.txt).

#include "ops/matmul/matmul_cpu_x8.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define NS_X8_DOT(acc, w, x) \
  _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((w), (x)), _mm256_set1_epi16(1)))
#define NS_X8_TILE 4
#define NS_X8_ZMM 0
#define NS_X8_SIGNED_Q8 1
#include "ops/matmul/matmul_cpu_x8_kernels.inc"
namespace nanoserve::matmul_cpu::x8 {
GroupFn group_fn_avx2() {
  return &group_entry;
}
}  // namespace nanoserve::matmul_cpu::x8
#else
namespace nanoserve::matmul_cpu::x8 {
GroupFn group_fn_avx2() {
  return nullptr;
}
}  // namespace nanoserve::matmul_cpu::x8
#endif
