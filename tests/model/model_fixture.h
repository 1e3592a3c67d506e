#pragma once
// Test helper: the default model loaded once, plain greedy stepping of
// whole sequences through per-sequence storage, and a paged cache that hands
// out its own blocks (what the engine's block manager does) for tests that
// drive the forward directly.

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "core/thread_pool.h"
#include "io/gguf.h"
#include "kvcache/block_manager.h"
#include "model/kv_cpu.h"
#include "model/model_cpu.h"

namespace nanoserve::testing {

inline const char* kDefaultModel = NS_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

struct LoadedModel {
  std::unique_ptr<ThreadPool> pool;
  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<CpuModel> model;
};

// Loaded once per test binary (2 threads); fails the test when the model is missing.
inline const LoadedModel& default_model() {
  static LoadedModel* m = [] {
    auto* lm = new LoadedModel;
    lm->pool = std::make_unique<ThreadPool>(2);
    auto file = GgufFile::open(kDefaultModel);
    if (!file.ok()) return lm;
    lm->file = *file;
    auto model = CpuModel::load(lm->file, *lm->pool);
    if (model.ok()) lm->model = std::move(model).value();
    return lm;
  }();
  return *m;
}

// A block manager and a paged CpuKV, as the engine and the CPU runner hold
// them, for tests that drive the forward directly: prepare() grows the batch's
// sequences to their context_len, fills the block tables and slots into a copy
// of the batch, and validates it against the storage's limits.
class PagedCacheForTests {
 public:
  PagedCacheForTests(const BlockManagerConfig& bc, std::unique_ptr<CpuKV> kv, StepLimits limits)
      : blocks_(bc), kv_(std::move(kv)), limits_(limits) {}

  StatusOr<const ForwardBatch*> prepare(const ForwardBatch& batch) {
    step_ = batch;
    for (int32_t b = 0; b < batch.num_seqs(); ++b) {
      if (!blocks_.is_live(batch.seq_ids[b])) return invalid_argument("not a live sequence");
      NS_RETURN_IF_ERROR(blocks_.reserve(batch.seq_ids[b], batch.context_lens[b]));
    }
    blocks_.fill_batch(step_);
    NS_RETURN_IF_ERROR(step_.validate(limits_));
    return &step_;
  }

  BlockManager& blocks() { return blocks_; }
  CpuKV& kv() { return *kv_; }
  int32_t add_sequence() { return *blocks_.add_sequence(); }

 private:
  BlockManager blocks_;
  std::unique_ptr<CpuKV> kv_;
  StepLimits limits_;
  ForwardBatch step_;
};

// A paged cache for the model's shape: num_blocks blocks of block_size, f32
// unless asked; steps of up to max_tokens tokens and max_num_seqs sequences.
inline std::unique_ptr<PagedCacheForTests> make_paged_cache(const ModelConfig& config, int32_t block_size,
                                                            int32_t num_blocks, int32_t max_num_seqs,
                                                            int64_t max_seq_len, bool fused_read,
                                                            ThreadPool& pool, DType dtype = DType::kF32,
                                                            int32_t max_tokens = 512) {
  BlockManagerConfig bc;
  bc.num_blocks = num_blocks;
  bc.block_size = block_size;
  bc.max_num_seqs = max_num_seqs;
  bc.max_seq_len = max_seq_len;
  bc.enable_prefix_caching = false;
  CpuKVOptions o;
  o.num_blocks = num_blocks;
  o.block_size = block_size;
  o.dtype = dtype;
  o.max_context = max_seq_len;
  o.max_num_seqs = max_num_seqs;
  o.fused_read = fused_read;
  auto kv = CpuKV::create(config, o, pool);
  EXPECT_TRUE(kv.ok()) << kv.status().to_string();
  if (!kv.ok()) return nullptr;
  StepLimits lim;
  lim.vocab_size = config.vocab_size;
  lim.max_tokens = max_tokens;
  lim.max_seqs = max_num_seqs;
  lim.max_logits_rows = max_tokens;
  (*kv)->fill_limits(lim);
  return std::make_unique<PagedCacheForTests>(bc, std::move(kv).value(), lim);
}

// One forward of `batch` through the paged cache (blocks reserved, tables filled, validated).
inline StatusOr<Tensor> forward_paged(const CpuModel& model, PagedCacheForTests& cache,
                                      const ForwardBatch& batch, Workspace& ws) {
  NS_ASSIGN_OR_RETURN(const ForwardBatch* b, cache.prepare(batch));
  return model.forward(*b, cache.kv(), ws);
}

// A batch of whole new segments: sequence b gets tokens segs[b] at positions
// starts[b].., and logits for its last token.
inline ForwardBatch make_batch(const std::vector<std::vector<int32_t>>& segs,
                               const std::vector<int32_t>& starts, const std::vector<int32_t>& seq_ids) {
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

// Normalized mean squared error of a against ref: sum (a - ref)^2 / sum ref^2.
inline double nmse(const float* a, const float* ref, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    num += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return num / std::max(den, 1e-30);
}

inline int32_t argmax(const float* row, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (row[i] > row[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

// Greedy continuation of `prompt` in row `seq` of per-sequence storage `cache`: n tokens.
inline std::vector<int32_t> greedy(const CpuModel& model, CpuKV& cache, Workspace& ws, int32_t seq,
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

// Block tables and slots for a batch whose sequence ids are slots: slot s
// owns blocks [s * blocks_per_seq, (s + 1) * blocks_per_seq), in order.
inline void add_slot_tables(ForwardBatch& b, int32_t blocks_per_seq, int32_t block_size) {
  b.max_blocks_per_seq = blocks_per_seq;
  b.block_tables.clear();
  b.slot_mapping.clear();
  for (int32_t i = 0; i < b.num_seqs(); ++i) {
    for (int32_t j = 0; j < blocks_per_seq; ++j) b.block_tables.push_back(b.seq_ids[i] * blocks_per_seq + j);
    for (int32_t t = b.seq_starts[i]; t < b.seq_starts[i + 1]; ++t)
      b.slot_mapping.push_back(b.seq_ids[i] * blocks_per_seq * block_size + b.positions[t]);
  }
}

}  // namespace nanoserve::testing
