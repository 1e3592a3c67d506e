#pragma once
// Mixture-of-experts feed-forward (Qwen3-MoE, Mixtral): each token runs
// through the top_k of E SwiGLU experts that its router picks, and their
// outputs are summed with the router's weights.
//
//   logits[t] = router · x[t]                                   [T, E]
//   p[t]      = softmax(logits[t]) over all E experts, in f32
//   ids[t]    = the top_k experts by p[t], highest first; ties go to the lower id
//   w[t][r]   = p[t][ids[t][r]], divided by Σ_r p[t][ids[t][r]] when normalize
//   y[t]      = Σ_{r = 0 .. top_k - 1} w[t][r] · down_e(silu(gate_e · x[t]) * up_e · x[t]),  e = ids[t][r]
//
// Mixtral is normalize = true (its softmax over the selected logits is the
// same weights); Qwen3-MoE takes normalize from norm_topk_prob.
//
// gpt-oss departs in four places (each a field below; the defaults are the
// rule above):
//   logits[t] = router · x[t] + router_bias
//   ids[t]    = the top_k experts by logits[t] (the same order and tie rule),
//   w[t][r]   = softmax over the top_k selected logits (kTopKThenSoftmax)
//   h         = gate_e · x[t] + gate_bias[e],  u = up_e · x[t] + up_bias[e]
//   act       = (min(u, L) clamped to [-L, L] + 1) * g' * sigmoid(alpha * g'),
//               g' = min(h, L)                    (kClampedSwiglu, L = limit)
//   y[t]      = Σ_r w[t][r] · (down_e · act + down_bias[e])
//
// The contract, for every implementation (the CPU one here, a CUDA grouped
// GEMM next):
//  - Grouping: moe_route sorts the step's T * top_k (token, rank) slots by
//    expert once (within an expert, by token, then rank); each routed expert's
//    matmuls run once over the rows of its slots.
//  - Routed-only reads: an expert's weights are read only when at least one
//    slot routes to it (tests/ops/moe: the others are mapped PROT_NONE).
//  - Batch invariance: y[t] is a function of x[t] and the weights alone, bit
//    for bit: not of T, of the other tokens, of which experts they pick, or
//    of the thread count. Each expert row goes through the matmul, whose
//    every output is reduced in an order fixed by K (ops/matmul/matmul.h),
//    and the sum over r runs in rank order, r = 0 first, never in the order
//    the experts were processed.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace nanoserve {

// The experts of one layer: E tensors each, in any matmul dtype (views into
// one stacked [E, rows, cols] tensor, or separate ones).
struct MoeExperts {
  std::span<const Tensor> gate;  // E x [F, D]
  std::span<const Tensor> up;    // E x [F, D]
  std::span<const Tensor> down;  // E x [D, F]
  // Biases (gpt-oss), f32; null: none.
  const Tensor* router_bias = nullptr;  // [E]
  const Tensor* gate_bias = nullptr;    // [E, F]
  const Tensor* up_bias = nullptr;      // [E, F]
  const Tensor* down_bias = nullptr;    // [E, D]
};

// How the router's logits become the top_k weights.
enum class MoeGating : uint8_t {
  kSoftmaxThenTopK,  // softmax over all E, top_k of it, normalized or not (Qwen3-MoE, Mixtral)
  kTopKThenSoftmax,  // top_k of the logits, softmax over those k (gpt-oss)
};
// The experts' gated activation of (gate, up).
enum class MoeActivation : uint8_t {
  kSilu,           // silu(g) * u
  kClampedSwiglu,  // gpt-oss: g' = min(g, limit), u' = clamp(u, ±limit), (u' + 1) * g' * sigmoid(alpha g')
};

struct MoeParams {
  int32_t top_k = 0;       // 1 <= top_k <= E
  bool normalize = false;  // divide the top_k weights by their sum (kSoftmaxThenTopK)
  MoeGating gating = MoeGating::kSoftmaxThenTopK;
  MoeActivation activation = MoeActivation::kSilu;
  float swiglu_alpha = 1.702f;  // kClampedSwiglu
  float swiglu_limit = 7.0f;    // kClampedSwiglu
};

// In place over gate [n, F] and up [n, F]: gate = the clamped SwiGLU of (gate,
// up) (MoeActivation::kClampedSwiglu). Element by element, in f32.
void clamped_swiglu(Tensor& gate, const Tensor& up, float alpha, float limit);

// One step's routing, sized once for up to max_tokens tokens (nothing is
// allocated per step). Slot s = t * top_k + r is token t's rank r.
struct MoeRouting {
  int64_t n_tokens = 0, n_experts = 0, top_k = 0;
  std::vector<int32_t> ids;          // [T * top_k] expert of slot s
  std::vector<float> weights;        // [T * top_k] weight of slot s
  std::vector<int32_t> offsets;      // [E + 1] expert e's rows: [offsets[e], offsets[e + 1]) in sorted order
  std::vector<int32_t> row_token;    // [T * top_k] sorted row -> its token
  std::vector<int32_t> row_of_slot;  // [T * top_k] slot -> its sorted row
  std::vector<float> probs;          // [E] one token's softmax (scratch)

  int64_t rows_of(int64_t e) const { return offsets[e + 1] - offsets[e]; }
};

// The routing of `logits` [T, E] f32 (T <= the capacity `r` was made for):
// softmax, top-k, weights and the grouping, by the rule above.
void moe_route(const Tensor& logits, const MoeParams& params, MoeRouting& r);

// The step's buffers for up to max_tokens tokens.
struct MoeWorkspace {
  MoeRouting routing;
  Tensor logits;  // [max_tokens, E] router output
  Tensor xs;      // [max_tokens * top_k, D] x rows in sorted order
  Tensor gate;    // [max_tokens * top_k, F]
  Tensor up;      // [max_tokens * top_k, F]
  Tensor ys;      // [max_tokens * top_k, D] each row's expert output
};
MoeWorkspace make_moe_workspace(int64_t max_tokens, int64_t n_experts, int64_t top_k, int64_t dim,
                                int64_t ffn);
// The matmul scratch bytes moe_ffn needs (ops/matmul/matmul.h) for max_tokens tokens.
int64_t moe_matmul_scratch_bytes(int64_t max_tokens, int64_t top_k, int64_t dim, int64_t ffn);

// Plain truth: each token on its own, router and experts dequantized and
// dotted in double, softmax and weights in double.
//   x [T, D] f32, router [E, D], y [T, D] f32
void moe_ffn_ref(const Tensor& x, const Tensor& router, const MoeExperts& experts, const MoeParams& params,
                 Tensor& y);

// Fast path: the router and every routed expert through the CPU matmul;
// ws.routing holds the step's routing afterwards.
// PRECOND: T <= ws's max_tokens, scratch >= moe_matmul_scratch_bytes.
void moe_ffn(const Tensor& x, const Tensor& router, const MoeExperts& experts, const MoeParams& params,
             MoeWorkspace& ws, Tensor& y, ThreadPool& pool, std::span<std::byte> scratch);

}  // namespace nanoserve
