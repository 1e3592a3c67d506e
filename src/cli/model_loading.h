#pragma once
// Loads a GGUF model into a ready Engine: file, tokenizer, chat template,
// Llama weights, a Workspace sized to the engine's limits, the KV cache.
// Shared by the commands that run the model.

#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine/tokenizer_text.h"
#include "io/gguf.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace nanoserve::cli {

struct LoadOptions {
  std::string model_path;
  int threads = 0;  // compute threads; 0 = all cores
  EngineConfig engine;
};

// Members are declared in dependency order, so they are destroyed engine first.
struct LoadedModel {
  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Tokenizer> tokenizer;
  ChatTemplate chat_template = ChatTemplate::chatml();
  std::unique_ptr<TokenizerText> text;
  std::unique_ptr<Engine> engine;
};

StatusOr<std::unique_ptr<LoadedModel>> load_model(const LoadOptions& options);

}  // namespace nanoserve::cli
