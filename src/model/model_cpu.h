#pragma once
// The Llama-family forward pass on the CPU: llama (SmolLM2, Llama 2/3,
// Mistral, Mixtral), qwen2, qwen3, phi3, qwen3moe, gemma2, gemma3 and gpt-oss (model/arch.h).
//
//   x = embed(tokens) (x sqrt(dim): gemma)                   [T, dim]
//   per layer: q, k, v = qkv(rmsnorm(x)) (+ bias: qwen2)
//              q, k = rmsnorm per head (qwen3, gemma3)
//              q, k *= YaRN's attention factor (gpt-oss)
//              x += o_proj(attention(rope(q), rope(k), v))   over the KV cache, in
//                   the layer's window; scores soft-capped (gemma2); a sink
//                   logit a head in the softmax (gpt-oss); o_proj + bias
//                   (gpt-oss); the o_proj output normed first (gemma's sandwich norms)
//              x += down(act(gate(rmsnorm(x))) * up(...))    act: silu, or tanh GELU
//                   (gemma); the down output normed first (gemma)
//                or, with experts (Mixtral, qwen3moe, gpt-oss), the routed
//                experts' weighted sum of the same (ops/moe/moe.h; gpt-oss:
//                biases, top-k then softmax, a clamped SwiGLU)
//   logits = lm_head(rmsnorm(x[logits_rows]))                [R, vocab]
//            soft-capped (gemma2)
//
// phi3's fused attn_qkv and ffn_up ([gate; up]) are split at load into row
// views of the same memory, so the step is the same for every architecture.
//
// Weights come from a TensorSource by their GGUF names (a GGUF file, a Hugging
// Face checkpoint, dummy weights: model/model_source.h) and stay in their
// stored dtype, as views into a mapping where the source has one; activations are f32. Nothing is allocated
// per step but tensor-view metadata: every buffer lives in a Workspace sized up front.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/check.h"
#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "model/config.h"
#include "model/kv_cpu.h"
#include "ops/moe/moe.h"
#include "step/forward_batch.h"

namespace nanoserve {

class GgufFile;
class TensorSource;

struct LayerWeights {
  Tensor attn_norm;   // [dim] f32
  Tensor wq;          // [n_heads * head_dim, dim]
  Tensor wk;          // [n_kv_heads * head_dim, dim]
  Tensor wv;          // [n_kv_heads * head_dim, dim]
  Tensor bq, bk, bv;  // [n_heads * head_dim], [n_kv_heads * head_dim] x2 f32; qwen2 only
  Tensor q_norm;      // [head_dim] f32, qwen3 only
  Tensor k_norm;      // [head_dim] f32, qwen3 only
  Tensor wo;          // [dim, n_heads * head_dim]
  Tensor bo;          // [dim] f32; gpt-oss only
  Tensor sinks;       // [n_heads] f32 attention sink logits; gpt-oss only
  Tensor ffn_norm;    // [dim] f32
  Tensor w_gate;      // [ffn_dim, dim]
  Tensor w_up;        // [ffn_dim, dim]
  Tensor w_down;      // [dim, ffn_dim]
  // A mixture of experts instead of w_gate, w_up, w_down (config.n_experts > 0):
  Tensor router;                 // [n_experts, dim] ffn_gate_inp
  std::vector<Tensor> exp_gate;  // n_experts x [expert_ffn_dim, dim]
  std::vector<Tensor> exp_up;    // n_experts x [expert_ffn_dim, dim]
  std::vector<Tensor> exp_down;  // n_experts x [dim, expert_ffn_dim]
  // gpt-oss's biases (ArchInfo::oss_experts), f32.
  Tensor router_bias;    // [n_experts]
  Tensor exp_gate_bias;  // [n_experts, expert_ffn_dim]
  Tensor exp_up_bias;    // [n_experts, expert_ffn_dim]
  Tensor exp_down_bias;  // [n_experts, dim]

  // Sandwich norms (gemma): the o_proj and down outputs normed before each residual add.
  Tensor post_attn_norm;  // [dim] f32
  Tensor post_ffn_norm;   // [dim] f32

  // A linear above that the source returned as F8_E4M3 rows (an FP8
  // checkpoint's TensorSource::with_fp8_rows(), loaded to be uploaded to the
  // CUDA runner): its row scales, [rows] f32 each; undefined otherwise. The
  // CPU forward never sees E4M3 weights: it loads FP8 checkpoints dequantized.
  struct RowScales {
    Tensor wq, wk, wv, wo, w_gate, w_up, w_down;
  };
  RowScales scale;
};

struct ModelWeights {
  Tensor tok_embd;  // [vocab, dim]
  std::vector<LayerWeights> layers;
  Tensor output_norm;  // [dim] f32
  Tensor lm_head;      // [vocab, dim]; tok_embd itself when the embeddings are tied
};

// Wall time of each phase of forward(), summed over layers and calls, taken
// only when Workspace::profile points at one (bench/decode_profile_bench.cc).
// clang-format off
enum class ForwardPhase : int {
  kEmbed, kAttnNorm, kQkv, kRope, kAttention, kOProj, kFfnNorm, kGateUp, kSiluMul, kDown, kResidual, kLmHead,
  kExperts, kCount
};
// clang-format on
const char* forward_phase_name(ForwardPhase p);
struct ForwardProfile {
  int64_t ns[static_cast<int>(ForwardPhase::kCount)] = {};
  int64_t calls = 0;
};

// The step's buffers, sized for at most max_tokens tokens and max_logits_rows
// logits rows (attention's scratch is the KV storage's: model/kv_cpu.h).
struct Workspace {
  int64_t max_tokens = 0, max_logits_rows = 0;
  Tensor x;                               // [max_tokens, dim] residual stream
  Tensor xn;                              // [max_tokens, dim] normed input of a block
  Tensor q;                               // [max_tokens, n_heads * head_dim]
  Tensor k, v;                            // [max_tokens, n_kv_heads * head_dim]
  Tensor attn;                            // [max_tokens, n_heads * head_dim] attention output
  Tensor proj;                            // [max_tokens, dim] o_proj / down output, added to x
  Tensor gate;                            // [max_tokens, ffn_dim]
  Tensor up;                              // [max_tokens, ffn_dim]
  Tensor last;                            // [max_logits_rows, dim] the rows that need logits
  Tensor logits;                          // [max_logits_rows, vocab]
  MoeWorkspace moe;                       // the experts' buffers (config.n_experts > 0)
  // Rows each expert ran over, [n_layers, n_experts], summed over the steps
  // this workspace served: which experts' weights were read.
  std::vector<int64_t> expert_rows;
  std::vector<std::byte> matmul_scratch;  // activation blocks of the widest matmul input
  ForwardProfile* profile = nullptr;      // not owned; null: no timing
  // Each layer linear's input as the CUDA FP8 linears read it (W8A8:
  // ops/matmul/fp8_tokens.h) instead of f32: the GPU's FP8 arithmetic, as a
  // reference for it (tests/model/hf_fp8_cuda_test.cc). The lm_head, which
  // the GPU runs in bf16, and the experts keep their f32 input.
  bool fp8_tokens = false;
};

class CpuModel {
 public:
  // Checks the config and every tensor's name, shape and dtype; INVALID_ARGUMENT
  // or NOT_FOUND naming the tensor otherwise. `pool` must outlive the model.
  // The source's tensors keep their storage alive. A source that builds its
  // weights in memory (dummy) is refused with RESOURCE_EXHAUSTED when they
  // would not fit in the memory available.
  static StatusOr<std::unique_ptr<CpuModel>> load(const ModelConfig& config,
                                                    std::shared_ptr<const TensorSource> tensors,
                                                    ThreadPool& pool);
  // A GGUF file: config_from_gguf, then its tensors.
  static StatusOr<std::unique_ptr<CpuModel>> load(std::shared_ptr<const GgufFile> file, ThreadPool& pool);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  // The rotary frequencies the forward uses, scaling applied: [rope_dim / 2].
  const std::vector<float>& inv_freq() const { return inv_freq_; }
  // The local layers' (ModelConfig::rope_local_theta, unscaled); empty when
  // every layer rotates with inv_freq().
  const std::vector<float>& inv_freq_local() const { return inv_freq_local_; }
  // What rotated q and k are multiplied by: YaRN's attention factor, else 1.
  float rope_attention_factor() const { return rope_attention_factor_; }
  ThreadPool& pool() const { return pool_; }

  // PRECOND: each >= 1.
  Workspace make_workspace(int64_t max_tokens, int64_t max_logits_rows) const;
  // The model's half of the step limits: vocab_size, max_tokens and
  // max_logits_rows of `ws`; the KV storage fills its half (CpuKV::fill_limits).
  StepLimits step_limits(const Workspace& ws, const CpuKV& kv, int32_t max_seqs) const;

  // One step: writes the batch's K/V into `kv` and returns the logits of
  // batch.logits_rows, in order: [R, vocab] f32, a view into ws valid until the
  // next call. PRECOND: batch.validate(step_limits(ws, kv, ...)) passed (the
  // engine validates each step once; nothing here checks it again).
  StatusOr<Tensor> forward(const ForwardBatch& batch, CpuKV& kv, Workspace& ws) const;

 private:
  CpuModel(std::shared_ptr<const TensorSource> tensors, ModelConfig config, ThreadPool& pool)
      : tensors_(std::move(tensors)), config_(std::move(config)), pool_(pool) {}

  std::shared_ptr<const TensorSource> tensors_;  // keeps the mapping alive
  ModelConfig config_;
  ThreadPool& pool_;
  ModelWeights weights_;
  std::vector<float> inv_freq_;        // [rope_dim / 2]
  std::vector<float> inv_freq_local_;  // [rope_dim / 2] or empty
  float rope_attention_factor_ = 1.0f;
};

}  // namespace nanoserve
