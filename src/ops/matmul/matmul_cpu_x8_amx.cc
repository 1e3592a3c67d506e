// The x8 kernels on AMX-INT8 tiles (matmul_cpu_x8_tiles.inc), with the
// AVX-512 VNNI build's vectors for what the tiles do not take. Compiled with
// -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mamx-tile -mamx-int8
// (CMakeLists.txt); run only where the CPU has AMX-INT8 and the kernel gave
// this process the tile state (amx_tiles_permitted).

#include "ops/matmul/matmul_cpu_x8.h"

#if defined(__x86_64__) && defined(__AVX512VNNI__) && defined(__AVX512VL__) && defined(__AVX512BW__) && \
    defined(__AMX_TILE__) && defined(__AMX_INT8__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define NS_X8_DOT(acc, w, x) _mm256_dpbusd_epi32((acc), (w), (x))
#define NS_X8_TILE 8
#define NS_X8_ZMM 1
#define NS_X8_SIGNED_Q8 0
#include "ops/matmul/matmul_cpu_x8_kernels.inc"

namespace {

// The tile instructions name their registers in the opcode: each use spells
// its number out (the intrinsics are macros over inline assembly).
struct AmxTiles {
  static void configure(const void* config) { _tile_loadconfig(config); }
  static void release() { _tile_release(); }
  template <int t>
  static void zero() {
    if constexpr (t == 0) _tile_zero(0);
    if constexpr (t == 3) _tile_zero(3);
  }
  template <int t>
  static void load(const void* base, int64_t stride) {
    if constexpr (t == 1) _tile_loadd(1, base, stride);
    if constexpr (t == 2) _tile_loadd(2, base, stride);
    if constexpr (t == 4) _tile_loadd(4, base, stride);
    if constexpr (t == 5) _tile_loadd(5, base, stride);
  }
  template <int t>
  static void store(void* base, int64_t stride) {
    if constexpr (t == 0) _tile_stored(0, base, stride);
    if constexpr (t == 3) _tile_stored(3, base, stride);
  }
  template <int c, int a, int b>
  static void dot() {
    static_assert((c == 0 && a == 1 && b == 2) || (c == 3 && a == 4 && b == 5));
    if constexpr (c == 0) _tile_dpbsud(0, 1, 2);
    if constexpr (c == 3) _tile_dpbsud(3, 4, 5);
  }
};

}  // namespace

#include "ops/matmul/matmul_cpu_x8_tiles.inc"

namespace nanoserve::matmul_cpu::x8 {
GroupFn group_fn_amx() {
  return &tiles_entry<AmxTiles>;
}
}  // namespace nanoserve::matmul_cpu::x8
#else
namespace nanoserve::matmul_cpu::x8 {
GroupFn group_fn_amx() {
  return nullptr;
}
}  // namespace nanoserve::matmul_cpu::x8
#endif
