#pragma once
// The llama forward on a CUDA device as the engine's ModelRunner
// (docs/model_cuda.md). The same engine, scheduler, block manager and sampler
// as on the CPU; underneath, model/llama_cuda.h with its bf16 KV pools.
//
// Plain C++ (no CUDA header); defined in llama_cuda_runner.cu, so only a build
// with NANOSERVE_CUDA has it (load_engine asks cuda_available() first).

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/status.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "model/llama_cuda.h"
#include "model/model_source.h"

namespace nanoserve {

class ThreadPool;

class LlamaCudaRunner final : public ModelRunner {
 public:
  // kv_budget_bytes: what --gpu-memory-utilization leaves for the pools once
  // the weights are resident and the step buffers of `limits` are counted.
  LlamaCudaRunner(std::unique_ptr<LlamaCudaModel> model, const LlamaCudaLimits& limits,
                  int64_t kv_budget_bytes);

  const ModelConfig& config() const override { return model_->config(); }
  int64_t kv_bytes_per_block(int32_t block_size) const override {
    return LlamaCudaModel::kv_bytes_per_block(model_->config(), block_size);
  }
  int64_t kv_cache_budget_bytes() const override { return kv_budget_bytes_; }
  Status init_kv_cache(int32_t num_blocks, int32_t block_size) override;
  StatusOr<Tensor> forward(const ForwardBatch& batch) override;
  std::span<const int32_t> greedy_tokens() const override { return model_->argmax(); }
  bool samples_on_device() const override { return true; }
  std::span<const int32_t> sampled_tokens() const override { return model_->sampled(); }
  std::span<const SampleRowLogprobs> sampled_logprobs() const override { return model_->sampled_logprobs(); }
  std::span<const float> logits_row(int32_t row) override { return model_->logits_row(row); }

  LlamaCudaModel& model() { return *model_; }

 private:
  std::unique_ptr<LlamaCudaModel> model_;
  LlamaCudaLimits limits_;
  int64_t kv_budget_bytes_;
};

// The CUDA runner for an opened model source: GGUF or safetensors weights
// uploaded (converted or dequantized to bf16), or dummy weights made on the
// device. The KV budget is gpu_memory_utilization of the device's memory
// (vLLM's meaning: weights, KV and workspace together) less what is in use.
// `pool` serves the host model that views the weights while they upload.
StatusOr<std::unique_ptr<LlamaCudaRunner>> make_llama_cuda_runner(const ModelSource& source,
                                                                  const EngineConfig& config,
                                                                  int64_t max_model_len, ThreadPool& pool);

}  // namespace nanoserve
