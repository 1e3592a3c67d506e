#include "core/cpu_features.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace nanoserve {

namespace {

#if defined(__x86_64__)
unsigned long long read_xcr0() {
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27), fma = c & (1u << 12), f16c = c & (1u << 29);
  if (!osxsave) return f;
  const unsigned long long xcr0 = read_xcr0();
  const bool ymm_state = (xcr0 & 0x6) == 0x6;           // SSE + AVX state
  const bool zmm_state = (xcr0 & 0xe6) == 0xe6;         // + opmask, ZMM_Hi256, Hi16_ZMM
  const bool tile_state = (xcr0 & 0x60000) == 0x60000;  // XTILECFG + XTILEDATA
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  const unsigned b7 = b, c7 = c, d7 = d;
  f.avx2 = ymm_state && (b7 & (1u << 5)) && fma && f16c;
  f.avx512 = f.avx2 && zmm_state && (b7 & (1u << 16)) && (b7 & (1u << 30)) && (b7 & (1u << 31));
  f.avx512_vnni = f.avx512 && (c7 & (1u << 11));
  f.amx_int8 = tile_state && (d7 & (1u << 24)) && (d7 & (1u << 25));
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx_vnni = f.avx2 && (a & (1u << 4));
  return f;
}
#else
CpuFeatures detect() {
  return {};
}
#endif

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

bool amx_tiles_permitted() {
  static const bool ok = [] {
    if (!cpu_features().amx_int8) return false;
#if defined(__x86_64__) && defined(__linux__)
    constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  return ok;
}

}  // namespace nanoserve
