// The AMX tile kernel (matmul_cpu_x8_tiles.inc) over tiles emulated in
// memory: the same packing, tile shapes, operands and epilogue as the AMX
// build, with each tile instruction done by plain loops as the ISA defines
// it. It exists for the tests (path "amx-emulated", never chosen on its
// own), so that the tile kernel's logic is checked bit for bit on machines
// without AMX. Compiled with the AVX-512 VNNI build's flags (CMakeLists.txt).

#include "ops/matmul/matmul_cpu_x8.h"

#if defined(__x86_64__) && defined(__AVX512VNNI__) && defined(__AVX512VL__) && defined(__AVX512BW__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define NS_X8_DOT(acc, w, x) _mm256_dpbusd_epi32((acc), (w), (x))
#define NS_X8_TILE 8
#define NS_X8_ZMM 1
#define NS_X8_SIGNED_Q8 0
#include "ops/matmul/matmul_cpu_x8_kernels.inc"

namespace {

struct EmulatedTiles {
  struct Tile {
    int rows = 0, colsb = 0;  // from the last configure; a tile holds at most 16 x 64 bytes
    alignas(64) uint8_t data[16 * 64];
  };
  static Tile* regs() {
    thread_local Tile t[8];
    return t;
  }
  static void configure(const void* config) {
    const auto* c = static_cast<const uint8_t*>(config);
    for (int i = 0; i < 8; ++i) {
      uint16_t colsb;
      std::memcpy(&colsb, c + 16 + 2 * i, 2);
      regs()[i].rows = c[48 + i];
      regs()[i].colsb = colsb;
    }
  }
  static void release() {
    for (int i = 0; i < 8; ++i) regs()[i] = Tile{};
  }
  template <int t>
  static void zero() {
    std::memset(regs()[t].data, 0, sizeof(Tile::data));
  }
  template <int t>
  static void load(const void* base, int64_t stride) {
    Tile& r = regs()[t];
    for (int i = 0; i < r.rows; ++i) std::memcpy(r.data + 64 * i, static_cast<const uint8_t*>(base) + i * stride, r.colsb);
  }
  template <int t>
  static void store(void* base, int64_t stride) {
    const Tile& r = regs()[t];
    for (int i = 0; i < r.rows; ++i) std::memcpy(static_cast<uint8_t*>(base) + i * stride, r.data + 64 * i, r.colsb);
  }
  // tdpbsud: c[m][n] += sum over k < a.colsb of s8 a[m][k] * u8 b[k / 4][4 n + k % 4].
  template <int c, int a, int b>
  static void dot() {
    Tile &tc = regs()[c], &ta = regs()[a], &tb = regs()[b];
    for (int m = 0; m < tc.rows; ++m) {
      for (int n = 0; n < tc.colsb / 4; ++n) {
        int32_t acc;
        std::memcpy(&acc, tc.data + 64 * m + 4 * n, 4);
        for (int k = 0; k < ta.colsb; ++k) {
          acc += static_cast<int8_t>(ta.data[64 * m + k]) * static_cast<int32_t>(tb.data[64 * (k / 4) + 4 * n + k % 4]);
        }
        std::memcpy(tc.data + 64 * m + 4 * n, &acc, 4);
      }
    }
  }
};

}  // namespace

#include "ops/matmul/matmul_cpu_x8_tiles.inc"

namespace nanoserve::matmul_cpu::x8 {
GroupFn group_fn_amx_emulated() {
  return &tiles_entry<EmulatedTiles>;
}
}  // namespace nanoserve::matmul_cpu::x8
#else
namespace nanoserve::matmul_cpu::x8 {
GroupFn group_fn_amx_emulated() {
  return nullptr;
}
}  // namespace nanoserve::matmul_cpu::x8
#endif
