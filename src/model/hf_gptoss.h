#pragma once
// gpt-oss's experts in an HF checkpoint (GptOssForCausalLM), as the stacked
// GGUF tensors the loader asks for. transformers keeps all experts of a layer
// in a few tensors, in one of two forms:
//
//   float (bf16 / f32), as x @ W:
//     mlp.experts.gate_up_proj       [E, D, 2F]  columns interleaved: 2f gate, 2f + 1 up
//     mlp.experts.down_proj          [E, F, D]
//   MXFP4 (config.json quantization_config {quant_method: mxfp4}), rows = outputs:
//     mlp.experts.gate_up_proj_blocks [E, 2F, D/32, 16] U8, two E2M1 codes a byte:
//                                     low nibble = value 2j, high = 2j + 1 of the block
//     mlp.experts.gate_up_proj_scales [E, 2F, D/32] U8, E8M0: 2^(s - 127)
//     mlp.experts.down_proj_blocks    [E, D, F/32, 16], down_proj_scales [E, D, F/32]
//   and in both forms
//     mlp.experts.gate_up_proj_bias   [E, 2F]  interleaved as the columns
//     mlp.experts.down_proj_bias      [E, D]
//
// Returned as the GGUF names (model/arch.h):
//   ffn_gate_exps.weight [E, F, D], ffn_up_exps.weight [E, F, D] (rows 2f / 2f + 1),
//   ffn_down_exps.weight [E, D, F]: the stored dtype for float checkpoints
//   (transposed), bf16 for MXFP4 ones (dequantized at load; exact: an E2M1
//   value times a power of two fits bf16's 8 mantissa bits);
//   ffn_{gate,up}_exps.bias [E, F] and ffn_down_exps.bias [E, D] in f32.
// The interleaving was checked against transformers' GptOssExperts
// (gate_up[..., ::2] is the gate) and convert_moe_packed_tensors.

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "io/safetensors_checkpoint.h"
#include "model/config.h"

namespace nanoserve {

// Whether `rest` (a layer tensor's GGUF name without "blk.N.") is one of the
// experts' tensors built here.
bool gptoss_expert_tensor_name(std::string_view rest);

// The checkpoint tensors under `layer_prefix` ("model.layers.N.") that the
// experts are built from, whichever form the checkpoint holds.
std::vector<std::string> gptoss_expert_sources(const SafetensorsCheckpoint& ckpt,
                                               const std::string& layer_prefix);

// The GGUF-named tensor `rest` of the layer, built as above; INVALID_ARGUMENT
// or NOT_FOUND naming the checkpoint tensor when a shape, a dtype or a tensor
// is wrong or missing.
StatusOr<Tensor> gptoss_expert_tensor(const SafetensorsCheckpoint& ckpt, const ModelConfig& config,
                                      const std::string& layer_prefix, std::string_view rest);

// MXFP4 rows as HF stores them into bf16: blocks [rows, G, 16] and scales
// [rows, G] (U8) -> out [rows, G * 32] bf16 (row-major).
void dequantize_hf_mxfp4(const uint8_t* blocks, const uint8_t* scales, int64_t rows, int64_t groups,
                         uint16_t* out);

}  // namespace nanoserve
