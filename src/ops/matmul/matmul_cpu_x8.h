#pragma once
// The interleaved-row ("x8") CPU kernels for Q4_0, Q4_1, Q8_0, Q4_K, Q5_K and
// Q6_K weights: the packed layout, the activations they read, and the entry
// points of each instruction-set build (matmul_cpu_x8_{avx2,avxvnni,avx512}.cc,
// compiled with their own -m flags and chosen at run time).
//
// Layout. A weight [N, K] is packed in groups of 8 rows (the last group padded
// with zero rows). A group is its units (blocks of 32 for Q4_0 / Q4_1 / Q8_0,
// super-blocks of 256 for the K-quants) in order; each unit holds the 8 rows'
// scales as vectors of 8, then the quants as 32-byte vectors whose 32-bit lane
// r holds 4 consecutive values of row r. One vpdpbusd (or maddubs + madd) of
// such a vector against 4 activation bytes broadcast to all lanes gives 8 rows'
// partial dots at once, so no horizontal sums are needed: lane r of every
// accumulator is output row r.
//   Q4_0 (144 B): d f16[8] | qs[4][8 rows][4]: vector j, low nibbles values
//                 4j..4j+3, high nibbles values 16+4j.. (the GGUF byte order)
//   Q4_1 (160 B): d f16[8] | m f16[8] | qs as Q4_0
//   Q8_0 (272 B): d f16[8] | qs[8][8 rows][4] as u8 (q + 128)
//   Q4_K (1184 B): d f16[8] | dmin f16[8] | sc u8[8 sub][8 rows] |
//                 mn u8[4][8 rows][2] (sub-blocks 2p, 2p+1) | qs[4 c][8 j][8 rows][4]
//                 (low nibbles sub-block 2c, high 2c+1, values 4j..4j+3 of it)
//   Q5_K (1440 B): Q4_K | qh[8 j][8 rows][4] (bit s: sub-block s's fifth bit)
//   Q6_K (1680 B): d f16[8] | sc s8[16 sub][8 rows] | per half h, per j:
//                 ql[2][8 rows][4] then qh[8 rows][4] (96 B; ql bytes 64h + 32kk + 4j..,
//                 qh bytes 32h + 4j.. of each row, the GGUF bit positions per lane)
//
// Reduction order of each output y[t][o] (every path, every T, every split):
// units in order; per unit one exact int32 (below) and, in float,
//   32-value types: acc = fma(d_w * d_x, float(i), acc); Q4_1 then acc = fma(m_w, s_x, acc)
//       i = sum q x (Q4_0: sum q x - 8 sum x; Q8_0: sum w x)
//   Q4_K, Q5_K: acc = fma(d d_x, float(sum_s sc_s (q.x)_s), acc);
//               acc = fma(-(dmin d_x), float(sum_s mn_s (sum x)_s), acc)
//   Q6_K: acc = fma(d d_x, float(sum_s sc_s ((u.x)_s - 32 (sum x)_s)), acc)
// with acc starting at 0 and y = acc. The scalar kernel (from the GGUF
// blocks) does the same operations, so every path gives the same bits.

#include <cstdint>

#include "ops/matmul/quant_blocks.h"

namespace nanoserve::matmul_cpu::x8 {

constexpr int kRows = 8;

// The weight kinds the x8 kernels take (plain ints, so the ISA builds need no DType).
enum Kind : int { kQ4_0, kQ4_1, kQ8_0, kQ4K, kQ5K, kQ6K, kNone };

constexpr int64_t kUnitBytes[] = {144, 160, 272, 1184, 1440, 1680};
constexpr int kUnitValues[] = {32, 32, 32, 256, 256, 256};

// The activations of T tokens as the kernels read them (all per token):
struct Acts {
  const quant::BlockQ8Act* xa;  // [T][nb], blocks of 32
  const int32_t* sum32;         // [T][nb]: sum of q of each block
  int64_t nb;
  const quant::BlockQ8KAct* xk;  // [T][nsb], super-blocks of 256
  const int32_t* bs32;           // [T][nsb][4]: sums of q per 32 values as int16 pairs (2p, 2p + 1)
  const int32_t* q6init;         // [T][nsb][16]: -32 x the sums of q per 16 values
  int64_t nsb;
};

// y[t][o0 + r] for r < nrows, every t < T, from ngroups consecutive packed
// groups at g (group_bytes apart; nrows <= 8 ngroups).
using GroupFn = void (*)(int kind, const uint8_t* g, int64_t group_bytes, int ngroups, const Acts& a, int64_t T,
                         float* y, int64_t N, int64_t o0, int nrows);
// Groups a build takes per call to use its widest vectors.
constexpr int kMaxGroupsPerCall = 2;

// Each ISA build's entry (nullptr where the compiler or the target lacks it).
GroupFn group_fn_avx2();
GroupFn group_fn_avx_vnni();
GroupFn group_fn_avx512_vnni();
GroupFn group_fn_amx();           // AMX-INT8 tiles for pairs of groups x 16 tokens, AVX-512 VNNI for the rest
GroupFn group_fn_amx_emulated();  // the same kernel on tiles emulated in memory (tests)

}  // namespace nanoserve::matmul_cpu::x8

// ---- dispatch, packing and the scalar kernel (matmul_cpu_x8.cc) --------------

#include <memory>

#include "core/dtype.h"
#include "core/tensor.h"

namespace nanoserve::matmul_cpu::x8 {

// kNone for the dtypes the x8 kernels do not take.
Kind kind_of(DType dt);

// The kernel builds, slowest first. Scalar reads the GGUF blocks directly.
// kAmxEmulated runs the AMX kernel on tiles emulated in memory: for tests
// on machines without AMX, never chosen unless forced.
enum class Path : int { kScalar, kAvx2, kAvxVnni, kAvx512Vnni, kAmx, kAmxEmulated };
constexpr Path kPaths[] = {Path::kScalar, Path::kAvx2,        Path::kAvxVnni,
                           Path::kAvx512Vnni, Path::kAmx, Path::kAmxEmulated};
// "scalar", "avx2", "avx-vnni", "avx512-vnni", "amx", "amx-emulated"
const char* path_name(Path p);

// Whether this process can run p; if not, *why says what is missing.
bool path_available(Path p, const char** why = nullptr);

// The path matmul uses: the override set below, else NANOSERVE_CPU_MATMUL
// (a path_name, read once; an unknown or unavailable name is reported and
// ignored), else the fastest available.
Path active_path();
// Test hook: force p (CHECKs that it is available) until cleared.
void force_path(Path p);
void clear_forced_path();

// Bytes of one packed group of 8 rows of K values.
int64_t group_bytes(Kind k, int64_t K);
// Packs rows o0 .. o0 + nrows - 1 (nrows <= 8; the rest zero) of a stored
// weight whose row o starts at base + o * row_bytes into one group.
void pack_group(Kind k, const uint8_t* base, int64_t row_bytes, int64_t o0, int nrows, int64_t K,
                uint8_t* out);

// A weight packed once (matmul_prepare): ceil(N / 8) groups.
struct Packed {
  std::unique_ptr<uint8_t, void (*)(void*)> data{nullptr, nullptr};
  int64_t group_bytes = 0;
};
// w's packed copy if matmul_prepare made one for this very tensor (same data,
// shape, dtype and owner still alive), else nullptr. Thread-safe.
std::shared_ptr<const Packed> find_prepared(const Tensor& w);
void prepare(const Tensor& w);

// Fills the per-token sums the kernels read from the quantized activations
// of tokens [t_begin, t_end).
void fill_sums(const Acts& a, int64_t t_begin, int64_t t_end, bool blocks, bool kquant, int32_t* sum32,
               int32_t* bs32, int32_t* q6init);

// Rows [o_begin, o_end) of y (all T tokens) from the stored GGUF rows, in
// plain C++ with the operations of the reduction order above.
void scalar_rows(Kind k, const uint8_t* base, int64_t row_bytes, const Acts& a, int64_t T, float* y,
                 int64_t N, int64_t o_begin, int64_t o_end);

// The kernel of an available SIMD path.
GroupFn group_fn(Path p);

}  // namespace nanoserve::matmul_cpu::x8
