#pragma once
// The architectures the CPU forward runs, by their GGUF names, and how each
// departs from llama. One forward (model/llama.h) serves them all:
//
//   arch    GGUF general.architecture   HF model_type       differs from llama by
//   llama   llama                       llama, mistral      -
//   qwen2   qwen2                       qwen2               biases on q, k, v
//   qwen3   qwen3                       qwen3               RMSNorm of each q and k head before rope
//   phi3    phi3                        phi3                one fused qkv and one fused gate_up tensor
//
// Mistral is llama (llama.cpp's converter writes it as general.architecture
// "llama"); what Mistral adds, a sliding window, is refused where it applies.
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

struct ArchInfo {
  const char* name;                // general.architecture
  bool qkv_bias = false;           // q, k, v projections add a bias
  bool qk_norm = false;            // per-head RMSNorm of q and k (over head_dim) before rope
  bool fused_qkv_gate_up = false;  // attn_qkv = [q; k; v] rows, ffn_up = [gate; up] rows
  bool gguf_rope_halves = false;   // GGUF q/k rows in HF's half order (permuted at load)
};

// nullptr when `name` is not built.
const ArchInfo* find_arch(std::string_view name);
// "llama, qwen2, qwen3, phi3"
std::string built_arch_names();
// Sets the config's per-architecture flags from config.arch; UNIMPLEMENTED
// naming the architecture when it is not built.
Status apply_arch(ModelConfig& config);

// The per-layer tensors of the config's architecture, by GGUF name without
// the "blk.N." prefix, in load order.
std::vector<std::string> arch_layer_tensors(const ModelConfig& config);
// Whether a GGUF tensor name is one the forward reads for this config
// (token_embd, output_norm, output, rope_freqs, and blk.N.* of N < n_layers).
bool arch_uses_tensor(const ModelConfig& config, std::string_view name);

}  // namespace nanoserve
