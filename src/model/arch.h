#pragma once
// The architectures the CPU forward runs, by their GGUF names, and how each
// departs from llama. One forward a device (model/model_cpu.h,
// model/model_cuda.h) serves them all:
//
// This table is the one place a family's arithmetic is described: the CPU
// forward (model_cpu.cc), the CUDA forward (model_cuda.cu), the loaders and
// inspect read its row, and each branches on a field only where the
// arithmetic really differs. Adding a family is its row, those branches, and
// its test against transformers (tests/model/families_*).
//
//   arch    GGUF general.architecture   HF model_type       differs from llama by
//   llama   llama                       llama, mistral      -
//   qwen2   qwen2                       qwen2               biases on q, k, v
//   qwen3   qwen3                       qwen3               RMSNorm of each q and k head before rope
//   phi3    phi3                        phi3                one fused qkv and one fused gate_up tensor
//   qwen3moe qwen3moe                   qwen3_moe           qwen3 with a mixture of experts in every layer
//
// Mixture of experts. Mixtral is llama with experts (llama.cpp writes it as
// "llama" with expert_count; HF model_type mixtral); Qwen3-MoE is its own
// row, which always has them. What a checkpoint sets (expert count, top-k,
// expert ffn, normalisation) is in ModelConfig; the feed-forward of such a
// layer is ops/moe/moe.h: a router, ffn_gate_inp [n_experts, dim], and the
// experts stacked into ffn_{gate,up,down}_exps [n_experts, ...] (or one
// tensor per expert, ffn_{gate,up,down}.E, as older llama.cpp files and HF
// checkpoints hold them).
//   gemma2  gemma2                      gemma2              (1 + w) norms, sandwich norms, GeGLU (tanh
//                                                           GELU), embedding x sqrt(dim); its checkpoints
//                                                           add soft-caps and alternating windows
//   gemma3  gemma3                      gemma3_text,        gemma2's, plus q/k norm; local layers
//                                       gemma3 (text part)  rotate with their own theta, unscaled
//   gpt-oss gpt-oss                     gpt_oss             q/k/v/o biases, a sink logit per head,
//                                                           experts in every layer with biases,
//                                                           top-k then softmax, a clamped SwiGLU;
//                                                           its checkpoints add alternating 128-token
//                                                           windows, YaRN and MXFP4 experts
//
// What a checkpoint sets rather than its family (tied embeddings, norm eps,
// rope theta and scaling) is in ModelConfig; config_hf.cc holds the HF config
// classes' defaults for keys a config.json leaves out.
//
// Mistral is llama (llama.cpp's converter writes it as general.architecture
// "llama"); what Mistral 7B v0.1 adds, a sliding window, is a ModelConfig
// field (every layer's window), on both devices.
//
// RoPE rows. The forward rotates adjacent pairs (2i, 2i+1) of each head. GGUF
// llama files are stored that way (the converter permutes q/k); qwen2, qwen3
// and phi3 files, like every HF checkpoint, keep HF's halves (i, i + hd/2),
// which llama.cpp rotates as "NEOX". For those the loader permutes the rows of
// q and k (and of their biases and norms) once at load: model/rope_layout.h.

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace nanoserve {

struct ModelConfig;

// How a family's GGUF files pair the q/k dims that rope rotates together.
enum class RopePairs : uint8_t {
  kAdjacent,  // (2i, 2i + 1): llama.cpp's converter permuted the rows ("NORM")
  kHalves,    // (i, i + hd/2), as every HF checkpoint: permuted at load ("NEOX")
};

// Whether a family's layers have experts.
enum class ArchExperts : uint8_t {
  kNever,     // a dense MLP always
  kOptional,  // dense, or experts when the checkpoint has them (llama: Mixtral)
  kAlways,    // experts in every layer (qwen3moe)
};

struct ArchInfo {
  const char* name;                // general.architecture
  bool qkv_bias = false;           // q, k, v projections add a bias
  bool qk_norm = false;            // per-head RMSNorm of q and k (over head_dim) before rope
  bool fused_qkv_gate_up = false;  // attn_qkv = [q; k; v] rows, ffn_up = [gate; up] rows
  RopePairs gguf_rope_pairs = RopePairs::kAdjacent;
  // The MLP's gate activation, as HF's hidden_act names it: down(act(gate) * up).
  // "silu" or "gelu_pytorch_tanh" (GELU's tanh approximation: GeGLU).
  const char* hidden_act = "silu";
  ArchExperts experts = ArchExperts::kNever;
  // Gemma. HF keeps each RMSNorm weight as w and applies (1 + w); llama.cpp's
  // converter stores 1 + w. The HF loader adds the 1 (in f32, as transformers
  // does), so both formats give the forward the same weights.
  bool norm_plus_one = false;
  // A norm after attention and one after the MLP, each applied to the block's
  // output before the residual add (post_attention_norm, post_ffw_norm).
  bool sandwich_norms = false;
  // The embedding is multiplied by sqrt(dim) (ModelConfig::embed_scale).
  bool scaled_embedding = false;
  // Its configs may soft-cap attention scores and final logits
  // (ModelConfig::attn_softcap, final_softcap); elsewhere the keys are refused.
  bool logit_softcaps = false;
  // gpt-oss. The o projection adds a bias (attn_output.bias).
  bool o_bias = false;
  // One learned logit a query head joins each softmax's denominator
  // (attn_sinks.weight [n_heads]; ops/attention/attention.h).
  bool attn_sinks = false;
  // The experts of ops/moe/moe.h's gpt-oss rule: router and expert biases
  // (ffn_gate_inp.bias, ffn_{gate,up,down}_exps.bias), the top-k of the
  // logits then a softmax over those k, and the clamped SwiGLU
  // (ModelConfig::swiglu_alpha, swiglu_limit).
  bool oss_experts = false;
  // The GGUF name of the norm before the MLP (llama.cpp's gpt-oss files call
  // it post_attention_norm, after HF's post_attention_layernorm).
  const char* ffn_norm_name = "ffn_norm.weight";
};

// nullptr when `name` is not built.
const ArchInfo* find_arch(std::string_view name);
// "llama, qwen2, qwen3, phi3"
std::string built_arch_names();
// Points config.family at config.arch's row; UNIMPLEMENTED naming the
// architecture when it is not built.
Status apply_arch(ModelConfig& config);

// The per-layer tensors of the config's architecture, by GGUF name without
// the "blk.N." prefix, in load order. A layer with experts lists the stacked
// ffn_{gate,up,down}_exps; arch_expert_tensors names the per-expert ones
// that may stand in for them.
std::vector<std::string> arch_layer_tensors(const ModelConfig& config);
// ffn_gate.E.weight, ffn_up.E.weight, ffn_down.E.weight (no "blk.N." prefix).
std::vector<std::string> arch_expert_tensors(int64_t expert);
// Whether a GGUF tensor name is one the forward reads for this config
// (token_embd, output_norm, output, rope_freqs, and blk.N.* of N < n_layers).
bool arch_uses_tensor(const ModelConfig& config, std::string_view name);

}  // namespace nanoserve
