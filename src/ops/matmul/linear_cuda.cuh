#pragma once
// Our own GEMM for the linear layers, y[M, N] = x[M, K] . w[N, K]^T, with
// one summation order per output element whatever M is (docs/ops_cuda.md).
//
//   x: [M, K] bf16 (rows contiguous), w: [N, K] bf16 or FP8 E4M3 with a scale
//   per row (LinearWeight), y: [M, N] bf16 or f32;
//   f32 accumulation on tensor cores (mma.sync m16n8k16, wgmma m64nNk16); all device memory.
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
// FP8 weights. Both kernels read a lane's 16 k values of a chunk row as one
// 16-byte unit (half the bytes) and turn them, in registers, into exactly the
// bf16 mma words of w * 2^-120 (linear_cuda_common.cuh); the element is then
// (((S0 + S1) + S2) + S3) * 2^120 * scale[n], the same chain for any M, so
// invariance holds as in bf16. x stays bf16 (weight-only quantization).

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
};

// Whether linear_cuda runs this problem (shape, dtypes and alignment).
bool linear_cuda_supports(const Tensor& x, const LinearWeight& w, const Tensor& y);

// y = x . w^T on `s`. NS_CHECKs linear_cuda_supports. M == 0 does nothing.
// The wgmma kernel (past the streaming kernel's M) first copies x, permuted, into a scratch of
// linear_cuda_scratch_elems(M, K) bf16: given, or else allocated for the call
// (which then synchronises: not in a graph capture).
void linear_cuda(const Tensor& x, const LinearWeight& w, const Tensor& y, cuda::Stream s,
                 LinearPath path = LinearPath::kAuto);
void linear_cuda(const Tensor& x, const LinearWeight& w, const Tensor& y, const Tensor& scratch, cuda::Stream s,
                 LinearPath path = LinearPath::kAuto);
int64_t linear_cuda_scratch_elems(int64_t M, int64_t K);

// The most tokens linear_cuda (kAuto) streams; past them it runs the tiled
// kernel (measured: docs/log/model_cuda.md). FP8 weights stream to 32 tokens, since
// the tiled kernel turns each weight into bf16 once per 64 tokens.
constexpr int64_t kStreamMaxTokens = 16;
constexpr int64_t kStreamMaxTokensFp8 = 32;

// Whether linear_cuda (kAuto) runs the tiled kernel for M tokens of w, which
// reads x in its own k order (linear_cuda_layout.cuh) from a permuted copy.
bool linear_cuda_tiled(int64_t M, const LinearWeight& w);
// y = x . w^T from xp, x already in that order (as rmsnorm_cuda's permuted
// output writes it): the tiled kernel with no permute pass, bitwise
// linear_cuda(x, w, y). NS_CHECKs linear_cuda_supports and linear_cuda_tiled(M, w).
void linear_cuda_permuted(const Tensor& xp, const LinearWeight& w, const Tensor& y, cuda::Stream s);

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
