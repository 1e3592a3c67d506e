// The CPU matmul's kernels for the types and paths the x8 kernels
// (matmul_cpu_x8*.cc) do not take: F32, F16, BF16 and anything dequantize_row
// reads, Q5_0 / Q5_1 (and Q4_0 / Q4_1 / Q8_0 when no x8 SIMD path runs), in
// blockwise integer dot products against 8-bit activations (AVX-512 VNNI, else
// AVX2, else scalar); threads split output rows in matmul_cpu.cc. The
// quantized kernels work in register tiles of 4 rows x 4 tokens, and a single
// token (T = 1, a decode step) reads the stored blocks directly, 4 rows at a
// time (matmul_cpu_gemv.cc). The K-quants have their own kernels
// (matmul_cpu_kquant.cc), which read x rounded per 256 values rather than per
// 32 (quant::BlockQ8KAct); Q5_0 and Q5_1 are decoded into the Q4 rows (5-bit
// values as bytes, same tiles) and at T = 1 read by the Q4 single-token rows
// with their fifth bits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <type_traits>
#include <vector>

#include "core/check.h"
#include "ops/dequantize/dequantize.h"
#include "ops/matmul/matmul.h"
#include "ops/matmul/matmul_cpu_internal.h"
#include "ops/matmul/matmul_cpu_x8.h"
#include "ops/matmul/quant_blocks.h"

#if defined(__AVX2__)
#include <immintrin.h>
// GCC 12 flags its own AVX-512 intrinsics (the undefined-vector idiom) as
// maybe-uninitialized once inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace nanoserve {

namespace {

using matmul_cpu::kMaxGenericK;
using matmul_cpu::kMaxQ4K;
using quant::BlockQ4_0;
using quant::BlockQ4_1;
using quant::BlockQ8_0;
using quant::BlockQ8Act;
using quant::kBlock;

#if defined(__AVX2__)
using matmul_cpu::dot_u8s8;
using matmul_cpu::hsum8;

// 32 nibbles of a 4-bit block as bytes 0..15, in element order.
inline __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}
#endif

// A row of Q4_0 / Q4_1 blocks decoded once for all T tokens: the 4-bit
// values as bytes, and per block the scale and the min (a Q4_0 value d*(q-8)
// is a Q4_1 value with min -8d). Decoding once per row rather than once per
// (row, token) takes the unpacking and the f16 conversions out of the token loop.
struct Q4Row {
  alignas(64) uint8_t q[kMaxQ4K];
  float d[kMaxQ4K / kBlock];
  float m[kMaxQ4K / kBlock];
};

template <typename Block>
void decode_q4_row(const Block* w, int64_t nb, Q4Row& r) {
  for (int64_t b = 0; b < nb; ++b) {
#if defined(__AVX2__)
    _mm256_store_si256(reinterpret_cast<__m256i*>(r.q + b * kBlock), unpack_nibbles(w[b].qs));
#else
    for (int j = 0; j < kBlock / 2; ++j) {
      r.q[b * kBlock + j] = w[b].qs[j] & 0x0f;
      r.q[b * kBlock + j + 16] = w[b].qs[j] >> 4;
    }
#endif
    r.d[b] = quant::f16_to_f32(w[b].d);
    if constexpr (std::is_same_v<Block, BlockQ4_1>) {
      r.m[b] = quant::f16_to_f32(w[b].m);
    } else {
      r.m[b] = -8.0f * r.d[b];
    }
  }
}

// Q5_0 / Q5_1 into the same rows: the 5-bit values (fifth bit of value j is
// bit j of qh) as bytes, a Q5_0 value d*(q-16) as a Q5_1 value with min -16d.
template <bool kMin>
void decode_q5_row(const uint8_t* w, int64_t nb, Q4Row& r) {
  constexpr int64_t kBytes = kMin ? 24 : 22;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = w + b * kBytes;
    uint16_t d16, m16 = 0;
    uint32_t qh;
    std::memcpy(&d16, blk, 2);
    if constexpr (kMin) std::memcpy(&m16, blk + 2, 2);
    std::memcpy(&qh, blk + (kMin ? 4 : 2), 4);
    const uint8_t* qs = blk + (kMin ? 8 : 6);
#if defined(__AVX2__)
    // Byte j of the broadcast qh picks qh's byte j / 8; its bit j % 8 set gives 0x10.
    const __m256i bytes = _mm256_shuffle_epi8(
        _mm256_set1_epi32(static_cast<int>(qh)),
        _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
    const __m256i high =
        _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit), _mm256_set1_epi8(0x10));
    _mm256_store_si256(reinterpret_cast<__m256i*>(r.q + b * kBlock),
                       _mm256_or_si256(unpack_nibbles(qs), high));
#else
    for (int j = 0; j < kBlock / 2; ++j) {
      r.q[b * kBlock + j] = static_cast<uint8_t>((qs[j] & 0x0f) | (((qh >> j) & 1) << 4));
      r.q[b * kBlock + j + 16] = static_cast<uint8_t>((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
    }
#endif
    r.d[b] = quant::f16_to_f32(d16);
    r.m[b] = kMin ? quant::f16_to_f32(m16) : -16.0f * r.d[b];
  }
}

// A row of any of the 4- and 5-bit types that decode into a Q4Row.
void decode_small_row(DType dt, const uint8_t* row, int64_t nb, Q4Row& r) {
  switch (dt) {
    case DType::kQ4_1: decode_q4_row(reinterpret_cast<const BlockQ4_1*>(row), nb, r); break;
    case DType::kQ4_0: decode_q4_row(reinterpret_cast<const BlockQ4_0*>(row), nb, r); break;
    case DType::kQ5_1: decode_q5_row<true>(row, nb, r); break;
    default: decode_q5_row<false>(row, nb, r); break;
  }
}

#if defined(__AVX2__)
// Register tiles: R weight rows x C tokens per pass over the K blocks, so each
// decoded weight block is loaded once for C tokens and each activation block
// once for R rows. Every (row, token) output keeps its own accumulators and
// sees exactly the per-block operations of an untiled dot (8 float lanes, one
// fmadd per block with scale d_w * d_x, min terms summed in block order, then
// hsum8 + min sum), so the result does not depend on R, C, T or the thread split.
constexpr int kTileRows = 4;
constexpr int kTileTokens = 4;

// y[t][o0 + i] for i < R, t in [t0, t0 + C).
template <int R, int C>
void tile_q4(const Q4Row* rows, const BlockQ8Act* xa, int64_t nb, int64_t t0, float* y, int64_t N,
             int64_t o0) {
  __m256 acc[R][C];
  __m128 macc[R];  // lane c: the min-term sum of token t0 + c
  for (int i = 0; i < R; ++i) {
    macc[i] = _mm_setzero_ps();
    for (int c = 0; c < C; ++c) acc[i][c] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    __m256i xq[C];
    __m256 xd[C];
    for (int c = 0; c < C; ++c) {
      const BlockQ8Act& a = xa[(t0 + c) * nb + b];
      xq[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs));
      xd[c] = _mm256_set1_ps(a.d);
    }
    auto s_of = [&](int c) { return c < C ? xa[(t0 + c) * nb + b].s : 0.0f; };
    const __m128 xsv = _mm_setr_ps(s_of(0), s_of(1), s_of(2), s_of(3));
    for (int i = 0; i < R; ++i) {
      const __m256i wq = _mm256_load_si256(reinterpret_cast<const __m256i*>(rows[i].q + b * kBlock));
      const __m256 wd = _mm256_set1_ps(rows[i].d[b]);
      for (int c = 0; c < C; ++c) {
        acc[i][c] =
            _mm256_fmadd_ps(_mm256_mul_ps(wd, xd[c]), _mm256_cvtepi32_ps(dot_u8s8(wq, xq[c])), acc[i][c]);
      }
      // One fused multiply-add per block: m * s + macc rounded once. (Written
      // as mul then add, GCC contracted it into exactly this fma anyway.)
      macc[i] = _mm_fmadd_ps(_mm_set1_ps(rows[i].m[b]), xsv, macc[i]);
    }
  }
  for (int i = 0; i < R; ++i) {
    alignas(16) float m[4];
    _mm_store_ps(m, macc[i]);
    for (int c = 0; c < C; ++c) y[(t0 + c) * N + o0 + i] = hsum8(acc[i][c]) + m[c];
  }
}

// A Q8_0 row's per-block scales as f32, and (with VNNI) per block the
// correction -128 * (sum of each 4 weights) that lets vpdpbusd take the
// activations as u8 (x + 128): (x + 128) . w - 128 * sum(w) = x . w exactly.
struct Q8Row {
  const BlockQ8_0* w;
  alignas(32) int32_t corr[kMaxQ4K / kBlock * 8];
  float d[kMaxQ4K / kBlock];
};

// The correction only pays for itself over several tokens: single-token
// tiles (C = 1) use the |w| x sign(x, w) form instead, the same exact integers.
void decode_q8_row(const BlockQ8_0* w, int64_t nb, [[maybe_unused]] bool with_corr, Q8Row& r) {
  r.w = w;
  for (int64_t b = 0; b < nb; ++b) {
    r.d[b] = quant::f16_to_f32(w[b].d);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    if (!with_corr) continue;
    const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs));
    const __m256i s =
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(static_cast<char>(0x80)), wq);
    _mm256_store_si256(reinterpret_cast<__m256i*>(r.corr + b * 8),
                       _mm256_sub_epi32(_mm256_setzero_si256(), s));
#endif
  }
}

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
constexpr int kQ8CorrMinTokens = 2;
#else
constexpr int kQ8CorrMinTokens = 1 << 30;  // never: maddubs would saturate on x + 128
#endif

template <int R, int C>
void tile_q8_0(const Q8Row* rows, const BlockQ8Act* xa, int64_t nb, int64_t t0, float* y, int64_t N,
               int64_t o0) {
  __m256 acc[R][C];
  for (int i = 0; i < R; ++i) {
    for (int c = 0; c < C; ++c) acc[i][c] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    __m256i xq[C];
    __m256 xd[C];
    for (int c = 0; c < C; ++c) {
      const BlockQ8Act& a = xa[(t0 + c) * nb + b];
      xq[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs));
      if constexpr (C >= kQ8CorrMinTokens) {
        xq[c] = _mm256_xor_si256(xq[c], _mm256_set1_epi8(static_cast<char>(0x80)));  // x + 128 as u8
      }
      xd[c] = _mm256_set1_ps(a.d);
    }
    for (int i = 0; i < R; ++i) {
      const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[i].w[b].qs));
      const __m256 wd = _mm256_set1_ps(rows[i].d[b]);
      for (int c = 0; c < C; ++c) {
        __m256i p;
        if constexpr (C >= kQ8CorrMinTokens) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
          p = _mm256_dpbusd_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(rows[i].corr + b * 8)),
                                  xq[c], wq);
#endif
        } else {
          // s8 x s8 as |w| (u8) x (x with w's sign).
          p = dot_u8s8(_mm256_abs_epi8(wq), _mm256_sign_epi8(xq[c], wq));
        }
        acc[i][c] = _mm256_fmadd_ps(_mm256_mul_ps(wd, xd[c]), _mm256_cvtepi32_ps(p), acc[i][c]);
      }
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int c = 0; c < C; ++c) y[(t0 + c) * N + o0 + i] = hsum8(acc[i][c]);
  }
}

// All T tokens for R decoded rows o0.., tokens in tiles of kTileTokens.
template <int R, typename Row, template <int, int> class Kernel>
void rows_all_tokens(const Row* rows, const BlockQ8Act* xa, int64_t nb, int64_t T, float* y, int64_t N,
                     int64_t o0) {
  int64_t t = 0;
  for (; t + kTileTokens <= T; t += kTileTokens) Kernel<R, kTileTokens>::run(rows, xa, nb, t, y, N, o0);
  switch (T - t) {
    case 1: Kernel<R, 1>::run(rows, xa, nb, t, y, N, o0); break;
    case 2: Kernel<R, 2>::run(rows, xa, nb, t, y, N, o0); break;
    case 3: Kernel<R, 3>::run(rows, xa, nb, t, y, N, o0); break;
    default: break;
  }
  static_assert(kTileTokens == 4, "the remainder switch covers 1..3");
}

template <int R, int C>
struct Q4Kernel {
  static void run(const Q4Row* r, const BlockQ8Act* xa, int64_t nb, int64_t t0, float* y, int64_t N,
                  int64_t o0) {
    tile_q4<R, C>(r, xa, nb, t0, y, N, o0);
  }
};
template <int R, int C>
struct Q8Kernel {
  static void run(const Q8Row* r, const BlockQ8Act* xa, int64_t nb, int64_t t0, float* y, int64_t N,
                  int64_t o0) {
    tile_q8_0<R, C>(r, xa, nb, t0, y, N, o0);
  }
};

// n (1..kTileRows) decoded rows starting at o0.
template <typename Row, template <int, int> class Kernel>
void row_group(int n, const Row* rows, const BlockQ8Act* xa, int64_t nb, int64_t T, float* y, int64_t N,
               int64_t o0) {
  switch (n) {
    case 1: rows_all_tokens<1, Row, Kernel>(rows, xa, nb, T, y, N, o0); break;
    case 2: rows_all_tokens<2, Row, Kernel>(rows, xa, nb, T, y, N, o0); break;
    case 3: rows_all_tokens<3, Row, Kernel>(rows, xa, nb, T, y, N, o0); break;
    default: rows_all_tokens<4, Row, Kernel>(rows, xa, nb, T, y, N, o0); break;
  }
  static_assert(kTileRows == 4, "the row switch covers 1..4");
}
#else
float dot_q4(const Q4Row& r, const BlockQ8Act* xa, int64_t nb) {
  float acc = 0.0f, macc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int isum = 0;
    for (int j = 0; j < kBlock; ++j) isum += r.q[b * kBlock + j] * xa[b].qs[j];
    acc += r.d[b] * xa[b].d * static_cast<float>(isum);
    macc += r.m[b] * xa[b].s;
  }
  return acc + macc;
}

float dot_q8_0(const BlockQ8_0* w, const BlockQ8Act* xa, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int isum = 0;
    for (int j = 0; j < kBlock; ++j) isum += w[b].qs[j] * xa[b].qs[j];
    acc += quant::f16_to_f32(w[b].d) * xa[b].d * static_cast<float>(isum);
  }
  return acc;
}
#endif

// Float weights: 16 interleaved partial sums, combined pairwise.
template <typename Load>
float dot_float(Load load, const float* x, int64_t K) {
#if defined(__AVX512F__)
  __m512 acc = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) acc = _mm512_fmadd_ps(load.vec16(k), _mm512_loadu_ps(x + k), acc);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc);
#else
  float lanes[16] = {};
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    for (int j = 0; j < 16; ++j) lanes[j] += load(k + j) * x[k + j];
  }
#endif
  for (; k < K; ++k) lanes[k & 15] += load(k) * x[k];
  for (int w = 8; w >= 1; w /= 2) {
    for (int j = 0; j < w; ++j) lanes[j] += lanes[j + w];
  }
  return lanes[0];
}

struct LoadF32 {
  const float* p;
  float operator()(int64_t i) const { return p[i]; }
#if defined(__AVX512F__)
  __m512 vec16(int64_t i) const {
    return _mm512_loadu_ps(p + i);
  }
#endif
};
struct LoadF16 {
  const uint16_t* p;
  float operator()(int64_t i) const { return quant::f16_to_f32(p[i]); }
#if defined(__AVX512F__)
  __m512 vec16(int64_t i) const {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
  }
#endif
};
struct LoadBF16 {
  const uint16_t* p;
  float operator()(int64_t i) const { return quant::bf16_to_f32(p[i]); }
#if defined(__AVX512F__)
  __m512 vec16(int64_t i) const {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
#endif
};

}  // namespace

namespace matmul_cpu {

bool is_quantized(DType t) {
  return t == DType::kQ8_0 || t == DType::kQ4_0 || t == DType::kQ4_1 || t == DType::kQ5_0 ||
         t == DType::kQ5_1 || matmul_cpu::kquant_direct(t);
}
bool has_gemv(DType t) {
  return t == DType::kQ8_0 || t == DType::kQ4_0 || t == DType::kQ4_1 || t == DType::kQ5_0 ||
         t == DType::kQ5_1;
}

void matmul_rows(const Tensor& w, const float* x, const BlockQ8Act* xa, const matmul_cpu::KQuantActs& acts,
                 int64_t T, float* y, int64_t o_begin, int64_t o_end) {
  const int64_t N = w.dim(0), K = w.dim(1), nb = K / kBlock;
  const int64_t row_bytes = dtype_bytes(w.dtype(), K);
  const auto* base = static_cast<const uint8_t*>(w.data());
  if (kquant_direct(w.dtype())) {
    kquant_rows(w.dtype(), base, row_bytes, acts, T, y, N, o_begin, o_end);
    return;
  }
#if defined(__AVX2__)
  if (has_gemv(w.dtype()) && T == 1) {
    gemv_rows(w.dtype(), base, row_bytes, xa, nb, y, o_begin, o_end);
    return;
  }
  if (is_quantized(w.dtype())) {
    // Decoded rows on the stack: 4 x ~20 KB (Q4) or 4 x ~34 KB (Q8_0).
    if (w.dtype() == DType::kQ8_0) {
      Q8Row rows[kTileRows];
      for (int64_t o = o_begin; o < o_end; o += kTileRows) {
        const int n = static_cast<int>(std::min<int64_t>(kTileRows, o_end - o));
        for (int i = 0; i < n; ++i) {
          decode_q8_row(reinterpret_cast<const BlockQ8_0*>(base + (o + i) * row_bytes), nb,
                        T >= kQ8CorrMinTokens, rows[i]);
        }
        row_group<Q8Row, Q8Kernel>(n, rows, xa, nb, T, y, N, o);
      }
    } else {
      Q4Row rows[kTileRows];
      for (int64_t o = o_begin; o < o_end; o += kTileRows) {
        const int n = static_cast<int>(std::min<int64_t>(kTileRows, o_end - o));
        for (int i = 0; i < n; ++i) decode_small_row(w.dtype(), base + (o + i) * row_bytes, nb, rows[i]);
        row_group<Q4Row, Q4Kernel>(n, rows, xa, nb, T, y, N, o);
      }
    }
    return;
  }
#else
  Q4Row q4;  // on the stack: ~18 KB
#endif
  for (int64_t o = o_begin; o < o_end; ++o) {
    const void* row = base + o * row_bytes;
    switch (w.dtype()) {
#if !defined(__AVX2__)
      case DType::kQ4_1:
      case DType::kQ4_0:
      case DType::kQ5_1:
      case DType::kQ5_0:
        decode_small_row(w.dtype(), static_cast<const uint8_t*>(row), nb, q4);
        for (int64_t t = 0; t < T; ++t) y[t * N + o] = dot_q4(q4, xa + t * nb, nb);
        break;
      case DType::kQ8_0:
        for (int64_t t = 0; t < T; ++t)
          y[t * N + o] = dot_q8_0(static_cast<const BlockQ8_0*>(row), xa + t * nb, nb);
        break;
#endif
      case DType::kF32:
        for (int64_t t = 0; t < T; ++t)
          y[t * N + o] = dot_float(LoadF32{static_cast<const float*>(row)}, x + t * K, K);
        break;
      case DType::kF16:
        for (int64_t t = 0; t < T; ++t)
          y[t * N + o] = dot_float(LoadF16{static_cast<const uint16_t*>(row)}, x + t * K, K);
        break;
      case DType::kBF16:
        for (int64_t t = 0; t < T; ++t)
          y[t * N + o] = dot_float(LoadBF16{static_cast<const uint16_t*>(row)}, x + t * K, K);
        break;
      default: {
        // Anything else dequantize_row reads (no such dtype today): decode
        // the row once, then float dots against x in f32.
        float buf[kMaxGenericK];
        dequantize_row(w.dtype(), row, buf, K);
        for (int64_t t = 0; t < T; ++t) y[t * N + o] = dot_float(LoadF32{buf}, x + t * K, K);
        break;
      }
    }
  }
}

}  // namespace matmul_cpu

}  // namespace nanoserve
