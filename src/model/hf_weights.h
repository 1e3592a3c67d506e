#pragma once
// A Hugging Face LlamaForCausalLM checkpoint as the model's tensors. The model
// asks by GGUF name; this maps each onto the checkpoint:
//   token_embd.weight           model.embed_tokens.weight
//   output_norm.weight          model.norm.weight
//   output.weight               lm_head.weight (absent when tie_word_embeddings)
//   blk.N.attn_norm.weight      model.layers.N.input_layernorm.weight
//   blk.N.attn_{q,k,v}.weight   model.layers.N.self_attn.{q,k,v}_proj.weight
//   blk.N.attn_output.weight    model.layers.N.self_attn.o_proj.weight
//   blk.N.ffn_norm.weight       model.layers.N.post_attention_layernorm.weight
//   blk.N.ffn_{gate,up,down}    model.layers.N.mlp.{gate,up,down}_proj.weight
//
// RoPE convention. HF rotates the pairs (i, i + head_dim/2) of each head
// (rotate_half); ops/rope rotates adjacent pairs (2i, 2i+1), the layout that
// llama.cpp's converter produces by permuting the q/k rows of every head. The
// same permutation is applied here at load, into owned memory:
//   our row h*hd + 2i + j  =  HF row h*hd + j*(hd/2) + i      (j in {0, 1}, i < hd/2)
// so that a model gives the same logits from its GGUF and from its HF folder.

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors_checkpoint.h"
#include "io/tensor_source.h"
#include "model/config.h"

namespace nanoserve {

// The checkpoint name for a GGUF-style name; nullopt if the name is not one
// of the llama tensors above.
std::optional<std::string> hf_llama_tensor_name(std::string_view gguf_name);

// Rows of a [n_heads * head_dim, K] projection in HF order into the adjacent-
// pair order (above). PRECOND: head_dim even, a plain (non-quantized) dtype.
Tensor permute_rope_rows(const Tensor& w, int64_t n_heads, int64_t head_dim);

class HfLlamaTensors final : public TensorSource {
 public:
  // INVALID_ARGUMENT naming the tensor when the checkpoint holds one the llama
  // forward would not use (a bias, an expert, ...): better refused than ignored.
  static StatusOr<std::shared_ptr<const HfLlamaTensors>> create(
      std::shared_ptr<const SafetensorsCheckpoint> checkpoint, const ModelConfig& config);

  std::string describe() const override { return "safetensors"; }
  bool contains(std::string_view name) const override;
  StatusOr<Tensor> tensor(std::string_view name) const override;
  std::string display_name(std::string_view name) const override;
  const SafetensorsCheckpoint& checkpoint() const { return *ckpt_; }

 private:
  HfLlamaTensors(std::shared_ptr<const SafetensorsCheckpoint> c, ModelConfig config)
      : ckpt_(std::move(c)), config_(std::move(config)) {}
  std::shared_ptr<const SafetensorsCheckpoint> ckpt_;
  ModelConfig config_;
};

}  // namespace nanoserve
