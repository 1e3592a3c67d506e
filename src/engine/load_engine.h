#pragma once
// The one call that turns a model path (GGUF file, HF folder, or dummy
// weights: model/model_source.h) into a ready Engine: the model on its
// device's runner (model/runner_cpu.h or model/runner_cuda.h), the tokenizer,
// and the KV cache sized (print engine->capacity_line() at start-up).

#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine/tokenizer_text.h"
#include "io/gguf.h"
#include "model/model_source.h"
#include "model/runner_cpu.h"
#include "tokenizer/tokenizer.h"

namespace nanoserve {

// Members in construction order; destroyed engine first, file last.
struct LoadedEngine {
  std::shared_ptr<const GgufFile> file;  // the GGUF file, when the model came from one
  ModelSource source;                    // config and tensors (its tokenizer moved below)
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<TokenizerText> text;
  std::unique_ptr<Engine> engine;
  CpuRunner* runner = nullptr;   // the CPU runner, owned by the engine; null on CUDA
  Device device = Device::kCPU;  // where the model runs
};

// auto (nullopt): CUDA when the build has it and a device is present, else the CPU.
// FAILED_PRECONDITION for cuda in a build without it.
StatusOr<Device> resolve_device(std::optional<Device> requested);

// Sets the scheduler's limits: each the given value, else the device's
// (docs/engine.md, "Default limits", has the sweep behind them: the CPU 64
// sequences and 512 tokens a step, CUDA 256 and 2,048), the token budget
// never below the sequence cap unless it is given.
void set_step_limits(Device device, std::optional<int32_t> max_num_seqs,
                     std::optional<int32_t> max_num_batched_tokens, EngineConfig* config);

// Opens the model (open_model_source), loads weights and tokenizer, and sizes
// the KV cache. `pool` must outlive the result. Every built family runs on
// both devices; under auto, a shape the CUDA kernels do not take
// (CudaModel::supports) runs on the CPU, with a warning.
StatusOr<LoadedEngine> load_engine(const ModelSpec& spec, const EngineConfig& config, ThreadPool& pool);
// The same for a GGUF file or HF folder, detected from the path.
StatusOr<LoadedEngine> load_engine(const std::string& model_path, const EngineConfig& config,
                                   ThreadPool& pool);

}  // namespace nanoserve
