#pragma once
// Test helper: the default model loaded once, and plain greedy stepping of
// whole sequences through any KVCache.

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "core/thread_pool.h"
#include "io/gguf.h"
#include "kvcache/kv_cache.h"
#include "model/llama.h"

namespace nanoserve::testing {

inline const char* kDefaultModel = NS_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

struct LoadedModel {
  std::unique_ptr<ThreadPool> pool;
  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<LlamaModel> model;
};

// Loaded once per test binary (2 threads); fails the test when the model is missing.
inline const LoadedModel& default_model() {
  static LoadedModel* m = [] {
    auto* lm = new LoadedModel;
    lm->pool = std::make_unique<ThreadPool>(2);
    auto file = GgufFile::open(kDefaultModel);
    if (!file.ok()) return lm;
    lm->file = *file;
    auto model = LlamaModel::load(lm->file, *lm->pool);
    if (model.ok()) lm->model = std::move(model).value();
    return lm;
  }();
  return *m;
}

// A batch of whole new segments: sequence b gets tokens segs[b] at positions
// starts[b].., and logits for its last token.
inline ForwardBatch make_batch(const std::vector<std::vector<int32_t>>& segs, const std::vector<int32_t>& starts,
                               const std::vector<int32_t>& seq_ids) {
  ForwardBatch b;
  b.seq_starts.push_back(0);
  for (size_t i = 0; i < segs.size(); ++i) {
    for (size_t j = 0; j < segs[i].size(); ++j) {
      b.tokens.push_back(segs[i][j]);
      b.positions.push_back(starts[i] + static_cast<int32_t>(j));
    }
    b.seq_starts.push_back(static_cast<int32_t>(b.tokens.size()));
    b.seq_ids.push_back(seq_ids[i]);
    b.context_lens.push_back(starts[i] + static_cast<int32_t>(segs[i].size()));
    b.logits_rows.push_back(static_cast<int32_t>(b.tokens.size()) - 1);
  }
  return b;
}

inline int32_t argmax(const float* row, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (row[i] > row[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

// Greedy continuation of `prompt` in slot `seq` of `cache`: n tokens.
inline std::vector<int32_t> greedy(const LlamaModel& model, KVCache& cache, Workspace& ws, int32_t seq,
                                   const std::vector<int32_t>& prompt, int n) {
  std::vector<int32_t> out;
  ForwardBatch b = make_batch({prompt}, {0}, {seq});
  int32_t pos = static_cast<int32_t>(prompt.size());
  for (int i = 0; i < n; ++i) {
    auto logits = model.forward(b, cache, ws);
    EXPECT_TRUE(logits.ok()) << logits.status().to_string();
    if (!logits.ok()) return out;
    out.push_back(argmax(logits->data_as<const float>(), model.config().vocab_size));
    b = make_batch({{out.back()}}, {pos}, {seq});
    ++pos;
  }
  return out;
}

}  // namespace nanoserve::testing
