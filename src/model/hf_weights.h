#pragma once
// A Hugging Face checkpoint (LlamaForCausalLM, MistralForCausalLM,
// Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM, MixtralForCausalLM,
// Qwen3MoeForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM,
// Gemma3ForConditionalGeneration's text part) as the model's
// tensors. The model asks by GGUF name; this maps each onto the checkpoint:
//   token_embd.weight              model.embed_tokens.weight
//   output_norm.weight             model.norm.weight
//   output.weight                  lm_head.weight (absent when tie_word_embeddings)
//   blk.N.attn_norm.weight         model.layers.N.input_layernorm.weight
//   blk.N.attn_{q,k,v}.weight      model.layers.N.self_attn.{q,k,v}_proj.weight
//   blk.N.attn_{q,k,v}.bias        model.layers.N.self_attn.{q,k,v}_proj.bias       (qwen2)
//   blk.N.attn_{q,k}_norm.weight   model.layers.N.self_attn.{q,k}_norm.weight      (qwen3)
//   blk.N.attn_qkv.weight          model.layers.N.self_attn.qkv_proj.weight        (phi3)
//   blk.N.attn_output.weight       model.layers.N.self_attn.o_proj.weight
//   blk.N.ffn_norm.weight          model.layers.N.post_attention_layernorm.weight
//   blk.N.ffn_{gate,up,down}       model.layers.N.mlp.{gate,up,down}_proj.weight
//   blk.N.ffn_up.weight            model.layers.N.mlp.gate_up_proj.weight          (phi3: [gate; up])
//   blk.N.ffn_gate_inp.weight      model.layers.N.mlp.gate.weight                  (qwen3moe: the router)
//                                  model.layers.N.block_sparse_moe.gate.weight     (Mixtral)
//   blk.N.ffn_{gate,up,down}.E.weight  model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight (qwen3moe)
//                                  model.layers.N.block_sparse_moe.experts.E.w{1,3,2}.weight  (Mixtral)
// An HF checkpoint holds one tensor per expert; the model asks for those
// when the stacked ffn_*_exps of a GGUF are absent.
// Gemma's sandwich norms rename the norms around the MLP:
//   blk.N.post_attention_norm.weight  model.layers.N.post_attention_layernorm.weight
//   blk.N.ffn_norm.weight             model.layers.N.pre_feedforward_layernorm.weight
//   blk.N.post_ffw_norm.weight        model.layers.N.post_feedforward_layernorm.weight
// and its norm weights are w of (1 + w): every *norm.weight is returned as
// 1 + w in f32, what llama.cpp's converter stores.
//
// Gemma3ForConditionalGeneration keeps its text model under
// model.language_model. (language_model.model. before transformers 4.52) and
// a vision tower beside it: the text tensors are read there, the vision
// tower's and the projector's are skipped.
//
// q and k rows are permuted at load into the adjacent-pair rotary layout
// (model/rope_layout.h), so a model gives the same logits from its GGUF and
// from its HF folder.
//
// FP8 checkpoints (model/hf_fp8.h): a weight stored as F8_E4M3 is returned
// dequantized, w * scale in f32, so every forward runs it as it runs f32
// weights; its scale tensor (X.weight_scale, X.weight_scale_inv) is read
// with it. with_fp8_rows() returns the layer linears with per-channel or
// per-tensor scales as stored instead (E4M3 rows, permuted like any q/k rows,
// and row_scales() permuted alike), for the CUDA runner's FP8 linears; their
// block-scaled weights, and any other FP8 tensor, come as bf16 there.

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors_checkpoint.h"
#include "io/tensor_source.h"
#include "model/config.h"
#include "model/hf_fp8.h"

namespace nanoserve {

// The checkpoint name for a GGUF-style name under `config`'s architecture;
// nullopt if the forward does not read such a tensor.
std::optional<std::string> hf_tensor_name(const ModelConfig& config, std::string_view gguf_name);
// The same for llama.
std::optional<std::string> hf_llama_tensor_name(std::string_view gguf_name);

class HfLlamaTensors final : public TensorSource {
 public:
  // INVALID_ARGUMENT naming the tensor when the checkpoint holds one the
  // forward would not use (a bias, an expert, ...): better refused than ignored.
  // `fp8`: config.json's quantization_config (HfModelConfig::fp8).
  static StatusOr<std::shared_ptr<const HfLlamaTensors>> create(
      std::shared_ptr<const SafetensorsCheckpoint> checkpoint, const ModelConfig& config,
      const HfFp8& fp8 = {});

  std::string describe() const override {
    return fp8_.any() ? "safetensors, " + fp8_.describe() + " weights" : "safetensors";
  }
  bool contains(std::string_view name) const override;
  StatusOr<Tensor> tensor(std::string_view name) const override;
  std::string display_name(std::string_view name) const override;
  std::shared_ptr<const TensorSource> with_fp8_rows() const override;
  StatusOr<Tensor> row_scales(std::string_view name) const override;
  const SafetensorsCheckpoint& checkpoint() const { return *ckpt_; }
  const HfFp8& fp8() const { return fp8_; }

 private:
  HfLlamaTensors(std::shared_ptr<const SafetensorsCheckpoint> c, ModelConfig config, std::string text_prefix,
                 HfFp8 fp8, bool fp8_rows)
      : ckpt_(std::move(c)),
        config_(std::move(config)),
        text_prefix_(std::move(text_prefix)),
        fp8_(fp8),
        fp8_rows_(fp8_rows) {}
  // The checkpoint's name of a GGUF-style name (hf_tensor_name under text_prefix_).
  std::optional<std::string> stored_name(std::string_view name) const;
  // The FP8 weight of GGUF name `name`, stored as `hf`, as tensor() returns it.
  StatusOr<Tensor> fp8_tensor(std::string_view name, const std::string& hf) const;
  // Whether `name` (a GGUF name) is one of the layer linears with_fp8_rows() keeps as stored.
  static bool row_scaled_linear(std::string_view name);
  std::shared_ptr<const SafetensorsCheckpoint> ckpt_;
  ModelConfig config_;
  std::string text_prefix_;  // "model.", or where a multimodal checkpoint keeps its text model
  HfFp8 fp8_;
  bool fp8_rows_ = false;  // with_fp8_rows(): row-scaled FP8 linears as stored
};

}  // namespace nanoserve
