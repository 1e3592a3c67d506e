#pragma once
// Named model shapes: the ModelConfig of a well-known model, for dummy
// (random) weights in benchmarks (--load-format dummy --model-shape NAME).
//   llama-3-8b     32 layers, dim 4096, 32 heads / 8 kv, head_dim 128, ffn 14336,
//                  vocab 128256, theta 500000, llama3 scaling x8 (low 1, high 4,
//                  original 8192), eps 1e-5, separate lm_head, context 8192
//   llama-3.2-1b   16 layers, dim 2048, 32 heads / 8 kv, head_dim 64, ffn 8192,
//                  vocab 128256, theta 500000, llama3 scaling x32 (low 1, high 4,
//                  original 8192), eps 1e-5, tied, context 131072
//   smollm2-135m   the default model: 30 layers, dim 576, 9 heads / 3 kv, head_dim
//                  64, ffn 1536, vocab 49152, theta 100000, eps 1e-5, tied, context 8192
//   qwen3-30b-a3b  qwen3moe: 48 layers, dim 2048, 32 heads / 4 kv, head_dim 128,
//                  128 experts of ffn 768, 8 routed per token (weights
//                  normalized), vocab 151936, theta 1e6, eps 1e-6, separate
//                  lm_head, context 40960 (30.5B parameters, 3.3B active)
//   gemma-3-12b    gemma3 (text): 48 layers, dim 3840, 16 heads / 8 kv, head_dim
//                  256, ffn 15360 (GeGLU), vocab 262208, 5 local layers (window
//                  1024, theta 10000) to each global one (theta 1e6, linear
//                  scaling x8), query_pre_attn_scalar 256, eps 1e-6, tied and
//                  scaled by sqrt(3840) in bf16, context 131072 (11.77B parameters)

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/config.h"

namespace nanoserve {

// INVALID_ARGUMENT listing the known names for any other.
StatusOr<ModelConfig> model_shape(std::string_view name);
const std::vector<std::string>& model_shape_names();
// Parameters of a config's weights (embedding, layers with every expert,
// final norm, lm_head unless tied).
int64_t model_param_count(const ModelConfig& c);

}  // namespace nanoserve
