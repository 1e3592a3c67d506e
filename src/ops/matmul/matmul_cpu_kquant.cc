// K-quant matmul kernels: Q2_K, Q3_K, Q4_K, Q5_K and Q6_K weights read in
// their stored super-blocks of 256 values, dotted against activations rounded
// per 256 values (BlockQ8KAct: one f32 scale d_x, int8 q[256], and the sums of
// q per 16 values).
//
// With one activation scale per super-block, the whole super-block's dot is
// one integer times two float scales:
//   Q4_K, Q5_K (8 sub-blocks of 32, w = d sc q - dmin mn):
//     w . x = d d_x sum_j sc_j (q . q_x)_j - dmin d_x sum_j mn_j (sum q_x)_j
//   Q2_K (16 sub-blocks of 16, the same form, 4-bit sc and mn);
//   Q3_K, Q6_K (16 sub-blocks of 16, w = d sc (u - o), u unsigned, o = 4 or 32):
//     w . x = d d_x (sum_i sc_i (u . q_x)_i - o sum_i sc_i (sum q_x)_i).
// The per-sub-block dots are maddubs (u8 x s8 pairs into int16), their scales
// enter through madd (int16 x int16 pairs into int32), and the sums of q_x
// per 16 values come with the activations, so a super-block costs per row and
// token one int32 vector, converted once and fmadd'ed (Q2_K, Q4_K, Q5_K: a
// second one for the min terms, fnmadd'ed) into 8 float lanes.
//
// One tile kernel serves every T: R rows x C tokens, each stored super-block
// unpacked once per row for the C tokens. T = 1 runs 4 rows x 1 token with
// the same prefetch as the Q4_1 rows (matmul_cpu_internal.h); T > 1 runs
// 2 rows x 4 tokens. Every (row, token) output has its own accumulator and
// sees the same vector operations in the same order whatever R and C are
// (the integer parts are exact in any order), so a token's result does not
// depend on T or on the thread split.

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "ops/matmul/matmul_cpu_internal.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace nanoserve::matmul_cpu {

namespace {

using quant::BlockQ8KAct;
using quant::kSuperBlock;

enum class Kind { kQ2K, kQ3K, kQ4K, kQ5K, kQ6K };

// Q2_K, Q3_K and Q6_K: 16 sub-blocks of 16, integer scales inside the dot.
template <Kind K>
constexpr bool kSmallSubBlocks = K == Kind::kQ2K || K == Kind::kQ3K || K == Kind::kQ6K;
// Q2_K, Q4_K and Q5_K carry min terms.
template <Kind K>
constexpr bool kWithMin = K == Kind::kQ2K || K == Kind::kQ4K || K == Kind::kQ5K;

template <Kind K>
constexpr int64_t kSuperBytes = K == Kind::kQ2K   ? 84
                                : K == Kind::kQ3K ? 110
                                : K == Kind::kQ4K ? 144
                                : K == Kind::kQ5K ? 176
                                                  : 210;

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Q4_K / Q5_K: 8 six-bit scales and 8 six-bit mins from their 12 bytes, as
// 8 bytes each (byte j: sub-block j). Bytes 0-3 hold sc[0..3] and bytes 4-7
// mn[0..3] in their low 6 bits; bytes 8-11 hold the low 4 bits of sc[4..7]
// (low nibble) and mn[4..7] (high nibble), whose top 2 bits are the top 2 bits
// of bytes 0-3 (sc) and 4-7 (mn).
void unpack_scales_k4(const uint8_t* s, uint64_t* sc, uint64_t* mn) {
  const uint32_t w0 = load_u32(s), w1 = load_u32(s + 4), w2 = load_u32(s + 8);
  const uint32_t sc_hi = (w2 & 0x0f0f0f0f) | ((w0 >> 2) & 0x30303030);
  const uint32_t mn_hi = ((w2 >> 4) & 0x0f0f0f0f) | ((w1 >> 2) & 0x30303030);
  *sc = (w0 & 0x3f3f3f3f) | (static_cast<uint64_t>(sc_hi) << 32);
  *mn = (w1 & 0x3f3f3f3f) | (static_cast<uint64_t>(mn_hi) << 32);
}

// Q3_K: 16 six-bit scales, stored + 32, from 12 bytes into 16 (byte i:
// scale i + 32): scale i has its low 4 bits in byte i % 8 (i < 8 low nibble,
// else high) and its top 2 bits in byte 8 + i % 4 at bits 2 (i / 4).
void unpack_scales_q3(const uint8_t* s, uint32_t words[4]) {
  const uint32_t w0 = load_u32(s), w1 = load_u32(s + 4), w2 = load_u32(s + 8);
  words[0] = (w0 & 0x0f0f0f0f) | ((w2 & 0x03030303) << 4);
  words[1] = (w1 & 0x0f0f0f0f) | (((w2 >> 2) & 0x03030303) << 4);
  words[2] = ((w0 >> 4) & 0x0f0f0f0f) | (((w2 >> 4) & 0x03030303) << 4);
  words[3] = ((w1 >> 4) & 0x0f0f0f0f) | (((w2 >> 6) & 0x03030303) << 4);
}

Kind kind_of(DType dt) {
  switch (dt) {
    case DType::kQ2_K: return Kind::kQ2K;
    case DType::kQ3_K: return Kind::kQ3K;
    case DType::kQ4_K: return Kind::kQ4K;
    case DType::kQ5_K: return Kind::kQ5K;
    case DType::kQ6_K: return Kind::kQ6K;
    default: NS_CHECK(false) << "no K-quant kernel for " << dtype_name(dt);
  }
  return Kind::kQ4K;
}

// ---- scalar ----------------------------------------------------------------

// One super-block decoded for the integer dot: the 256 quants as ints (signed:
// Q3_K q3 - 4, Q6_K q6 - 32), the integer scale and min of each value's
// sub-block, and the float d and dmin.
template <Kind K>
void decode_super(const uint8_t* blk, int* q, int* sc, int* mn, float* d, float* dmin) {
  if constexpr (K == Kind::kQ2K || K == Kind::kQ3K) {
    // Value 128h + 32k + l: bits 2k..2k+1 of qs[32h + l]; Q3_K subtracts 4
    // where bit 4h + k of hmask[l] is clear.
    const uint8_t* qs = blk + (K == Kind::kQ2K ? 16 : 32);
    for (int p = 0; p < kSuperBlock; ++p) {
      const int h = p / 128, k = (p % 128) / 32, l = p % 32;
      int v = (qs[32 * h + l] >> (2 * k)) & 3;
      if constexpr (K == Kind::kQ3K) v -= ((blk[l] >> (4 * h + k)) & 1) ? 0 : 4;
      q[p] = v;
    }
  } else if constexpr (K == Kind::kQ6K) {
    const uint8_t* ql = blk;
    const uint8_t* qh = blk + 128;
    for (int p = 0; p < kSuperBlock; ++p) {
      const int h = p / 128, k = (p % 128) / 32, l = p % 32;
      const uint8_t lo = ql[64 * h + l + 32 * (k & 1)];
      const int v = ((k >= 2 ? lo >> 4 : lo & 0x0f) | (((qh[32 * h + l] >> (2 * k)) & 3) << 4));
      q[p] = v - 32;
    }
  } else {
    const uint8_t* qs = blk + (K == Kind::kQ4K ? 16 : 48);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        int lo = qs[32 * c + l] & 0x0f, hi = qs[32 * c + l] >> 4;
        if constexpr (K == Kind::kQ5K) {
          lo |= ((blk[16 + l] >> (2 * c)) & 1) << 4;
          hi |= ((blk[16 + l] >> (2 * c + 1)) & 1) << 4;
        }
        q[64 * c + l] = lo;
        q[64 * c + 32 + l] = hi;
      }
    }
  }
  *dmin = 0.0f;
  if constexpr (K == Kind::kQ6K) {
    for (int p = 0; p < kSuperBlock; ++p) sc[p] = reinterpret_cast<const int8_t*>(blk + 192)[p / 16];
    *d = quant::f16_to_f32(load_u16(blk + 208));
  } else if constexpr (K == Kind::kQ3K) {
    uint32_t words[4];
    unpack_scales_q3(blk + 96, words);
    for (int p = 0; p < kSuperBlock; ++p) {
      const int i = p / 16;
      sc[p] = static_cast<int>((words[i / 4] >> (8 * (i % 4))) & 0xff) - 32;
    }
    *d = quant::f16_to_f32(load_u16(blk + 108));
  } else if constexpr (K == Kind::kQ2K) {
    for (int p = 0; p < kSuperBlock; ++p) {
      sc[p] = blk[p / 16] & 0x0f;
      mn[p] = blk[p / 16] >> 4;
    }
    *d = quant::f16_to_f32(load_u16(blk + 80));
    *dmin = quant::f16_to_f32(load_u16(blk + 82));
  } else {
    uint64_t sc8, mn8;
    unpack_scales_k4(blk + 4, &sc8, &mn8);
    for (int p = 0; p < kSuperBlock; ++p) {
      sc[p] = static_cast<int>((sc8 >> (8 * (p / 32))) & 0xff);
      mn[p] = static_cast<int>((mn8 >> (8 * (p / 32))) & 0xff);
    }
    *d = quant::f16_to_f32(load_u16(blk));
    *dmin = quant::f16_to_f32(load_u16(blk + 2));
  }
}

constexpr int kScalarTokens = 8;

template <Kind K>
void rows_scalar(const uint8_t* base, int64_t row_bytes, const KQuantActs& a, int64_t T, float* y, int64_t N,
                 int64_t o_begin, int64_t o_end) {
  int q[kSuperBlock], sc[kSuperBlock], mn[kSuperBlock] = {};
  for (int64_t o = o_begin; o < o_end; ++o) {
    const uint8_t* row = base + o * row_bytes;
    for (int64_t t0 = 0; t0 < T; t0 += kScalarTokens) {
      const int n = static_cast<int>(std::min<int64_t>(kScalarTokens, T - t0));
      float acc[kScalarTokens] = {}, macc[kScalarTokens] = {};
      for (int64_t sb = 0; sb < a.nsb; ++sb) {
        float d, dmin;
        decode_super<K>(row + sb * kSuperBytes<K>, q, sc, mn, &d, &dmin);
        for (int c = 0; c < n; ++c) {
          const BlockQ8KAct& x = a.xk[(t0 + c) * a.nsb + sb];
          int isum = 0, msum = 0;
          for (int p = 0; p < kSuperBlock; ++p) isum += sc[p] * q[p] * x.qs[p];
          // The min of each 16 values times their activation sum.
          for (int i = 0; i < kSuperBlock / 16; ++i) msum += mn[16 * i] * x.bsums[i];
          acc[c] += d * x.d * static_cast<float>(isum);
          macc[c] += dmin * x.d * static_cast<float>(msum);
        }
      }
      for (int c = 0; c < n; ++c) y[(t0 + c) * N + o] = acc[c] - macc[c];
    }
  }
}

// ---- AVX2 ------------------------------------------------------------------

#if defined(__AVX2__)
// unpack_scales_k4 in SSE registers (fewer instructions than the 32-bit
// words, which matters at T = 1): 16 bytes loaded from the 12 scale bytes (the
// last 4 belong to the quants and are masked off), as words w0 w1 w2 and
//   sc[0..3] = w0 & 63,  sc[4..7] = (w2 & 0x0f) | ((w0 >> 2) & 0x30)
//   mn[0..3] = w1 & 63,  mn[4..7] = ((w2 >> 4) & 0x0f) | ((w1 >> 2) & 0x30)   (per byte)
inline __m128i unpack_scales_k4_sse(const uint8_t* s) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
  const __m128i a = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0));  // w0 w2 w1 w2
  const __m128i b = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0));  // w0 w0 w1 w1
  const __m128i low6 = _mm_and_si128(a, _mm_set1_epi8(0x3f));
  const __m128i low4 = _mm_and_si128(_mm_srlv_epi32(a, _mm_setr_epi32(0, 0, 0, 4)), _mm_set1_epi8(0x0f));
  const __m128i top2 = _mm_and_si128(_mm_srli_epi32(b, 2), _mm_set1_epi8(0x30));
  const __m128i hi = _mm_or_si128(low4, top2);  // lanes 1 and 3: sc[4..7], mn[4..7]
  return _mm_blend_epi32(low6, hi, 0b1010);     // sc[0..3] sc[4..7] mn[0..3] mn[4..7]
}

// Sub-block j's 16-bit scale, from 8 of them in each 128-bit lane, in all 16 lanes.
inline __m256i scale_of(__m256i sc16, int j) {
  return _mm256_shuffle_epi8(
      sc16, _mm256_add_epi8(_mm256_set1_epi16(0x0100), _mm256_set1_epi8(static_cast<char>(2 * j))));
}

// The 16 per-16 sums of a token's super-block as int16.
inline __m256i bsums_of(const BlockQ8KAct& x) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums));
}

inline __m256i qs_of(const BlockQ8KAct& x, int j) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * j));
}

constexpr int kTileRows = 2;
constexpr int kTileTokens = 4;

// Q2_K, Q3_K, Q6_K: per activation block k of a half, the 16-bit scales of its
// two sub-blocks of 16 (one per 128-bit lane) out of the half's 8 scales.
inline __m256i pick16(__m256i sc16, int k) {
  const __m256i ctl0 = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2,
                                        3, 2, 3, 2, 3, 2, 3, 2, 3);
  return _mm256_shuffle_epi8(sc16, _mm256_add_epi8(ctl0, _mm256_set1_epi8(static_cast<char>(4 * k))));
}

// One super-block of one row against C tokens: isum[c] (8 int32 lanes, the
// scaled integer dot), msum[c] (the min terms, kWithMin types), d and dmin.
template <Kind K, int C>
inline void super_dot(const uint8_t* blk, const BlockQ8KAct* const* xb, __m256i* isum, __m256i* msum,
                      float* d, float* dmin) {
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  for (int c = 0; c < C; ++c) isum[c] = _mm256_setzero_si256();
  if constexpr (K == Kind::kQ4K || K == Kind::kQ5K) {
    const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(load_u32(blk))));  // (d, dmin, 0, 0)
    *d = _mm_cvtss_f32(dm);
    *dmin = _mm_cvtss_f32(_mm_movehdup_ps(dm));
    const __m128i scmn = unpack_scales_k4_sse(blk + 4);  // bytes 0-7: sc[0..7], 8-15: mn[0..7]
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scmn));
    // mn[i / 2] for each of the 16 per-16 sums.
    const __m256i mn16 = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(scmn, scmn));
    for (int c = 0; c < C; ++c) msum[c] = _mm256_madd_epi16(bsums_of(*xb[c]), mn16);
    const uint8_t* qs = blk + (K == Kind::kQ4K ? 16 : 48);
    [[maybe_unused]] __m256i qh;
    if constexpr (K == Kind::kQ5K) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16));
    for (int k = 0; k < 4; ++k) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * k));
      __m256i lo = _mm256_and_si256(raw, low4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
      if constexpr (K == Kind::kQ5K) {
        // Bits 2k and 2k + 1 of qh (shifted down by 2 per chunk) to bit 4.
        const __m256i bit4 = _mm256_set1_epi8(0x10);
        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(qh, 4), bit4));
        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(qh, 3), bit4));
        qh = _mm256_srli_epi16(qh, 2);
      }
      const __m256i s_lo = scale_of(sc16, 2 * k), s_hi = scale_of(sc16, 2 * k + 1);
      for (int c = 0; c < C; ++c) {
        // u8 (< 32) x s8 pairs fit int16; times a 6-bit scale, int32.
        const __m256i p_lo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, qs_of(*xb[c], 2 * k)), s_lo);
        const __m256i p_hi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, qs_of(*xb[c], 2 * k + 1)), s_hi);
        isum[c] = _mm256_add_epi32(isum[c], _mm256_add_epi32(p_lo, p_hi));
      }
    }
  } else if constexpr (K == Kind::kQ6K) {
    *d = quant::f16_to_f32(load_u16(blk + 208));
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192));
    // The offset: q6 - 32 with 32 sum_i sc_i (sum q_x)_i subtracted once.
    const __m256i sc_all = _mm256_cvtepi8_epi16(sc8);
    for (int c = 0; c < C; ++c)
      isum[c] = _mm256_sub_epi32(isum[c], _mm256_slli_epi32(_mm256_madd_epi16(bsums_of(*xb[c]), sc_all), 5));
    const __m256i bits45 = _mm256_set1_epi8(0x30);
    for (int h = 0; h < 2; ++h) {
      const __m256i sc16 =
          _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(h == 0 ? sc8 : _mm_srli_si128(sc8, 8)));
      const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h));
      const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
      for (int k = 0; k < 4; ++k) {
        const __m256i ql = k & 1 ? ql1 : ql0;
        const __m256i lo = _mm256_and_si256(k >= 2 ? _mm256_srli_epi16(ql, 4) : ql, low4);
        __m256i hi;  // bits 2k..2k+1 of qh at bits 4..5
        switch (k) {
          case 0: hi = _mm256_slli_epi16(qh, 4); break;
          case 1: hi = _mm256_slli_epi16(qh, 2); break;
          case 2: hi = qh; break;
          default: hi = _mm256_srli_epi16(qh, 2); break;
        }
        const __m256i u = _mm256_or_si256(lo, _mm256_and_si256(hi, bits45));  // 0..63
        const __m256i sc = pick16(sc16, k);
        for (int c = 0; c < C; ++c) {
          // u8 (< 64) x s8 pairs fit int16; times the 8-bit scales, int32.
          const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, qs_of(*xb[c], 4 * h + k)), sc);
          isum[c] = _mm256_add_epi32(isum[c], p);
        }
      }
    }
  } else if constexpr (K == Kind::kQ3K) {
    *d = quant::f16_to_f32(load_u16(blk + 108));
    alignas(16) uint32_t words[4];
    unpack_scales_q3(blk + 96, words);
    const __m128i sc8 = _mm_sub_epi8(_mm_load_si128(reinterpret_cast<const __m128i*>(words)),
                                     _mm_set1_epi8(32));  // -32..31
    // The offset: q3 - 4 with 4 sum_i sc_i (sum q_x)_i subtracted once.
    const __m256i sc_all = _mm256_cvtepi8_epi16(sc8);
    for (int c = 0; c < C; ++c)
      isum[c] = _mm256_sub_epi32(isum[c], _mm256_slli_epi32(_mm256_madd_epi16(bsums_of(*xb[c]), sc_all), 2));
    const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk));
    const __m256i bit2 = _mm256_set1_epi8(0x04);
    for (int h = 0; h < 2; ++h) {
      const __m256i sc16 =
          _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(h == 0 ? sc8 : _mm_srli_si128(sc8, 8)));
      const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32 + 32 * h));
      for (int k = 0; k < 4; ++k) {
        const __m256i low = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * k), _mm256_set1_epi8(3));
        // Bit 4h + k of hmask to bit 2 (within each byte: the mask drops what
        // the 16-bit shift brings over from the neighbour byte).
        const int s = 4 * h + k - 2;
        const __m256i hb = s >= 0 ? _mm256_srli_epi16(hm, s) : _mm256_slli_epi16(hm, -s);
        const __m256i u = _mm256_or_si256(low, _mm256_and_si256(hb, bit2));  // 0..7
        const __m256i sc = pick16(sc16, k);
        for (int c = 0; c < C; ++c) {
          const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, qs_of(*xb[c], 4 * h + k)), sc);
          isum[c] = _mm256_add_epi32(isum[c], p);
        }
      }
    }
  } else {
    // Q2_K
    const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(load_u32(blk + 80))));  // (d, dmin)
    *d = _mm_cvtss_f32(dm);
    *dmin = _mm_cvtss_f32(_mm_movehdup_ps(dm));
    const __m128i sm = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk));
    const __m128i sc8 = _mm_and_si128(sm, _mm_set1_epi8(0x0f));
    const __m256i mn_all = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), _mm_set1_epi8(0x0f)));
    for (int c = 0; c < C; ++c) msum[c] = _mm256_madd_epi16(bsums_of(*xb[c]), mn_all);
    for (int h = 0; h < 2; ++h) {
      const __m256i sc16 =
          _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(h == 0 ? sc8 : _mm_srli_si128(sc8, 8)));
      const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * h));
      for (int k = 0; k < 4; ++k) {
        const __m256i q = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * k), _mm256_set1_epi8(3));
        const __m256i sc = pick16(sc16, k);
        for (int c = 0; c < C; ++c) {
          const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(q, qs_of(*xb[c], 4 * h + k)), sc);
          isum[c] = _mm256_add_epi32(isum[c], p);
        }
      }
    }
  }
}

// y[t0 + c][o0 + i] for i < R, c < C.
template <Kind K, int R, int C, bool kPrefetch>
void tile(const uint8_t* base, int64_t row_bytes, const KQuantActs& a, int64_t t0, float* y, int64_t N,
          int64_t o0, const uint8_t* limit) {
  const int64_t nsb = a.nsb;
  [[maybe_unused]] const GemvPrefetch pf(base, row_bytes, o0, R, nsb, limit);
  __m256 acc[R][C];
  for (int i = 0; i < R; ++i) {
    for (int c = 0; c < C; ++c) acc[i][c] = _mm256_setzero_ps();
  }
  const uint8_t* rows[R];
  for (int i = 0; i < R; ++i) rows[i] = base + (o0 + i) * row_bytes;
  for (int64_t sb = 0; sb < nsb; ++sb) {
    if constexpr (kPrefetch) pf.at(sb);
    const BlockQ8KAct* xb[C];
    for (int c = 0; c < C; ++c) xb[c] = a.xk + (t0 + c) * nsb + sb;
    for (int i = 0; i < R; ++i) {
      __m256i isum[C], msum[C];
      float d, dmin = 0.0f;
      super_dot<K, C>(rows[i] + sb * kSuperBytes<K>, xb, isum, msum, &d, &dmin);
      for (int c = 0; c < C; ++c) {
        acc[i][c] = _mm256_fmadd_ps(_mm256_set1_ps(d * xb[c]->d), _mm256_cvtepi32_ps(isum[c]), acc[i][c]);
        if constexpr (kWithMin<K>) {
          acc[i][c] =
              _mm256_fnmadd_ps(_mm256_set1_ps(dmin * xb[c]->d), _mm256_cvtepi32_ps(msum[c]), acc[i][c]);
        }
      }
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int c = 0; c < C; ++c) y[(t0 + c) * N + o0 + i] = hsum8(acc[i][c]);
  }
}

template <Kind K, int R>
void row_tiles(const uint8_t* base, int64_t row_bytes, const KQuantActs& a, int64_t T, float* y, int64_t N,
               int64_t o0) {
  int64_t t = 0;
  for (; t + kTileTokens <= T; t += kTileTokens)
    tile<K, R, kTileTokens, false>(base, row_bytes, a, t, y, N, o0, nullptr);
  switch (T - t) {
    case 1: tile<K, R, 1, false>(base, row_bytes, a, t, y, N, o0, nullptr); break;
    case 2: tile<K, R, 2, false>(base, row_bytes, a, t, y, N, o0, nullptr); break;
    case 3: tile<K, R, 3, false>(base, row_bytes, a, t, y, N, o0, nullptr); break;
    default: break;
  }
  static_assert(kTileTokens == 4 && kTileRows == 2, "the switches cover the remainders");
}

template <Kind K>
void rows_avx2(const uint8_t* base, int64_t row_bytes, const KQuantActs& a, int64_t T, float* y, int64_t N,
               int64_t o_begin, int64_t o_end) {
  int64_t o = o_begin;
  if (T == 1) {
    const uint8_t* limit = base + o_end * row_bytes;
    // The groups before the first that a block step prefetches: ask for them now.
    GemvPrefetch::range(reinterpret_cast<uintptr_t>(base + (o_begin + kGemvRows) * row_bytes),
                        static_cast<uintptr_t>((kGemvPrefetchGroups - 1) * kGemvRows * row_bytes),
                        reinterpret_cast<uintptr_t>(limit));
    for (; o + kGemvRows <= o_end; o += kGemvRows)
      tile<K, kGemvRows, 1, true>(base, row_bytes, a, 0, y, N, o, limit);
    for (; o < o_end; ++o) tile<K, 1, 1, true>(base, row_bytes, a, 0, y, N, o, limit);
    return;
  }
  for (; o + kTileRows <= o_end; o += kTileRows) row_tiles<K, kTileRows>(base, row_bytes, a, T, y, N, o);
  for (; o < o_end; ++o) row_tiles<K, 1>(base, row_bytes, a, T, y, N, o);
}
#endif

}  // namespace

bool kquant_direct(DType dt) {
  return dt == DType::kQ2_K || dt == DType::kQ3_K || dt == DType::kQ4_K || dt == DType::kQ5_K ||
         dt == DType::kQ6_K;
}

void kquant_rows_scalar(DType dt, const uint8_t* base, int64_t row_bytes, const KQuantActs& a, int64_t T,
                        float* y, int64_t N, int64_t o_begin, int64_t o_end) {
  switch (kind_of(dt)) {
    case Kind::kQ2K: return rows_scalar<Kind::kQ2K>(base, row_bytes, a, T, y, N, o_begin, o_end);
    case Kind::kQ3K: return rows_scalar<Kind::kQ3K>(base, row_bytes, a, T, y, N, o_begin, o_end);
    case Kind::kQ4K: return rows_scalar<Kind::kQ4K>(base, row_bytes, a, T, y, N, o_begin, o_end);
    case Kind::kQ5K: return rows_scalar<Kind::kQ5K>(base, row_bytes, a, T, y, N, o_begin, o_end);
    case Kind::kQ6K: return rows_scalar<Kind::kQ6K>(base, row_bytes, a, T, y, N, o_begin, o_end);
  }
}

void kquant_rows(DType dt, const uint8_t* base, int64_t row_bytes, const KQuantActs& a, int64_t T, float* y,
                 int64_t N, int64_t o_begin, int64_t o_end) {
#if defined(__AVX2__)
  switch (kind_of(dt)) {
    case Kind::kQ2K: return rows_avx2<Kind::kQ2K>(base, row_bytes, a, T, y, N, o_begin, o_end);
    case Kind::kQ3K: return rows_avx2<Kind::kQ3K>(base, row_bytes, a, T, y, N, o_begin, o_end);
    case Kind::kQ4K: return rows_avx2<Kind::kQ4K>(base, row_bytes, a, T, y, N, o_begin, o_end);
    case Kind::kQ5K: return rows_avx2<Kind::kQ5K>(base, row_bytes, a, T, y, N, o_begin, o_end);
    case Kind::kQ6K: return rows_avx2<Kind::kQ6K>(base, row_bytes, a, T, y, N, o_begin, o_end);
  }
#else
  kquant_rows_scalar(dt, base, row_bytes, a, T, y, N, o_begin, o_end);
#endif
}

}  // namespace nanoserve::matmul_cpu
