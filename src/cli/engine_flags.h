#pragma once
// Engine flags shared by generate, bench and serve: where the model comes
// from (--load-format, --model-shape), scheduler limits, the KV pool size and
// dtype, prefix caching, threads.

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"
#include "model/model_source.h"

namespace nanoserve::cli {

struct EngineFlags {
  EngineConfig config;
  // The scheduler's limits; unset: the device's (set_step_limits).
  std::optional<int32_t> max_num_seqs;
  std::optional<int32_t> max_num_batched_tokens;
  std::string kv_cache_memory;          // "1073741824", "512M", "2G"
  std::string kv_cache_dtype = "auto";  // auto | f32 | f16 | bf16 | fp8 | fp8_e4m3 (fp8_e5m2 refused)
  int threads = 0;                      // 0: all cores
  std::string device = "auto";          // auto | cpu | cuda
  std::string load_format = "auto";     // auto | gguf | safetensors | dummy
  std::string model_shape;  // dummy: model_shape_names() (model/model_shapes.h)
  // --max-model-len above the model's context length is refused unless this
  // (or vLLM's VLLM_ALLOW_LONG_MAX_MODEL_LEN=1) allows it.
  bool allow_long_max_model_len = false;
  std::optional<double> gpu_memory_utilization;  // CUDA only; unset: 0.9. Refused on a CPU run.
  std::string speculative_config;        // JSON, as vLLM's --speculative-config (engine/speculative.h)
  std::string preemption_mode = "auto";  // auto | swap | recompute (vLLM's --preemption-mode)

  // vLLM's engine flags, taken so that its command lines run (cli/vllm_flags.h).
  std::string dtype = "auto";  // auto | half | float16 | bfloat16 | float | float32
  int tensor_parallel_size = 1;
  int pipeline_parallel_size = 1;
  int data_parallel_size = 1;
  bool trust_remote_code = false;            // no effect: no model code is ever run
  std::string quantization;                  // refused: quantized weights come as GGUF files
  std::string tokenizer;                     // a tokenizer other than the model's: a GGUF file or HF folder
  std::string revision;                      // of a hub id
  std::string download_dir;                  // where hub ids are downloaded
  std::string distributed_executor_backend;  // no effect on one device
  bool enable_chunked_prefill = false;       // always on here
  std::optional<double> swap_space;          // GiB of host swap area (unset: 4 on CUDA, 0 on the CPU)
  bool enable_lora = false;                  // refused
  std::vector<std::string> lora_modules;     // refused
};

void add_engine_flags(CLI::App* sub, EngineFlags& flags);

// The EngineConfig the flags describe; INVALID_ARGUMENT naming the flag.
StatusOr<EngineConfig> engine_config_from_flags(const EngineFlags& flags);

// The checks that need the model's config (read without its weights):
// --max-model-len against the model's context length. Call once, before
// anything starts: it also says, once, what a flag taken without effect does
// (--trust-remote-code, --enforce-eager on the CPU, ...), and warns when
// --threads exceeds the cores.
Status check_flags_against_model(const EngineFlags& flags, const ModelSpec& spec);

// Where the model comes from: `model_arg` (-m; empty: the default model) with
// --load-format and --model-shape. With a shape the weights are dummy and the
// tokenizer is -m's (the default model's without -m). INVALID_ARGUMENT naming
// the flag: an unknown format or shape, a shape without --load-format dummy.
StatusOr<ModelSpec> model_spec_from_flags(const EngineFlags& flags, const std::string& model_arg);

}  // namespace nanoserve::cli
