// The x8 kernels with AVX-VNNI: VEX vpdpbusd (u8 x s8, 4 per int32 lane, no
// saturation) on 256-bit vectors, 16 registers. Compiled with -mavxvnni and
// without AVX-512 (CMakeLists.txt).

#include "ops/matmul/matmul_cpu_x8.h"

#if defined(__x86_64__) && defined(__AVXVNNI__) && defined(__FMA__) && defined(__F16C__)
#define NS_X8_DOT(acc, w, x) _mm256_dpbusd_avx_epi32((acc), (w), (x))
#define NS_X8_TILE 4
#define NS_X8_ZMM 0
#define NS_X8_SIGNED_Q8 0
#include "ops/matmul/matmul_cpu_x8_kernels.inc"
namespace nanoserve::matmul_cpu::x8 {
GroupFn group_fn_avx_vnni() {
  return &group_entry;
}
}  // namespace nanoserve::matmul_cpu::x8
#else
namespace nanoserve::matmul_cpu::x8 {
GroupFn group_fn_avx_vnni() {
  return nullptr;
}
}  // namespace nanoserve::matmul_cpu::x8
#endif
