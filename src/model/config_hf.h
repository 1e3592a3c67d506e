#pragma once
// A Hugging Face config.json into ModelConfig. Built: LlamaForCausalLM and
// MistralForCausalLM (arch llama), Qwen2ForCausalLM, Qwen3ForCausalLM,
// Phi3ForCausalLM, Gemma2ForCausalLM and Gemma3ForCausalLM (with
// Gemma3ForConditionalGeneration's text_config) (model/arch.h). Any other
// architecture, and features the forward does not have (Qwen's per-layer
// sliding windows, experts, logit soft-capping outside Gemma, attention or
// MLP biases beyond qwen2's, partial rotary,
// activations other than silu, rope types other than default / linear /
// llama3, yarn: longrope, su, dynamic ...), are refused by name. GptOssForCausalLM
// (arch gpt-oss) reads its experts, layer_types, swiglu_alpha / swiglu_limit
// and YaRN. A wrong type or a value
// out of range names the key: "config.json: 'num_key_value_heads': expected an integer".
// quantization_config is read by read_hf_fp8: FP8 checkpoints load, any
// other quantization is refused by name.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/config.h"
#include "model/hf_fp8.h"

namespace nanoserve {

struct HfModelConfig {
  ModelConfig config;
  int32_t bos_id = -1;           // bos_token_id; -1: absent
  std::vector<int32_t> eos_ids;  // eos_token_id, an id or a list of them
  std::string torch_dtype;       // "bfloat16", ...; empty if absent (informational)
  HfFp8 fp8;                     // quantization_config: FP8 weights (model/hf_fp8.h), or none
  bool mxfp4 = false;            // quantization_config {quant_method: mxfp4}: gpt-oss's experts as
                                 // *_blocks / *_scales (model/hf_gptoss.h)
};

// `name` starts every message (the file's path).
StatusOr<HfModelConfig> config_from_hf_json(const nlohmann::json& j, const std::string& name = "config.json");
StatusOr<HfModelConfig> config_from_hf_file(const std::string& path);

}  // namespace nanoserve
