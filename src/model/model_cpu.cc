#include "model/model_cpu.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <string_view>

#include "ops/embedding/embedding.h"
#include "ops/gelu_mul/gelu_mul.h"
#include "ops/matmul/fp8_tokens.h"
#include "ops/matmul/matmul.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "ops/rope/rope.h"
#include "ops/silu_mul/silu_mul.h"

namespace nanoserve {

namespace {

void add_into(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

// y[t] += b for every row t of y [T, N]; b [N] f32.
void add_bias(Tensor& y, const Tensor& b) {
  const int64_t T = y.dim(0), N = y.dim(1);
  const float* bias = b.data_as<const float>();
  for (int64_t t = 0; t < T; ++t) add_into(y.data_as<float>() + t * N, bias, N);
}

void scale_into(float* x, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

// x = cap * tanh(x / cap), as transformers writes it (a division, not a
// multiplication by 1 / cap).
void softcap_into(float* x, float cap, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

// Charges the time since the previous mark to a phase; free when off.
class PhaseClock {
 public:
  explicit PhaseClock(ForwardProfile* p) : p_(p) {
    if (p_ != nullptr) {
      ++p_->calls;
      last_ = std::chrono::steady_clock::now();
    }
  }
  void mark(ForwardPhase phase) {
    if (p_ == nullptr) return;
    const auto now = std::chrono::steady_clock::now();
    p_->ns[static_cast<int>(phase)] +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_).count();
    last_ = now;
  }

 private:
  ForwardProfile* p_;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace

const char* forward_phase_name(ForwardPhase p) {
  switch (p) {
    case ForwardPhase::kEmbed: return "embedding";
    case ForwardPhase::kAttnNorm: return "attn rmsnorm";
    case ForwardPhase::kQkv: return "qkv matmul";
    case ForwardPhase::kRope: return "rope";
    case ForwardPhase::kAttention: return "attention (+ kv write)";
    case ForwardPhase::kOProj: return "o_proj matmul";
    case ForwardPhase::kFfnNorm: return "ffn rmsnorm";
    case ForwardPhase::kGateUp: return "gate+up matmul";
    case ForwardPhase::kSiluMul: return "silu_mul";
    case ForwardPhase::kDown: return "down matmul";
    case ForwardPhase::kResidual: return "residual adds";
    case ForwardPhase::kLmHead: return "final norm + lm_head";
    case ForwardPhase::kExperts: return "experts (router, routed matmuls)";
    case ForwardPhase::kCount: break;
  }
  return "?";
}

Workspace CpuModel::make_workspace(int64_t max_tokens, int64_t max_logits_rows) const {
  NS_CHECK(max_tokens >= 1 && max_logits_rows >= 1) << "workspace sizes";
  const ModelConfig& c = config_;
  const int64_t T = max_tokens, q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
  Workspace ws;
  ws.max_tokens = T;
  ws.max_logits_rows = max_logits_rows;
  ws.x = Tensor::empty(DType::kF32, {T, c.dim});
  ws.xn = Tensor::empty(DType::kF32, {T, c.dim});
  ws.q = Tensor::empty(DType::kF32, {T, q_dim});
  ws.k = Tensor::empty(DType::kF32, {T, kv_dim});
  ws.v = Tensor::empty(DType::kF32, {T, kv_dim});
  ws.attn = Tensor::empty(DType::kF32, {T, q_dim});
  ws.proj = Tensor::empty(DType::kF32, {T, c.dim});
  int64_t widest = std::max({c.dim, c.ffn_dim, q_dim});
  int64_t scratch = 0;
  if (c.n_experts > 0) {  // no dense MLP
    ws.moe = make_moe_workspace(T, c.n_experts, c.n_experts_used, c.dim, c.expert_ffn_dim);
    ws.expert_rows.assign(static_cast<size_t>(c.n_layers * c.n_experts), 0);
    widest = std::max(c.dim, q_dim);
    scratch = moe_matmul_scratch_bytes(T, c.n_experts_used, c.dim, c.expert_ffn_dim);
  } else {
    ws.gate = Tensor::empty(DType::kF32, {T, c.ffn_dim});
    ws.up = Tensor::empty(DType::kF32, {T, c.ffn_dim});
  }
  ws.last = Tensor::empty(DType::kF32, {max_logits_rows, c.dim});
  ws.logits = Tensor::empty(DType::kF32, {max_logits_rows, c.vocab_size});
  scratch = std::max(scratch, matmul_scratch_bytes(T, widest));
  ws.matmul_scratch.resize(static_cast<size_t>(scratch));
  return ws;
}

StepLimits CpuModel::step_limits(const Workspace& ws, const CpuKV& kv, int32_t max_seqs) const {
  StepLimits lim;
  lim.vocab_size = config_.vocab_size;
  lim.max_tokens = static_cast<int32_t>(ws.max_tokens);
  lim.max_seqs = max_seqs;
  lim.max_logits_rows = static_cast<int32_t>(ws.max_logits_rows);
  kv.fill_limits(lim);
  return lim;
}

StatusOr<Tensor> CpuModel::forward(const ForwardBatch& batch, CpuKV& kv, Workspace& ws) const {
  const ModelConfig& c = config_;
  const int64_t T = batch.num_tokens(), R = static_cast<int64_t>(batch.logits_rows.size());
  const int64_t hd = c.head_dim;
  const int n_rep = static_cast<int>(c.n_rep());
  const float scale = c.attention_scale();
  const float eps = c.norm_eps;
  const ArchInfo& family = c.arch_info();
  const bool gelu = std::string_view(family.hidden_act) != "silu";
  ThreadPool& pool = pool_;
  std::span<std::byte> mm_scratch(ws.matmul_scratch);

  Tensor x = ws.x.slice_rows(0, T), xn = ws.xn.slice_rows(0, T);
  Tensor q = ws.q.slice_rows(0, T), k = ws.k.slice_rows(0, T), v = ws.v.slice_rows(0, T);
  Tensor attn = ws.attn.slice_rows(0, T), proj = ws.proj.slice_rows(0, T);
  const bool moe = c.n_experts > 0;
  Tensor gate = moe ? Tensor() : ws.gate.slice_rows(0, T), up = moe ? Tensor() : ws.up.slice_rows(0, T);
  MoeParams moe_params{static_cast<int32_t>(c.n_experts_used), c.expert_weights_norm};
  if (family.oss_experts) {
    moe_params.gating = MoeGating::kTopKThenSoftmax;
    moe_params.activation = MoeActivation::kClampedSwiglu;
    moe_params.swiglu_alpha = c.swiglu_alpha;
    moe_params.swiglu_limit = c.swiglu_limit;
  }
  const float mscale = rope_attention_factor_;
  // Per-head views of the same memory: [T, heads, head_dim].
  Tensor q3 = q.reshape({T, c.n_heads, hd}), k3 = k.reshape({T, c.n_kv_heads, hd});
  Tensor v3 = v.reshape({T, c.n_kv_heads, hd}), attn3 = attn.reshape({T, c.n_heads, hd});
  Tensor q_heads = q.reshape({T * c.n_heads, hd}), k_heads = k.reshape({T * c.n_kv_heads, hd});
  const std::span<const int32_t> positions(batch.positions);
  auto linear_input = [&](Tensor& t) {
    if (ws.fp8_tokens) e4m3_tokens_round_trip(t.data_as<float>(), T, t.dim(1));
  };

  PhaseClock clock(ws.profile);
  embedding(weights_.tok_embd, batch.tokens, x, pool);
  if (family.scaled_embedding) {
    scale_into(x.data_as<float>(),
               c.embed_scale > 0.0f ? c.embed_scale : std::sqrt(static_cast<float>(c.dim)), T * c.dim);
  }
  clock.mark(ForwardPhase::kEmbed);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = weights_.layers[static_cast<size_t>(l)];
    rmsnorm(x, L.attn_norm, eps, xn, pool);
    clock.mark(ForwardPhase::kAttnNorm);
    const MatmulPair qkv[] = {{&L.wq, &q}, {&L.wk, &k}, {&L.wv, &v}};
    linear_input(xn);
    matmul(qkv, xn, pool, mm_scratch);
    if (c.arch_info().qkv_bias) {
      add_bias(q, L.bq);
      add_bias(k, L.bk);
      add_bias(v, L.bv);
    }
    clock.mark(ForwardPhase::kQkv);
    if (c.arch_info().qk_norm) {  // each head normed over head_dim: [T * heads, head_dim]
      rmsnorm(q_heads, L.q_norm, eps, q_heads, pool);
      rmsnorm(k_heads, L.k_norm, eps, k_heads, pool);
      clock.mark(ForwardPhase::kAttnNorm);
    }
    const std::vector<float>& freqs = c.layer_local_rope(l) ? inv_freq_local_ : inv_freq_;
    rope(q3, positions, freqs, pool);
    rope(k3, positions, freqs, pool);
    if (mscale != 1.0f) {  // transformers scales cos and sin: both rotated q and k
      scale_into(q.data_as<float>(), mscale, T * c.n_heads * hd);
      scale_into(k.data_as<float>(), mscale, T * c.n_kv_heads * hd);
    }
    clock.mark(ForwardPhase::kRope);
    kv.attend(static_cast<int>(l), batch, q3, k3, v3, n_rep, scale, attn3, c.layer_window(l), c.attn_softcap,
              family.attn_sinks ? L.sinks.data_as<const float>() : nullptr);
    clock.mark(ForwardPhase::kAttention);
    linear_input(attn);
    matmul(L.wo, attn, proj, pool, mm_scratch);
    if (family.o_bias) add_bias(proj, L.bo);
    clock.mark(ForwardPhase::kOProj);
    if (family.sandwich_norms) {
      rmsnorm(proj, L.post_attn_norm, eps, proj, pool);
      clock.mark(ForwardPhase::kAttnNorm);
    }
    add_into(x.data_as<float>(), proj.data_as<const float>(), T * c.dim);
    clock.mark(ForwardPhase::kResidual);

    rmsnorm(x, L.ffn_norm, eps, xn, pool);
    clock.mark(ForwardPhase::kFfnNorm);
    if (moe) {
      MoeExperts experts{L.exp_gate, L.exp_up, L.exp_down};
      if (family.oss_experts) {
        experts.router_bias = &L.router_bias;
        experts.gate_bias = &L.exp_gate_bias;
        experts.up_bias = &L.exp_up_bias;
        experts.down_bias = &L.exp_down_bias;
      }
      moe_ffn(xn, L.router, experts, moe_params, ws.moe, proj, pool, mm_scratch);
      int64_t* rows = ws.expert_rows.data() + l * c.n_experts;
      for (int64_t e = 0; e < c.n_experts; ++e) rows[e] += ws.moe.routing.rows_of(e);
      clock.mark(ForwardPhase::kExperts);
      add_into(x.data_as<float>(), proj.data_as<const float>(), T * c.dim);
      clock.mark(ForwardPhase::kResidual);
      continue;
    }
    const MatmulPair gate_up[] = {{&L.w_gate, &gate}, {&L.w_up, &up}};
    linear_input(xn);
    matmul(gate_up, xn, pool, mm_scratch);
    clock.mark(ForwardPhase::kGateUp);
    if (gelu) {
      gelu_tanh_mul(gate, up, gate, pool);
    } else {
      silu_mul(gate, up, gate, pool);
    }
    clock.mark(ForwardPhase::kSiluMul);
    linear_input(gate);
    matmul(L.w_down, gate, proj, pool, mm_scratch);
    clock.mark(ForwardPhase::kDown);
    if (family.sandwich_norms) {
      rmsnorm(proj, L.post_ffn_norm, eps, proj, pool);
      clock.mark(ForwardPhase::kFfnNorm);
    }
    add_into(x.data_as<float>(), proj.data_as<const float>(), T * c.dim);
    clock.mark(ForwardPhase::kResidual);
  }

  Tensor last = ws.last.slice_rows(0, R), logits = ws.logits.slice_rows(0, R);
  for (int64_t r = 0; r < R; ++r) {
    std::memcpy(last.data_as<float>() + r * c.dim, x.data_as<const float>() + batch.logits_rows[r] * c.dim,
                static_cast<size_t>(c.dim) * sizeof(float));
  }
  rmsnorm(last, weights_.output_norm, eps, last, pool);
  matmul(weights_.lm_head, last, logits, pool, mm_scratch);
  if (c.final_softcap > 0.0f) softcap_into(logits.data_as<float>(), c.final_softcap, R * c.vocab_size);
  clock.mark(ForwardPhase::kLmHead);
  return logits;
}

}  // namespace nanoserve
