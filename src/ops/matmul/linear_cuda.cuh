#pragma once
// Our own GEMM for the linear layers, y[M, N] = x[M, K] . w[N, K]^T, with
// one summation order per output element whatever M is (docs/ops_cuda.md).
//
//   x: [M, K] bf16 (rows contiguous), w: [N, K] bf16 or FP8 E4M3 with a scale
//   per row (LinearWeight), y: [M, N] bf16 or f32 (FP8 weights: bf16);
//   f32 accumulation on tensor cores (mma.sync m16n8k16, wgmma m64nNk16 and,
//   for FP8, m64nNk32 e4m3); all device memory.
//   Needs K % 64 == 0, N % 16 == 0 and 16-byte aligned x, w and y (linear_cuda_supports).
//
// Two kernels, one arithmetic (linear_cuda_common.cuh):
// - streaming (M <= kStreamMaxTokens): decode is weight streaming; a linear reads its weight
//   once, so it runs at memory bandwidth when enough bytes are in flight. A
//   block of four warps owns 16 weight rows; each warp streams a fixed quarter
//   of K (whole 64-wide chunks) for the block's tokens, and the four partial
//   sums meet in shared memory in warp order. Its launch overlaps the tail of
//   the kernel before it (programmatic dependent launch). Forced, it runs any
//   M, as groups of 64 tokens that each reread the weights (the tests' cross-check).
// - tiled (larger M): warpgroup mma (wgmma) with the weights in registers and
//   the tokens in shared memory (tensor copies), from a copy of x permuted
//   into the mma's k order. A cluster of four blocks owns a tile of 128 or
//   256 weight rows x 64, 128 or 256 tokens, block w computing slice w of K,
//   the four partials meeting in slice order through distributed shared
//   memory; or, where there are tiles enough, one block owns a 128 x 128
//   tile and runs the four slices in turn, summing them in registers in the
//   same order (choose_tile; linear_cuda_wgmma.cu).
//
// Batch invariance. An output element (token m, row n) is
//   ((S0 + S1) + S2) + S3,  Sw = the mma chain over slice w's chunks, in order,
// where the slices, the chunks and the k sets of each step depend on K
// alone, in both kernels. M decides only how many tokens share a tile and
// which kernel runs, and a token's column of an mma does not depend on the
// other columns (mma.sync and wgmma give a column the same bits: measured).
// So a row's bits are the same in a batch of 1, 8, 64 or 1,024, and with any
// prefill chunking.
//
// FP8 weights (W8A8, linear_cuda_fp8.cu). x is quantized a token: E4M3 codes
// of x[m, :] / scale_x[m], scale_x[m] = max |x[m, :]| / 448, a row's codes
// depending on that row alone. One kernel template for every M (a 64-row
// tile of 8 .. 64 tokens for decode, 128 x 64 or 128 x 128 for prefill)
// multiplies the codes with wgmma m64nNk32 e4m3 a chunk (64 k) at a time,
// each chunk's sum from zero and added in f32 to its slice's (the tensor
// core's FP8 sum is carried no further than a chunk); the slices meet as
// above and the element is ((((S0 + S1) + S2) + S3) * scale[n]) * scale_x[m].
// A column's bits do not depend on the product's width (measured), so
// invariance holds as in bf16.

#include <cstdint>

#include "core/cuda/device_memory.cuh"
#include "core/tensor.h"
#include "ops/matmul/linear_weight.h"

namespace nanoserve {

// Which kernel runs: kAuto picks by M (the rule above); the others force one
// (a tiled one with its tile of weight rows x tokens), for the tests that
// check the kernels agree bit for bit, and the benchmark.
enum class LinearPath {
  kAuto,
  kStream,
  kTile128x64,
  kTile128x128,
  kTile128x256,
  kTile256x128,
  kTile128x128WholeK,  // one block a tile, the four K slices in turn
  kTile128x64WholeK,   // the same with the 128 x 64 tile
  kTile64WholeK,       // FP8 only: the decode tile (64 rows) over the whole K
  kTile192x128WholeK,  // FP8 only: three warpgroups, 192 rows x 128 tokens, whole K
};
// With FP8 weights kStream is the FP8 kernel's decode tile (64 rows x the
// fewest n8 blocks, one K slice a block), and there is no 128 x 256 or
// 256 x 128; bf16 has no 64-row or 192-row tile.

// Whether linear_cuda runs this problem (shape, dtypes and alignment).
bool linear_cuda_supports(const Tensor& x, const LinearWeight& w, const Tensor& y);

// y = x . w^T on `s`. NS_CHECKs linear_cuda_supports. M == 0 does nothing.
// The wgmma kernel (past the streaming kernel's M) first copies x, permuted,
// and the FP8 kernel its E4M3 codes, into a scratch of
// linear_cuda_scratch_elems(M, K) bf16: given, or else allocated for the call
// (which then synchronises: not in a graph capture).
void linear_cuda(const Tensor& x, const LinearWeight& w, const Tensor& y, cuda::Stream s,
                 LinearPath path = LinearPath::kAuto);
void linear_cuda(const Tensor& x, const LinearWeight& w, const Tensor& y, const Tensor& scratch, cuda::Stream s,
                 LinearPath path = LinearPath::kAuto);
int64_t linear_cuda_scratch_elems(int64_t M, int64_t K);

// The most tokens linear_cuda (kAuto) streams bf16 weights; past them it runs
// the tiled kernel (measured: docs/log/model_cuda.md).
constexpr int64_t kStreamMaxTokens = 16;

// Whether linear_cuda (kAuto) runs the bf16 tiled kernel for M tokens of w, which
// reads x in its own k order (linear_cuda_layout.cuh) from a permuted copy
// (never for FP8 weights, whose kernel quantizes x itself).
bool linear_cuda_tiled(int64_t M, const LinearWeight& w);
// y = x . w^T from xp, x already in that order (as rmsnorm_cuda's permuted
// output writes it): the tiled kernel with no permute pass, bitwise
// linear_cuda(x, w, y). NS_CHECKs linear_cuda_supports and linear_cuda_tiled(M, w).
void linear_cuda_permuted(const Tensor& xp, const LinearWeight& w, const Tensor& y, cuda::Stream s);

// y = x . w^T for FP8 weights from x's E4M3 tokens already in `scratch` (as
// rmsnorm_cuda's RmsNormOut::kFp8Tokens writes them for M rows of K): the
// FP8 kernel with no quantizing pass, bitwise linear_cuda(x, w, y). NS_CHECKs
// that w is FP8, y bf16 [M, N], and the scratch holds
// linear_cuda_scratch_elems(M, K).
void linear_cuda_fp8_tokens(const Tensor& scratch, const LinearWeight& w, const Tensor& y, cuda::Stream s);

// y = swiglu(gate_up) . w^T with swiglu(gate_up)[m, k] = silu_mul_cuda's
// bf16(silu(gate_up[m, k]) * gate_up[m, K + k]) (gate_up [M, 2K] bf16, w
// [N, K]): bitwise silu_mul_cuda then linear_cuda. On the tiled kernel the
// SwiGLU is computed by the permute of x, so the [M, K] activation pass goes;
// the streaming kernel, which rereads its input from every block, takes it
// from silu_mul_cuda's pass into the scratch. The scratch is
// linear_swiglu_cuda_scratch_elems(M, K) bf16 (given, or allocated as above).
int64_t linear_swiglu_cuda_scratch_elems(int64_t M, int64_t K);
bool linear_swiglu_cuda_supports(const Tensor& gate_up, const LinearWeight& w, const Tensor& y);
void linear_swiglu_cuda(const Tensor& gate_up, const LinearWeight& w, const Tensor& y, cuda::Stream s,
                        LinearPath path = LinearPath::kAuto);
void linear_swiglu_cuda(const Tensor& gate_up, const LinearWeight& w, const Tensor& y, const Tensor& scratch,
                        cuda::Stream s, LinearPath path = LinearPath::kAuto);

// w quantized to FP8 E4M3 rows on `s`: scale[n] = max|w[n, :]| / 448 (1 for
// a zero row), q = w / scale rounded to nearest even (core/half.h's
// f32_to_f8e4m3, bit for bit). w: [N, K] bf16 on the device.
LinearWeight quantize_fp8_rows_cuda(const Tensor& w, cuda::Stream s);

}  // namespace nanoserve
