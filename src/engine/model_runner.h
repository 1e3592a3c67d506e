#pragma once
// What the engine needs of a model: one forward over a ForwardBatch through
// a KV cache, giving logits for the batch's logits_rows. The llama forward is
// one implementation; tests use a small fake with the same contract.

#include <cstdint>

#include "core/status.h"
#include "core/tensor.h"
#include "kvcache/kv_cache.h"
#include "model/config.h"
#include "model/forward_batch.h"

namespace nanoserve {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  virtual const ModelConfig& config() const = 0;

  // Runs the step (cache.begin_step included) and returns the logits of
  // batch.logits_rows: [R, vocab] f32, valid until the next call.
  // PRECOND: the batch fits the sizes the runner was built for.
  virtual StatusOr<Tensor> forward(const ForwardBatch& batch, KVCache& cache) = 0;
};

}  // namespace nanoserve
