#pragma once
// The mixture-of-experts feed-forward on a CUDA device (ops/moe/moe.h's
// contract; docs/moe.md). Plain C++ declarations (no CUDA header); the
// kernels are in moe_cuda.cu (routing) and moe_cuda_experts.cu (the grouped
// expert GEMM).
//
//   x [T, D] bf16 (the ffn_norm output), router [E, D] f32,
//   gate_up [E, 2F, D] bf16 (expert e's gate rows, then its up rows),
//   down [E, D, F] bf16, y [T, D] bf16.
//
// One layer's step, all on one stream, nothing read back to the host, grids
// fixed by T (so a CUDA graph of it replays for any routing):
//  1. moe_route_cuda: the router logits [T, E] (f32, one summation order
//     fixed by D; a block reads 4 router rows once for 8 tokens); then one
//     block takes each token's softmax over all E, its top_k (highest first,
//     a tie to the lower id) and weights (divided by their sum when
//     normalize), and sorts the T * top_k slots by expert (a counting sort:
//     counts, offsets, within an expert by token, then rank), writing
//     offsets [E + 1], the active experts, row_token and row_of_slot, as
//     moe_route does on the CPU.
//  2. moe_grouped_linear_cuda over the active experts: expert e's gate_up
//     rows over its rows of x (gathered through row_token), then its down
//     rows over the SwiGLU of those (computed inside the down kernel at up
//     to 64 tokens, where it spares a launch; by silu_mul_cuda above: the
//     same bits); each block owns 16 or 32 weight rows of one expert and
//     streams them once for up to 64 of its rows.
//  3. y[t] = sum over r = 0 .. top_k - 1, in rank order, of w[t][r] times
//     the down output of slot (t, r), in f32, rounded to bf16 once.
//
// gpt-oss (ops/moe/moe.h's four departures, MoeParams and MoeCudaBiases): the
// router bias is added to each logit in the logits kernel; the top_k are
// taken by logit and the weights are the softmax over those k
// (kTopKThenSoftmax, as moe_route); the gate/up biases are added in f32 to
// each gate_up element before its bf16 rounding, the down bias to each ys
// element; and the SwiGLU is the clamped one (silu_mul.cuh's clamped_swiglu,
// in the down kernel's load or its own pass, the same bits either way).
//
// Batch invariance: every output element of both grouped GEMMs is the
// linear_cuda chain for its K (ops/matmul/linear_cuda.cuh: four slices of
// whole 64-wide chunks, each summed in chunk order, the slices added in
// order), so an expert row equals linear_cuda over that row alone, bit for
// bit; the rank-order sum does not see the experts' processing order. y[t]
// depends on x[t] and the weights only.

#include <cstdint>
#include <string>

#include "core/cuda/device_memory.cuh"
#include "core/tensor.h"
#include "ops/moe/moe.h"

namespace nanoserve {

inline constexpr int64_t kMoeCudaMaxExperts = 512;
inline constexpr int64_t kMoeCudaMaxTopK = 8;

// Empty when the CUDA path takes this shape; else why not (for the model's
// UNIMPLEMENTED): E <= 512, top_k <= 8, D and F multiples of 64.
std::string moe_cuda_unsupported(int64_t n_experts, int64_t top_k, int64_t dim, int64_t ffn);

// gpt-oss's biases (MoeExperts' router_bias, gate_bias, up_bias, down_bias),
// f32 device pointers; null: none.
struct MoeCudaBiases {
  const float* router = nullptr;   // [E] added to each token's logits
  const float* gate_up = nullptr;  // [E, 2F]: expert e's gate bias, then its up bias (exp_gate_up's rows)
  const float* down = nullptr;     // [E, D]
};

// One layer's device buffers for up to max_tokens tokens (S = max_tokens * top_k slots).
struct MoeCudaWorkspace {
  int64_t max_tokens = 0, n_experts = 0, top_k = 0, dim = 0, ffn = 0;
  int64_t n_tokens = 0;  // T of the last moe_route_cuda (host side: the grids' size)
  Tensor logits;         // [max_tokens, E] f32 router output
  Tensor ids;            // [S] i32 expert of slot s = t * top_k + r
  Tensor weights;        // [S] f32 weight of slot s
  Tensor offsets;        // [E + 1] i32 expert e's sorted rows: [offsets[e], offsets[e + 1])
  Tensor active;         // [E + 1] i32: active[0] experts with rows, then their ids, ascending
  Tensor row_token;      // [S] i32 sorted row -> its token
  Tensor row_of_slot;    // [S] i32 slot -> its sorted row
  Tensor gate_up;        // [S, 2F] bf16 each sorted row's gate, then up
  Tensor act;            // [S, F] bf16 silu(gate) * up
  Tensor ys;             // [S, D] f32 each sorted row's expert output
};
MoeCudaWorkspace make_moe_cuda_workspace(int64_t max_tokens, int64_t n_experts, int64_t top_k, int64_t dim,
                                         int64_t ffn);
int64_t moe_cuda_workspace_bytes(int64_t max_tokens, int64_t n_experts, int64_t top_k, int64_t dim,
                                 int64_t ffn);

// Teacher-forced routing (tests: CudaModel::set_forced_routing): for each
// slot t * top_k + r, the expert (highest rank first) and its weight that
// the routing takes in place of its own; device pointers, [T * top_k].
struct MoeForcedRouting {
  const int32_t* ids = nullptr;    // null (both): the routing's own top_k and weights
  const float* weights = nullptr;
};

// Step 1: the routing of x's T rows into ws (ids, weights, offsets, active,
// row_token, row_of_slot), by params.gating, the logits plus router_bias
// ([E] f32 device, or null), or as forced (ids distinct per token, < E).
// PRECOND: T <= ws.max_tokens.
void moe_route_cuda(const Tensor& x, const Tensor& router, const MoeParams& params, MoeCudaWorkspace& ws,
                    cuda::Stream s, const float* router_bias = nullptr, const MoeForcedRouting& forced = {});

// Where the grouped GEMM takes sorted row i's x row from.
enum class MoeRows : uint8_t {
  kGather,        // x [T, K]: row row_token[i]
  kSorted,        // x [S, K]: row i
  kSortedSwiGLU,  // x [S, 2K] gate_up: the SwiGLU of row i (MoeLinearExtras::activation's), computed as
                  // silu_mul_cuda (or moe_clamped_swiglu_cuda) does, bit for bit
};

// What the grouped GEMM adds to its outputs, and which SwiGLU kSortedSwiGLU reads.
struct MoeLinearExtras {
  const float* bias = nullptr;  // [E, N] f32 device: y[i][n] += bias[e][n] in f32, before y's rounding
  MoeActivation activation = MoeActivation::kSilu;
  float swiglu_alpha = 1.702f;  // kClampedSwiglu
  float swiglu_limit = 7.0f;    // kClampedSwiglu
};

// act [S, F] bf16 = the clamped SwiGLU of gate_up [S, 2F] bf16 (gate columns
// 0..F-1, up F..2F-1), element by element as silu_mul.cuh's clamped_swiglu.
void moe_clamped_swiglu_cuda(const Tensor& gate_up, const Tensor& act, float alpha, float limit,
                             cuda::Stream s);

// y rows (sorted order) = x rows . w[e]^T for each active expert e over its
// rows [offsets[e], offsets[e + 1]) of the routing in ws, for a step of T
// tokens. w: [E, N, K] bf16; y: [S, N] bf16 or f32. Only the active
// experts' weights are read.
void moe_grouped_linear_cuda(const Tensor& x, MoeRows rows, const Tensor& w, const MoeCudaWorkspace& ws,
                             int64_t T, const Tensor& y, cuda::Stream s, const MoeLinearExtras& extras = {});

// Steps 2 and 3 over the routing in ws: y [T, D] bf16, with params'
// activation and the gate/up and down biases.
void moe_experts_cuda(const Tensor& x, const Tensor& gate_up, const Tensor& down, MoeCudaWorkspace& ws,
                      const Tensor& y, cuda::Stream s, const MoeParams& params = {},
                      const MoeCudaBiases& biases = {});

// The whole feed-forward: moe_route_cuda then moe_experts_cuda.
void moe_ffn_cuda(const Tensor& x, const Tensor& router, const Tensor& gate_up, const Tensor& down,
                  const MoeParams& params, MoeCudaWorkspace& ws, const Tensor& y, cuda::Stream s,
                  const MoeCudaBiases& biases = {}, const MoeForcedRouting& forced = {});

}  // namespace nanoserve
