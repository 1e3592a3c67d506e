// The x8 kernels with AVX-512 VNNI: EVEX vpdpbusd on 256-bit vectors (VL), with
// the 32 vector registers of AVX-512 holding twice the tokens per tile.
// Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni (CMakeLists.txt).

#include "ops/matmul/matmul_cpu_x8.h"

#if defined(__x86_64__) && defined(__AVX512VNNI__) && defined(__AVX512VL__) && defined(__AVX512BW__)
// GCC 12 flags its own AVX-512 intrinsics (the undefined-vector idiom) as
// maybe-uninitialized once inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define NS_X8_DOT(acc, w, x) _mm256_dpbusd_epi32((acc), (w), (x))
#define NS_X8_TILE 8
#define NS_X8_ZMM 1
#define NS_X8_SIGNED_Q8 0
#include "ops/matmul/matmul_cpu_x8_kernels.inc"
namespace nanoserve::matmul_cpu::x8 {
GroupFn group_fn_avx512_vnni() {
  return &group_entry;
}
}  // namespace nanoserve::matmul_cpu::x8
#else
namespace nanoserve::matmul_cpu::x8 {
GroupFn group_fn_avx512_vnni() {
  return nullptr;
}
}  // namespace nanoserve::matmul_cpu::x8
#endif
