#pragma once
// FP8 checkpoints of Hugging Face folders (docs/model-loading.md, "Quantized
// checkpoints"): linear weights stored as F8_E4M3 with their scales beside
// them, as config.json's quantization_config says.
//
//   compressed-tensors  quant_method "compressed-tensors", format
//                       float-quantized or naive-quantized; every config
//                       group's weights {num_bits 8, type float, symmetric,
//                       strategy channel | tensor | block (block_structure)};
//                       input_activations absent or dynamic. Tensors:
//                       X.weight F8_E4M3 [N, K], X.weight_scale
//                       [N, 1] or [N] (channel), [1] or [] (tensor),
//                       [ceil(N / br), ceil(K / bc)] (block).
//   fp8 (transformers)  quant_method "fp8" (FineGrainedFP8), activation_scheme
//                       dynamic, weight_block_size [br, bc] (absent: transformers'
//                       default 128 x 128; null: one scale a tensor). Tensors:
//                       X.weight F8_E4M3, X.weight_scale_inv, a multiplier
//                       despite its name, [ceil(N / br), ceil(K / bc)] or [1] / [].
//
// A weight stands for w[n, k] * scale (of its tensor, its row n, or its block
// (n / br, k / bc)), computed as one f32 multiplication, as torch does.
// A dynamic activation scheme (per token, tensor or group) is run per token
// by the CUDA FP8 linears (W8A8, as vLLM's dynamic FP8); the CPU keeps its
// activations f32 (weight-only). Anything else is refused by name with the
// key that says so: other quant_methods (gptq, awq, bitsandbytes, ...), int8
// or 4-bit weights, group-wise or asymmetric weights, static activation
// scales, output activations, a kv_cache_scheme, sparsity or transforms.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "io/safetensors_checkpoint.h"

namespace nanoserve {

// config.json's quantization_config, the parts that decide how weights load.
struct HfFp8 {
  enum class Method : uint8_t { kNone, kCompressedTensors, kFp8 };
  Method method = Method::kNone;
  // The scale layouts the config allows; a weight's scale shape picks one.
  bool tensor = false, channel = false;
  int64_t block_rows = 0, block_cols = 0;  // > 0: block-wise scales over blocks of this shape

  bool any() const { return method != Method::kNone; }
  // The suffix that replaces "weight" in a scale's name.
  const char* scale_suffix() const { return method == Method::kFp8 ? "weight_scale_inv" : "weight_scale"; }
  // "compressed-tensors FP8 (per channel)", "fp8 (128 x 128 blocks)".
  std::string describe() const;
};

// quantization_config of `config` (absent: Method::kNone). UNIMPLEMENTED for
// a scheme that is not FP8 weights as above, INVALID_ARGUMENT for a malformed
// one; both name `name` (the file) and the key.
StatusOr<HfFp8> read_hf_fp8(const nlohmann::json& config, const std::string& name);

enum class Fp8Scales : uint8_t { kTensor, kChannel, kBlock };

// One FP8 weight of a checkpoint, as stored.
struct Fp8Weight {
  Tensor w;      // [N, K] F8_E4M3, a view into the checkpoint
  Tensor scale;  // f32: [N] (kChannel; kTensor: its one scale repeated) or
                 // [ceil(N / block_rows), ceil(K / block_cols)] (kBlock)
  Fp8Scales kind = Fp8Scales::kChannel;
  int64_t block_rows = 0, block_cols = 0;  // kBlock
};

// The F8_E4M3 tensor `name` of `ckpt` and its scales. INVALID_ARGUMENT naming
// the tensor for: no quantization_config, a missing scale tensor, a scale
// shape the config does not allow, a scale that is not finite, an E4M3 NaN
// byte (0x7f, 0xff), a weight that is not 2-D.
StatusOr<Fp8Weight> read_fp8_weight(const SafetensorsCheckpoint& ckpt, const HfFp8& fp8,
                                    const std::string& name);

// w * scale into owned memory, [N, K]: f32 (each element one f32 product,
// what torch computes), or bf16 (that product rounded to nearest even).
Tensor dequantize_fp8(const Fp8Weight& w, DType out);

}  // namespace nanoserve
