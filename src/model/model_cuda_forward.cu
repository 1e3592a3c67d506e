// The CUDA model's layer stack: one step's kernels and copies, enqueued on the
// step's stream (captured as a graph by model_cuda.cu's launch).

#include <cmath>
#include <string_view>

#include "core/cuda/cuda_check.cuh"
#include "model/model_cuda.h"
#include "model/model_cuda_step.cuh"
#include "ops/argmax/argmax_cuda.cuh"
#include "ops/embedding/embedding_cuda.cuh"
#include "ops/gather/gather_cuda.cuh"
#include "ops/gelu_mul/gelu_mul_cuda.cuh"
#include "ops/matmul/linear_cuda.cuh"
#include "ops/rmsnorm/rmsnorm_cuda.cuh"
#include "ops/rope/rope_cuda.cuh"
#include "ops/rope/rope_freqs.h"
#include "ops/sample/sample_cuda.cuh"
#include "ops/silu_mul/silu_mul_cuda.cuh"
#include "ops/softcap/softcap_cuda.cuh"

namespace nanoserve {

// The step's kernels and copies, all on the step's stream, reading the batch
// from the device buffers (db) only: nothing here depends on the host batch
// beyond T, R, the output kind and the attention launch plan, so a captured
// graph of it replays for any batch that agrees on those (the sampler's
// per-row params are in a device buffer, uploaded before the launch).
void CudaModel::enqueue_step(int64_t T, int64_t R, StepOutput output) {
  const ModelConfig& c = config_;
  Step& s = *step_;
  cudaStream_t st = s.stream;
  const float eps = c.norm_eps, scale = c.attention_scale();
  const ArchInfo& family = c.arch_info();
  const bool gelu = std::string_view(family.hidden_act) != "silu";
  const int n_rep = static_cast<int>(c.n_rep());
  const DeviceBatch& db = *s.batch;
  MoeParams moe_params{static_cast<int32_t>(c.n_experts_used), c.expert_weights_norm};
  if (family.oss_experts) {  // gpt-oss: as the CPU forward's
    moe_params.gating = MoeGating::kTopKThenSoftmax;
    moe_params.activation = MoeActivation::kClampedSwiglu;
    moe_params.swiglu_alpha = c.swiglu_alpha;
    moe_params.swiglu_limit = c.swiglu_limit;
  }
  // YaRN's attention factor times the rotated q and k (1: none), as the CPU forward.
  const float rotated_scale = rope_attention_factor(c.rope_scaling);

  Tensor x = s.x.slice_rows(0, T), xn = s.xn.slice_rows(0, T), qkv = s.qkv.slice_rows(0, T);
  Tensor q = s.q.slice_rows(0, T), attn = s.attn.slice_rows(0, T), proj = s.proj.slice_rows(0, T);
  Tensor gate_up = s.gate_up.slice_rows(0, T), act = s.act.slice_rows(0, T);
  Tensor attn2 = attn.reshape({T, c.n_heads * c.head_dim});
  const bool small_step = T <= 64 || !s.limits.cublas_prefill;
  // FP8 weights run only on linear_cuda (make_cuda_runner refuses them with
  // --cublas-prefill); the cuBLASLt fallback takes bf16 weights.
  auto linear = [&](const Tensor& in, const LinearWeight& w, const Tensor& out) {
    if (small_step && linear_cuda_supports(in, w, out)) {
      linear_cuda(in, w, out, s.xperm, st);
    } else {
      NS_CHECK(!w.fp8()) << "FP8 weights of " << w.w.shape_string() << " outside linear_cuda";
      s.gemm->matmul(in, w.w, out, st);
    }
  };

  const PagedAttentionKernel attention = attention_kernel(c, s.limits.kv_dtype);
  // A norm that feeds a linear_cuda writes what the linear reads, and the
  // linear skips its own pass over x (bitwise the same product): for FP8
  // weights their E4M3 tokens (into the linears' scratch), and past the
  // streaming kernel's tokens, x in the tiled kernel's k order.
  auto norm_order = [&](const LinearWeight& w, const Tensor& out) {
    if (!small_step || !linear_cuda_supports(xn, w, out)) return RmsNormOut::kNatural;
    if (w.fp8()) return RmsNormOut::kFp8Tokens;
    return linear_cuda_tiled(T, w) ? RmsNormOut::kLinearTiled : RmsNormOut::kNatural;
  };
  auto norm_out = [&](RmsNormOut order) { return order == RmsNormOut::kFp8Tokens ? s.xperm : xn; };
  auto linear_from_norm = [&](RmsNormOut order, const LinearWeight& w, const Tensor& out) {
    if (order == RmsNormOut::kFp8Tokens) {
      linear_cuda_fp8_tokens(s.xperm, w, out, st);
    } else if (order == RmsNormOut::kLinearTiled) {
      linear_cuda_permuted(xn, w, out, st);
    } else {
      linear(xn, w, out);
    }
  };
  // proj (the sublayer's output) joins x, through its own norm first where
  // the family has sandwich norms (post: that norm's weight), then x is normed.
  auto join_norm = [&](const Tensor& post, const Tensor& w, RmsNormOut out_order) {
    if (post.defined()) {
      post_norm_add_rmsnorm_cuda(x, proj, post, w, eps, norm_out(out_order), st, out_order);
    } else {
      add_rmsnorm_cuda(x, proj, w, eps, norm_out(out_order), st, out_order);
    }
  };
  const float embed_scale = !family.scaled_embedding ? 1.0f
                            : c.embed_scale > 0.0f   ? c.embed_scale
                                                     : std::sqrt(static_cast<float>(c.dim));
  embedding_cuda(weights_.tok_embd, db.tokens(), static_cast<int32_t>(T), x, st, embed_scale);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const CudaLayer& L = weights_.layers[static_cast<size_t>(l)];
    // The previous layer's down output joins the residual inside the norm.
    const RmsNormOut qkv_in = norm_order(L.wqkv, qkv);
    if (l == 0) {
      rmsnorm_cuda(x, L.attn_norm, eps, norm_out(qkv_in), st, qkv_in);
    } else {
      join_norm(weights_.layers[static_cast<size_t>(l - 1)].post_ffn_norm, L.attn_norm, qkv_in);
    }
    linear_from_norm(qkv_in, L.wqkv, qkv);
    RopeKvExtras extras;  // the family's bias and q/k norm, fused into the rotation
    if (L.qkv_bias.defined()) extras.qkv_bias = L.qkv_bias.data_as<const float>();
    if (L.q_norm.defined()) {
      extras.q_norm = L.q_norm.data_as<const float>();
      extras.k_norm = L.k_norm.data_as<const float>();
      extras.norm_eps = eps;
    }
    extras.rotated_scale = rotated_scale;
    const Tensor& inv_freq = c.layer_local_rope(l) ? weights_.inv_freq_local : weights_.inv_freq;
    rope_kv_write_cuda(qkv, db.positions(), db.slot_mapping(), inv_freq.data_as<const float>(),
                       static_cast<int32_t>(c.rope_dim), static_cast<int32_t>(c.n_heads),
                       static_cast<int32_t>(c.n_kv_heads), q, k_pools_[static_cast<size_t>(l)],
                       v_pools_[static_cast<size_t>(l)], st, extras, kv_scales_[static_cast<size_t>(l)]);
    paged_attention_cuda(q, k_pools_[static_cast<size_t>(l)], v_pools_[static_cast<size_t>(l)], db, n_rep,
                         scale, *s.attn_ws, attn, st, attention, static_cast<int>(c.layer_window(l)),
                         c.attn_softcap, L.sinks.defined() ? L.sinks.data_as<const float>() : nullptr,
                         kv_read_scales_[static_cast<size_t>(l)]);
    linear(attn2, L.wo, proj);
    if (L.router.defined()) {  // experts: routed on the device, then the grouped expert GEMM
      add_rmsnorm_cuda(x, proj, L.ffn_norm, eps, xn, st, RmsNormOut::kNatural,
                       L.o_bias.defined() ? &L.o_bias : nullptr);
      MoeCudaBiases biases;
      if (L.router_bias.defined()) {
        biases.router = L.router_bias.data_as<const float>();
        biases.gate_up = L.exp_gate_up_bias.data_as<const float>();
        biases.down = L.exp_down_bias.data_as<const float>();
      }
      MoeForcedRouting forced;
      if (forced_ids_.defined()) {
        forced.ids = forced_ids_.data_as<const int32_t>() + l * forced_ids_.dim(1);
        forced.weights = forced_weights_.data_as<const float>() + l * forced_weights_.dim(1);
      }
      moe_ffn_cuda(xn, L.router, L.exp_gate_up, L.exp_down, moe_params, *s.moe, proj, st, biases, forced);
      continue;
    }
    NS_CHECK(!L.o_bias.defined()) << "an o_proj bias outside a layer with experts";
    const RmsNormOut gate_up_in = norm_order(L.w_gate_up, gate_up);
    join_norm(L.post_attn_norm, L.ffn_norm, gate_up_in);
    linear_from_norm(gate_up_in, L.w_gate_up, gate_up);
    if (gelu) {  // GeGLU (gemma): its own pass, then the linear
      gelu_tanh_mul_cuda(gate_up, act, st);
      linear(act, L.w_down, proj);
    } else if (small_step && linear_swiglu_cuda_supports(gate_up, L.w_down, proj)) {
      linear_swiglu_cuda(gate_up, L.w_down, proj, s.xperm, st);  // the SwiGLU in the tiled kernel's permute
    } else {
      silu_mul_cuda(gate_up, act, st);
      linear(act, L.w_down, proj);
    }
  }
  join_norm(weights_.layers.back().post_ffn_norm, weights_.output_norm, RmsNormOut::kNatural);
  if (R > 0) {
    Tensor last = s.last.slice_rows(0, R), logits = s.logits.slice_rows(0, R);
    gather_rows_cuda(xn, db.logits_rows(), static_cast<int32_t>(R), last, st);
    linear(last, weights_.lm_head, logits);
    if (c.final_softcap > 0.0f) softcap_cuda(logits, c.final_softcap, st);  // before argmax and sampling
    argmax_cuda(logits, s.argmax.data_as<int32_t>(), st);
    NS_CUDA_CHECK(cudaMemcpyAsync(s.argmax_host.get(), s.argmax.data(), static_cast<size_t>(R) * 4,
                                  cudaMemcpyDeviceToHost, st));
    if (output == StepOutput::kLogits) {
      NS_CUDA_CHECK(cudaMemcpyAsync(s.logits_host.get(), logits.data(),
                                    static_cast<size_t>(R * c.vocab_size) * 4, cudaMemcpyDeviceToHost, st));
    }
    if (output == StepOutput::kSampled || output == StepOutput::kSampledLogprobs) {
      const bool lp = output == StepOutput::kSampledLogprobs;
      auto* lp_dev = lp ? s.sample_logprobs.data_as<SampleRowLogprobs>() : nullptr;
      sample_cuda(logits, s.scaled, s.sample_params.data_as<const SampleRowParams>(),
                  s.argmax.data_as<const int32_t>(), s.sampled.data_as<int32_t>(), lp_dev, st);
      NS_CUDA_CHECK(cudaMemcpyAsync(s.sampled_host.get(), s.sampled.data(), static_cast<size_t>(R) * 4,
                                    cudaMemcpyDeviceToHost, st));
      if (lp) {
        NS_CUDA_CHECK(cudaMemcpyAsync(s.sample_logprobs_host.get(), lp_dev,
                                      static_cast<size_t>(R) * sizeof(SampleRowLogprobs),
                                      cudaMemcpyDeviceToHost, st));
      }
    }
  }
}

}  // namespace nanoserve
