#pragma once
// Engine flags shared by generate, bench and serve: where the model comes
// from (--load-format, --model-shape), scheduler limits, the KV pool size and
// dtype, prefix caching, threads.

#include <CLI/CLI.hpp>

#include <string>

#include "core/status.h"
#include "engine/engine.h"
#include "model/model_source.h"

namespace nanoserve::cli {

struct EngineFlags {
  EngineConfig config;
  std::string kv_cache_memory;          // "1073741824", "512M", "2G"
  std::string kv_cache_dtype = "auto";  // auto | f32 | f16 | bf16
  int threads = 0;                      // 0: all cores
  std::string device = "auto";          // auto | cpu | cuda
  std::string load_format = "auto";     // auto | gguf | safetensors | dummy
  std::string model_shape;              // dummy: llama-3-8b, llama-3.2-1b, smollm2-135m
  // --max-model-len above the model's context length is refused unless this
  // (or vLLM's VLLM_ALLOW_LONG_MAX_MODEL_LEN=1) allows it.
  bool allow_long_max_model_len = false;
};

void add_engine_flags(CLI::App* sub, EngineFlags& flags);

// The EngineConfig the flags describe; INVALID_ARGUMENT naming the flag.
StatusOr<EngineConfig> engine_config_from_flags(const EngineFlags& flags);

// The checks that need the model's config (read without its weights):
// --max-model-len against the model's context length. Call before anything
// starts. Also warns, once, when --threads exceeds the cores.
Status check_flags_against_model(const EngineFlags& flags, const ModelSpec& spec);

// Where the model comes from: `model_arg` (-m; empty: the default model) with
// --load-format and --model-shape. With a shape the weights are dummy and the
// tokenizer is -m's (the default model's without -m). INVALID_ARGUMENT naming
// the flag: an unknown format or shape, a shape without --load-format dummy.
StatusOr<ModelSpec> model_spec_from_flags(const EngineFlags& flags, const std::string& model_arg);

}  // namespace nanoserve::cli
