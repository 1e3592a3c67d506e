// Single-token (T = 1) rows of the Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 weights: the stored
// blocks read directly, kGemvRows rows at a time with GemvPrefetch
// (matmul_cpu_internal.h). Split from matmul_cpu.cc, whose tiles these must
// equal bit for bit (the reduction order written at the top of that file).

#include <cstring>
#include <type_traits>

#include "ops/matmul/matmul_cpu_internal.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace nanoserve::matmul_cpu {

#if defined(__AVX2__)
namespace {

using quant::BlockQ4_0;
using quant::BlockQ4_1;
using quant::BlockQ5_0;
using quant::BlockQ5_1;
using quant::BlockQ8_0;

// Single-token rows (T = 1, every decode step of one sequence). With one token
// there is nothing to amortise a decoded row over, so these read the stored
// blocks directly; each output still sees exactly the per-block float
// operations of the tiles above, in the same order (scale d_w * d_x, one fmadd
// into 8 lanes, min term fma(m, s, sum) into its own sum, hsum8 + min sum), and
// the same exact integer block dots, so T = 1 equals a token of any batch.
// Rows go kGemvRows at a time with GemvPrefetch (matmul_cpu_internal.h).

// Q4_0 / Q4_1: per block one 32-bit load of (d, m) as f16, a multiply by the
// activation's (d, s) for d_w * d_x and an fma of the same pair for the min sum.
template <int R, typename Block>
void gemv_q4(const uint8_t* base, int64_t row_bytes, const BlockQ8Act* xa, int64_t nb, float* y, int64_t o0,
             const uint8_t* limit) {
  const GemvPrefetch pf(base, row_bytes, o0, R, nb, limit);
  __m256 acc[R];
  __m128 macc[R];  // lane 1: the min-term sum (lane 0 collects nothing used)
  for (int i = 0; i < R; ++i) {
    acc[i] = _mm256_setzero_ps();
    macc[i] = _mm_setzero_ps();
  }
  // A 4-bit block's 16 bytes in both halves, shifted right by 0 (low half)
  // or 4 (high half), then masked: bytes 0..15 the low nibbles, 16..31 the high.
  const __m256i shifts = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  constexpr bool kQ5 = std::is_same_v<Block, BlockQ5_0> || std::is_same_v<Block, BlockQ5_1>;
  constexpr bool kWithMin = std::is_same_v<Block, BlockQ4_1> || std::is_same_v<Block, BlockQ5_1>;
  [[maybe_unused]] const __m256i qh_bytes =
      _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
  [[maybe_unused]] const __m256i qh_bits = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  [[maybe_unused]] const __m256i bit4 = _mm256_set1_epi8(0x10);
  const Block* rows[R];
  for (int i = 0; i < R; ++i) rows[i] = reinterpret_cast<const Block*>(base + (o0 + i) * row_bytes);
  for (int64_t b = 0; b < nb; ++b) {
    pf.at(b);
    const BlockQ8Act& a = xa[b];
    const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs));
    const __m128 xds = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(&a.d)));  // (d_x, s, 0, 0)
    for (int i = 0; i < R; ++i) {
      const Block& w = rows[i][b];
      __m128 dm;  // (d_w, m, ., .)
      if constexpr (kWithMin) {
        uint32_t dm16;
        std::memcpy(&dm16, &w.d, 4);
        dm = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dm16)));
      } else {
        // m = -8 d (Q5_0: -16 d), as the decoded rows compute it (exact).
        const __m128 d = _mm_cvtph_ps(_mm_set1_epi16(static_cast<int16_t>(w.d)));
        dm = _mm_mul_ps(d, _mm_setr_ps(1.0f, kQ5 ? -16.0f : -8.0f, 0.0f, 0.0f));
      }
      const __m128 prod = _mm_mul_ps(dm, xds);   // (d_w * d_x, ., ., .)
      macc[i] = _mm_fmadd_ps(dm, xds, macc[i]);  // lane 1: m * s + macc, as the tiles
      const __m256i raw =
          _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.qs)));
      __m256i wq = _mm256_and_si256(_mm256_srlv_epi32(raw, shifts), low4);
      if constexpr (kQ5) {
        // Byte j of the broadcast qh picks qh's byte j / 8; its bit j % 8 set gives 0x10.
        uint32_t qh;
        std::memcpy(&qh, w.qh, 4);
        const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)), qh_bytes);
        wq = _mm256_or_si256(
            wq, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bytes, qh_bits), qh_bits), bit4));
      }
      acc[i] = _mm256_fmadd_ps(_mm256_broadcastss_ps(prod), _mm256_cvtepi32_ps(dot_u8s8(wq, xq)), acc[i]);
    }
  }
  for (int i = 0; i < R; ++i) {
    y[o0 + i] = hsum8(acc[i]) + _mm_cvtss_f32(_mm_movehdup_ps(macc[i]));
  }
}

// Q8_0. With VNNI the weights go in as u8 (w + 128) and the activations as s8,
// starting each block's dot from -128 * (sum of each 4 activations), built once
// per block for all R rows: (w + 128) . x - 128 * sum(x) = w . x exactly.
// Without VNNI, |w| x sign(x, w) as in the tiles (maddubs would saturate on w + 128).
template <int R>
void gemv_q8_0(const uint8_t* base, int64_t row_bytes, const BlockQ8Act* xa, int64_t nb, float* y, int64_t o0,
               const uint8_t* limit) {
  const GemvPrefetch pf(base, row_bytes, o0, R, nb, limit);
  __m256 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm256_setzero_ps();
  const BlockQ8_0* rows[R];
  for (int i = 0; i < R; ++i) rows[i] = reinterpret_cast<const BlockQ8_0*>(base + (o0 + i) * row_bytes);
  [[maybe_unused]] const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < nb; ++b) {
    pf.at(b);
    const BlockQ8Act& a = xa[b];
    const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs));
    const __m128 xd = _mm_set_ss(a.d);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    const __m256i corr =
        _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_dpbusd_epi32(_mm256_setzero_si256(), bias, xq));
#endif
    for (int i = 0; i < R; ++i) {
      const BlockQ8_0& w = rows[i][b];
      const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs));
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
      const __m256i p = _mm256_dpbusd_epi32(corr, _mm256_xor_si256(wq, bias), xq);
#else
      const __m256i p = dot_u8s8(_mm256_abs_epi8(wq), _mm256_sign_epi8(xq, wq));
#endif
      const __m128 scale = _mm_mul_ss(_mm_cvtph_ps(_mm_cvtsi32_si128(w.d)), xd);
      acc[i] = _mm256_fmadd_ps(_mm256_broadcastss_ps(scale), _mm256_cvtepi32_ps(p), acc[i]);
    }
  }
  for (int i = 0; i < R; ++i) y[o0 + i] = hsum8(acc[i]);
}

// Rows [o_begin, o_end) of a quantized w for one token, kGemvRows at a time.
template <int R>
void gemv_group(DType dt, const uint8_t* base, int64_t row_bytes, const BlockQ8Act* xa, int64_t nb, float* y,
                int64_t o0, const uint8_t* limit) {
  switch (dt) {
    case DType::kQ4_1: gemv_q4<R, BlockQ4_1>(base, row_bytes, xa, nb, y, o0, limit); break;
    case DType::kQ4_0: gemv_q4<R, BlockQ4_0>(base, row_bytes, xa, nb, y, o0, limit); break;
    case DType::kQ5_1: gemv_q4<R, BlockQ5_1>(base, row_bytes, xa, nb, y, o0, limit); break;
    case DType::kQ5_0: gemv_q4<R, BlockQ5_0>(base, row_bytes, xa, nb, y, o0, limit); break;
    default: gemv_q8_0<R>(base, row_bytes, xa, nb, y, o0, limit); break;
  }
}

}  // namespace

void gemv_rows(DType dt, const uint8_t* base, int64_t row_bytes, const BlockQ8Act* xa, int64_t nb, float* y,
               int64_t o_begin, int64_t o_end) {
  const uint8_t* limit = base + o_end * row_bytes;
  // The groups before the first that a block step prefetches: ask for them
  // now, while the first group's demand loads start.
  const auto first = reinterpret_cast<uintptr_t>(base + (o_begin + kGemvRows) * row_bytes);
  GemvPrefetch::range(first, static_cast<uintptr_t>((kGemvPrefetchGroups - 1) * kGemvRows * row_bytes),
                      reinterpret_cast<uintptr_t>(limit));
  int64_t o = o_begin;
  for (; o + kGemvRows <= o_end; o += kGemvRows)
    gemv_group<kGemvRows>(dt, base, row_bytes, xa, nb, y, o, limit);
  for (; o < o_end; ++o) gemv_group<1>(dt, base, row_bytes, xa, nb, y, o, limit);
}

#endif

}  // namespace nanoserve::matmul_cpu
