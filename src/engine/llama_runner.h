#pragma once
// The llama forward pass on the CPU as the engine's ModelRunner, with its KV
// storage (paged f32/f16/bf16, or the naive per-sequence cache), and the one
// call that turns a model path (GGUF file, HF folder, or dummy weights:
// model/model_source.h) into a ready Engine (model, tokenizer, KV cache).

#include <cstdint>
#include <memory>
#include <string>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "engine/tokenizer_text.h"
#include "io/gguf.h"
#include "kvcache/kv_cache.h"
#include "model/llama.h"
#include "model/model_source.h"
#include "tokenizer/tokenizer.h"

namespace nanoserve {

enum class KVStorageKind : uint8_t {
  kPaged,  // blocks of a shared pool, read through the block tables
  kNaive,  // one contiguous slot of max_context positions per sequence (gather read only; no sharing)
};

struct LlamaRunnerOptions {
  int64_t max_tokens = 512;   // tokens in one step
  int32_t max_num_seqs = 64;  // sequences in one step, and naive slots
  int64_t max_context = 0;    // longest sequence; >= 1
  KVStorageKind storage = KVStorageKind::kPaged;
  DType kv_dtype = DType::kF32;  // paged: kF32, kF16 or kBF16; naive: kF32
  bool fused_read = true;        // paged: attention straight from the blocks (false: gather)
};

class LlamaRunner final : public ModelRunner {
 public:
  // `pool` runs the storage's threads and must outlive the runner.
  LlamaRunner(std::unique_ptr<LlamaModel> model, const LlamaRunnerOptions& options, ThreadPool* pool);

  const ModelConfig& config() const override { return model_->config(); }
  int64_t kv_bytes_per_block(int32_t block_size) const override;
  bool kv_blocks_shareable() const override { return options_.storage == KVStorageKind::kPaged; }
  Status init_kv_cache(int32_t num_blocks, int32_t block_size) override;
  StatusOr<Tensor> forward(const ForwardBatch& batch) override;

  // Times every later forward's phases into *profile (null: stop timing).
  void set_profile(ForwardProfile* profile) { ws_.profile = profile; }
  KVCache* kv_cache() { return cache_.get(); }  // null before init_kv_cache

 private:
  std::unique_ptr<LlamaModel> model_;
  LlamaRunnerOptions options_;
  ThreadPool* pool_;
  Workspace ws_;
  std::unique_ptr<KVCache> cache_;
};

// Members in construction order; destroyed engine first, file last.
struct LoadedEngine {
  std::shared_ptr<const GgufFile> file;  // the GGUF file, when the model came from one
  ModelSource source;                    // config and tensors (its tokenizer moved below)
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<TokenizerText> text;
  std::unique_ptr<Engine> engine;
  LlamaRunner* runner = nullptr;  // the CPU runner, owned by the engine; null on CUDA
  Device device = Device::kCPU;    // where the model runs
};

// Opens the model (open_model_source), loads weights and tokenizer, and sizes
// the KV cache (print engine->capacity_line() at start-up). `pool` must
// outlive the result.
// auto (nullopt): CUDA when the build has it and a device is present, else the CPU.
// FAILED_PRECONDITION for cuda in a build without it.
StatusOr<Device> resolve_device(std::optional<Device> requested);

StatusOr<LoadedEngine> load_engine(const ModelSpec& spec, const EngineConfig& config, ThreadPool& pool);
// The same for a GGUF file or HF folder, detected from the path.
StatusOr<LoadedEngine> load_engine(const std::string& model_path, const EngineConfig& config,
                                   ThreadPool& pool);

}  // namespace nanoserve
