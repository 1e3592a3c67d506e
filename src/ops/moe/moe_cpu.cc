// The CPU mixture of experts: routing and grouping (shared with every
// implementation: ops/moe/moe.h), then each routed expert's matmuls over its
// rows with the quantized CPU kernels of ops/matmul.

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "ops/matmul/matmul.h"
#include "ops/moe/moe.h"
#include "ops/silu_mul/silu_mul.h"

namespace nanoserve {

namespace {

// ids[0..k) = the k largest of l[0..E), highest first, a tie to the lower id;
// w = their softmax (the largest is ids[0]'s, so exp never overflows).
void route_topk_then_softmax(const float* l, int64_t E, int64_t k, int32_t* ids, float* w) {
  for (int64_t j = 0; j < k; ++j) {
    int32_t best = -1;
    for (int64_t e = 0; e < E; ++e) {
      bool taken = false;
      for (int64_t i = 0; i < j; ++i) taken |= ids[i] == e;
      if (!taken && (best < 0 || l[e] > l[best])) best = static_cast<int32_t>(e);
    }
    ids[j] = best;
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < k; ++j) sum += (w[j] = std::exp(l[ids[j]] - l[ids[0]]));
  for (int64_t j = 0; j < k; ++j) w[j] /= sum;
}

// y[i] += b[i] over rows of y [n, N], b [N] f32.
void add_row_bias(Tensor& y, const float* b) {
  const int64_t n = y.dim(0), N = y.dim(1);
  float* p = y.data_as<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < N; ++j) p[i * N + j] += b[j];
}

}  // namespace

void clamped_swiglu(Tensor& gate, const Tensor& up, float alpha, float limit) {
  NS_CHECK(gate.shape() == up.shape() && gate.dtype() == DType::kF32 && up.dtype() == DType::kF32)
      << "clamped_swiglu: gate " << gate.shape_string() << ", up " << up.shape_string();
  float* g = gate.data_as<float>();
  const float* u = up.data_as<const float>();
  for (int64_t i = 0; i < gate.numel(); ++i) {
    const float gi = std::min(g[i], limit);  // NaN passes through, as torch.clamp
    const float ui = std::clamp(u[i], -limit, limit);
    g[i] = (ui + 1.0f) * (gi * (1.0f / (1.0f + std::exp(-(gi * alpha)))));
  }
}

void moe_route(const Tensor& logits, const MoeParams& params, MoeRouting& r) {
  const int64_t T = logits.dim(0), E = logits.dim(1), k = params.top_k;
  NS_CHECK(logits.dtype() == DType::kF32 && logits.ndim() == 2)
      << "moe_route: logits " << logits.shape_string();
  NS_CHECK(k >= 1 && k <= E) << "moe_route: top_k " << k << " of " << E << " experts";
  NS_CHECK(static_cast<int64_t>(r.offsets.size()) == E + 1 && T * k <= static_cast<int64_t>(r.ids.capacity()))
      << "moe_route: routing made for " << r.offsets.size() - 1 << " experts and " << r.ids.capacity()
      << " slots, asked for " << E << " and " << T * k;
  r.n_tokens = T;
  r.n_experts = E;
  r.top_k = k;
  const auto slots = static_cast<size_t>(T * k);
  r.ids.resize(slots);  // within the capacity reserved up front: no allocation
  r.weights.resize(slots);
  r.row_token.resize(slots);
  r.row_of_slot.resize(slots);
  std::fill(r.offsets.begin(), r.offsets.end(), 0);

  const bool topk_first = params.gating == MoeGating::kTopKThenSoftmax;
  for (int64_t t = 0; t < T; ++t) {
    const float* l = logits.data_as<const float>() + t * E;
    if (topk_first) {  // gpt-oss: the top_k logits, then a softmax over them
      route_topk_then_softmax(l, E, k, r.ids.data() + t * k, r.weights.data() + t * k);
      for (int64_t j = 0; j < k; ++j) ++r.offsets[static_cast<size_t>(r.ids[t * k + j]) + 1];
      continue;
    }
    float mx = l[0];
    for (int64_t e = 1; e < E; ++e) mx = std::max(mx, l[e]);
    float* p = r.probs.data();
    float sum = 0.0f;
    for (int64_t e = 0; e < E; ++e) {
      p[e] = std::exp(l[e] - mx);
      sum += p[e];
    }
    for (int64_t e = 0; e < E; ++e) p[e] /= sum;
    int32_t* ids = r.ids.data() + t * k;
    float* w = r.weights.data() + t * k;
    // Top-k by probability, highest first; a strict > keeps the lower id on a tie.
    for (int64_t j = 0; j < k; ++j) {
      int32_t best = -1;
      float best_p = 0.0f;
      for (int64_t e = 0; e < E; ++e) {
        bool taken = false;
        for (int64_t i = 0; i < j; ++i) taken |= ids[i] == e;
        if (!taken && (best < 0 || p[e] > best_p)) {
          best = static_cast<int32_t>(e);
          best_p = p[e];
        }
      }
      ids[j] = best;
      w[j] = best_p;
      ++r.offsets[static_cast<size_t>(best) + 1];
    }
    if (params.normalize) {
      float s = 0.0f;
      for (int64_t j = 0; j < k; ++j) s += w[j];
      for (int64_t j = 0; j < k; ++j) w[j] /= s;
    }
  }
  for (int64_t e = 0; e < E; ++e) r.offsets[e + 1] += r.offsets[e];
  // Rows in expert order; within an expert in slot order (token, then rank).
  for (int64_t s = 0; s < T * k; ++s) {
    const int32_t e = r.ids[static_cast<size_t>(s)];
    // offsets[e] serves as expert e's cursor, restored after the loop.
    const int32_t row = r.offsets[static_cast<size_t>(e)]++;
    r.row_of_slot[static_cast<size_t>(s)] = row;
    r.row_token[static_cast<size_t>(row)] = static_cast<int32_t>(s / k);
  }
  for (int64_t e = E; e > 0; --e) r.offsets[e] = r.offsets[e - 1];
  r.offsets[0] = 0;
}

MoeWorkspace make_moe_workspace(int64_t max_tokens, int64_t n_experts, int64_t top_k, int64_t dim,
                                int64_t ffn) {
  NS_CHECK(max_tokens >= 1 && n_experts >= 1 && top_k >= 1 && top_k <= n_experts) << "moe workspace sizes";
  MoeWorkspace ws;
  const int64_t slots = max_tokens * top_k;
  MoeRouting& r = ws.routing;
  r.ids.reserve(static_cast<size_t>(slots));
  r.weights.reserve(static_cast<size_t>(slots));
  r.row_token.reserve(static_cast<size_t>(slots));
  r.row_of_slot.reserve(static_cast<size_t>(slots));
  r.offsets.assign(static_cast<size_t>(n_experts + 1), 0);
  r.probs.assign(static_cast<size_t>(n_experts), 0.0f);
  ws.logits = Tensor::empty(DType::kF32, {max_tokens, n_experts});
  ws.xs = Tensor::empty(DType::kF32, {slots, dim});
  ws.gate = Tensor::empty(DType::kF32, {slots, ffn});
  ws.up = Tensor::empty(DType::kF32, {slots, ffn});
  ws.ys = Tensor::empty(DType::kF32, {slots, dim});
  return ws;
}

int64_t moe_matmul_scratch_bytes(int64_t max_tokens, int64_t top_k, int64_t dim, int64_t ffn) {
  return std::max(matmul_scratch_bytes(max_tokens, dim),
                  matmul_scratch_bytes(max_tokens * top_k, std::max(dim, ffn)));
}

void moe_ffn(const Tensor& x, const Tensor& router, const MoeExperts& experts, const MoeParams& params,
             MoeWorkspace& ws, Tensor& y, ThreadPool& pool, std::span<std::byte> scratch) {
  const int64_t T = x.dim(0), D = x.dim(1), E = router.dim(0), k = params.top_k;
  NS_CHECK(static_cast<int64_t>(experts.gate.size()) == E && static_cast<int64_t>(experts.up.size()) == E &&
           static_cast<int64_t>(experts.down.size()) == E)
      << "moe_ffn: " << E << " router rows, " << experts.gate.size() << " experts";
  NS_CHECK(T <= ws.logits.dim(0) && ws.logits.dim(1) == E && ws.xs.dim(1) == D && y.dim(0) == T &&
           y.dim(1) == D)
      << "moe_ffn: x " << x.shape_string() << ", y " << y.shape_string() << ", workspace "
      << ws.xs.shape_string();
  Tensor logits = ws.logits.slice_rows(0, T);
  matmul(router, x, logits, pool, scratch);
  if (experts.router_bias != nullptr) add_row_bias(logits, experts.router_bias->data_as<const float>());
  MoeRouting& r = ws.routing;
  moe_route(logits, params, r);

  const int64_t rows = T * k;
  const auto row_bytes = static_cast<size_t>(D) * sizeof(float);
  for (int64_t i = 0; i < rows; ++i) {
    std::memcpy(ws.xs.data_as<float>() + i * D, x.data_as<const float>() + int64_t{r.row_token[i]} * D,
                row_bytes);
  }
  // Only the experts some row routes to are touched: their weights alone are read.
  for (int64_t e = 0; e < E; ++e) {
    const int64_t b = r.offsets[e], n = r.rows_of(e);
    if (n == 0) continue;
    const Tensor xe = ws.xs.slice_rows(b, b + n);
    Tensor ge = ws.gate.slice_rows(b, b + n), ue = ws.up.slice_rows(b, b + n),
           ye = ws.ys.slice_rows(b, b + n);
    const MatmulPair gate_up[] = {{&experts.gate[e], &ge}, {&experts.up[e], &ue}};
    matmul(gate_up, xe, pool, scratch);
    if (experts.gate_bias != nullptr)
      add_row_bias(ge, experts.gate_bias->data_as<const float>() + e * ge.dim(1));
    if (experts.up_bias != nullptr) add_row_bias(ue, experts.up_bias->data_as<const float>() + e * ue.dim(1));
    if (params.activation == MoeActivation::kClampedSwiglu) {
      clamped_swiglu(ge, ue, params.swiglu_alpha, params.swiglu_limit);
    } else {
      silu_mul(ge, ue, ge, pool);
    }
    matmul(experts.down[e], ge, ye, pool, scratch);
    if (experts.down_bias != nullptr) add_row_bias(ye, experts.down_bias->data_as<const float>() + e * D);
  }
  // y[t] = Σ_r w[t][r] · ys[row of (t, r)], in rank order whatever the expert order.
  for (int64_t t = 0; t < T; ++t) {
    float* out = y.data_as<float>() + t * D;
    const float* w = r.weights.data() + t * k;
    const float* o0 = ws.ys.data_as<const float>() + int64_t{r.row_of_slot[t * k]} * D;
    for (int64_t d = 0; d < D; ++d) out[d] = w[0] * o0[d];
    for (int64_t j = 1; j < k; ++j) {
      const float* o = ws.ys.data_as<const float>() + int64_t{r.row_of_slot[t * k + j]} * D;
      for (int64_t d = 0; d < D; ++d) out[d] += w[j] * o[d];
    }
  }
}

}  // namespace nanoserve
