// The CPU runner's paged storage (blocks from a block manager) under the real forward pass of the default model.
//   - paged == naive: greedy tokens and every step's logits bitwise equal, for
//     four prompts of 15, 16, 17 and 33 tokens batched together (their blocks
//     interleave in the shared pool), 32 generated tokens, block sizes 1, 2,
//     16 and 32, through the fused read. (The gather read equals the fused one
//     in kv_cpu_test.cc, and the per-sequence storage in model_cpu_test.cc;
//     each run here costs 33 forward steps of the model, so CI time decides.)
//   - which read runs: the storage's counts of each half of attend().

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "model/kv_cpu.h"
#include "model/model_cpu.h"
#include "model/model_fixture.h"
#include "tokenizer/tokenizer.h"

namespace nanoserve {
namespace {

using testing::argmax;
using testing::default_model;
using testing::make_batch;

constexpr int kNewTokens = 32;
const std::vector<int32_t> kPromptLens = {15, 16, 17, 33};

class CpuKVModel : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(default_model().model, nullptr)
        << "default model missing or unloadable: " << testing::kDefaultModel << " (run scripts/fetch-model)";
    model_ = default_model().model.get();
  }

  // Four prompts cut to exactly kPromptLens tokens.
  std::vector<std::vector<int32_t>> prompts() const {
    auto tok = Tokenizer::from_gguf(*default_model().file);
    EXPECT_TRUE(tok.ok());
    const char* texts[] = {
        "The history of the printing press begins long before Gutenberg, with carved wooden blocks",
        "<|im_start|>user\nWrite a short poem about the sea and the wind.<|im_end|>\n<|im_start|>assistant\n",
        "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - "
        "2)\n",
        "In a small village at the edge of a great forest there lived an old clockmaker who had never once "
        "left the valley, though every traveller who passed through told him of cities beyond the hills",
    };
    std::vector<std::vector<int32_t>> out;
    for (size_t i = 0; i < kPromptLens.size(); ++i) {
      std::vector<int32_t> ids = (*tok)->encode(texts[i], true, true);
      EXPECT_GE(ids.size(), static_cast<size_t>(kPromptLens[i])) << "prompt " << i << " too short";
      ids.resize(kPromptLens[i]);
      out.push_back(ids);
    }
    return out;
  }

  // Greedy decoding of all prompts as one batch: step 0 prefills every prompt,
  // then each step decodes one token per sequence. Returns each step's logits
  // rows [B, vocab] concatenated, and appends each sequence's tokens.
  // `paged`: through a paged cache's prepare(); else `cache` directly.
  std::vector<float> run(CpuKV& cache, testing::PagedCacheForTests* paged, const std::vector<int32_t>& seq_ids,
                         std::vector<std::vector<int32_t>>* tokens) const {
    const auto ps = prompts();
    const int64_t vocab = model_->config().vocab_size;
    Workspace ws = model_->make_workspace(128, 4);
    std::vector<float> all_logits;
    tokens->assign(ps.size(), {});
    ForwardBatch batch = make_batch(ps, {0, 0, 0, 0}, seq_ids);
    for (int step = 0; step < kNewTokens; ++step) {
      auto logits =
          paged != nullptr ? testing::forward_paged(*model_, *paged, batch, ws) : model_->forward(batch, cache, ws);
      EXPECT_TRUE(logits.ok()) << logits.status().to_string();
      if (!logits.ok()) return all_logits;
      const float* l = logits->data_as<const float>();
      all_logits.insert(all_logits.end(), l, l + ps.size() * vocab);
      std::vector<std::vector<int32_t>> next;
      std::vector<int32_t> starts;
      for (size_t b = 0; b < ps.size(); ++b) {
        (*tokens)[b].push_back(argmax(l + b * vocab, vocab));
        next.push_back({(*tokens)[b].back()});
        starts.push_back(static_cast<int32_t>(ps[b].size()) + step);
      }
      batch = make_batch(next, starts, seq_ids);
    }
    return all_logits;
  }

  const CpuModel* model_ = nullptr;
};

TEST_F(CpuKVModel, GreedyTokensAndLogitsEqualNaiveCache) {
  CpuKV naive = CpuKV::per_sequence(model_->config(), 4, 80, model_->pool());
  std::vector<std::vector<int32_t>> naive_tokens;
  const std::vector<float> naive_logits = run(naive, nullptr, {0, 1, 2, 3}, &naive_tokens);
  ASSERT_EQ(naive_logits.size(), static_cast<size_t>(kNewTokens) * 4 * model_->config().vocab_size);

  for (int32_t block_size : {1, 2, 16, 32}) {
    {
      SCOPED_TRACE(::testing::Message() << "block_size " << block_size);
      // Room for every sequence's last partial block.
      const int32_t num_blocks = (4 * 80 + 4 * block_size + block_size - 1) / block_size;
      auto cache =
          testing::make_paged_cache(model_->config(), block_size, num_blocks, 4, 80, true, model_->pool());
      ASSERT_NE(cache, nullptr);
      std::vector<int32_t> seq_ids;
      for (int i = 0; i < 4; ++i) seq_ids.push_back(cache->add_sequence());
      std::vector<std::vector<int32_t>> tokens;
      const std::vector<float> logits = run(cache->kv(), cache.get(), seq_ids, &tokens);
      EXPECT_EQ(tokens, naive_tokens);
      ASSERT_EQ(logits.size(), naive_logits.size());
      const int64_t row = model_->config().vocab_size;
      for (size_t r = 0; r < logits.size() / row; ++r) {
        ASSERT_EQ(std::memcmp(logits.data() + r * row, naive_logits.data() + r * row, row * sizeof(float)), 0)
            << "step " << r / 4 << ", sequence " << r % 4;
      }
      // Blocks of the four sequences interleave in the pool (they grew together).
      if (block_size <= 2) {
        const auto t0 = cache->blocks().block_table(seq_ids[0]);
        ASSERT_GE(t0.size(), 2u);
        bool scattered = false;
        for (size_t i = 1; i < t0.size(); ++i) scattered |= t0[i] != t0[i - 1] + 1;
        EXPECT_TRUE(scattered);
      }
    }
  }
}

TEST_F(CpuKVModel, ForwardUsesTheFusedReadOncePerLayerWhenOffered) {
  const int64_t n_layers = model_->config().n_layers;
  Workspace ws = model_->make_workspace(16, 1);
  const std::vector<int32_t> prompt = {1, 504, 3458, 282, 4649};
  for (int kind = 0; kind < 3; ++kind) {  // paged fused, paged gather, per sequence
    SCOPED_TRACE(kind == 0 ? "paged, fused read" : kind == 1 ? "paged, gather read" : "per sequence");
    std::unique_ptr<testing::PagedCacheForTests> paged;
    std::unique_ptr<CpuKV> own;
    int32_t seq = 0;
    if (kind < 2) {
      paged = testing::make_paged_cache(model_->config(), 4, 8, 1, 32, kind == 0, model_->pool());
      ASSERT_NE(paged, nullptr);
      seq = paged->add_sequence();
    } else {
      own = std::make_unique<CpuKV>(CpuKV::per_sequence(model_->config(), 1, 32, model_->pool()));
    }
    CpuKV& kv = paged ? paged->kv() : *own;
    EXPECT_EQ(kv.fused_read(), kind == 0);
    ForwardBatch b = make_batch({prompt}, {0}, {seq});
    for (int64_t step = 0; step < 3; ++step) {
      auto logits = paged ? testing::forward_paged(*model_, *paged, b, ws) : model_->forward(b, kv, ws);
      ASSERT_TRUE(logits.ok()) << logits.status().to_string();
      const CpuKV::Counts& n = kv.counts();
      const int64_t per_layer = (step + 1) * n_layers;  // once per layer and step
      EXPECT_EQ(n.writes, per_layer) << "step " << step;
      EXPECT_EQ(n.fused_reads, kind == 0 ? per_layer : 0) << "step " << step;
      EXPECT_EQ(n.gathers, kind == 1 ? per_layer : 0) << "step " << step;
      EXPECT_EQ(n.per_sequence_reads, kind == 2 ? per_layer : 0) << "step " << step;
      b = make_batch({{argmax(logits->data_as<const float>(), model_->config().vocab_size)}},
                     {static_cast<int32_t>(prompt.size()) + static_cast<int32_t>(step)}, {seq});
    }
  }
}

}  // namespace
}  // namespace nanoserve
