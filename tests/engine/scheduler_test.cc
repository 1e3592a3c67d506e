#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/fake_model.h"

namespace nanoserve {
namespace {

// A scheduler over a real paged cache of `num_blocks` blocks of 4 tokens.
struct Fixture {
  Fixture(int32_t num_blocks, int32_t max_seqs, int32_t budget) {
    PagedKVCacheOptions o;
    o.block_size = 4;
    o.num_blocks = num_blocks;
    o.max_num_seqs = max_seqs;
    o.max_num_batched_tokens = budget;
    o.fused_read = false;
    cache = std::move(PagedKVCache::create(testing::fake_config(32), o, nullptr).value());
    SchedulerConfig sc;
    sc.max_num_seqs = max_seqs;
    sc.max_num_batched_tokens = budget;
    scheduler = std::make_unique<Scheduler>(sc, *cache);
  }
  Request* add(int prompt_len, int max_tokens = 100) {
    SamplingParams p;
    p.max_tokens = max_tokens;
    requests.push_back(std::make_unique<Request>(requests.size() + 1, std::vector<int32_t>(prompt_len, 1), p,
                                                 0, std::span<const int32_t>{}, nullptr));
    scheduler->add(requests.back().get());
    return requests.back().get();
  }
  // What the engine does after a step: advance, and append a token where sampled.
  const SchedulerStep& step() {
    const SchedulerStep& s = scheduler->schedule();
    for (const ScheduledChunk& c : s.chunks) {
      c.request->num_computed += c.num_tokens;
      if (c.samples) c.request->output.push_back(3);
    }
    return s;
  }
  int32_t tokens_of(const SchedulerStep& s, const Request* r) {
    for (const ScheduledChunk& c : s.chunks)
      if (c.request == r) return c.num_tokens;
    return 0;
  }
  std::unique_ptr<PagedKVCache> cache;
  std::unique_ptr<Scheduler> scheduler;
  std::vector<std::unique_ptr<Request>> requests;
};

TEST(SchedulerConfig, BudgetMustCoverEveryDecode) {
  SchedulerConfig c;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 7;
  EXPECT_FALSE(c.validate().ok());
  c.max_num_batched_tokens = 8;
  EXPECT_TRUE(c.validate().ok());
}

TEST(Scheduler, LongPromptIsChunkedToTheBudgetAndSamplesOnlyAtTheEnd) {
  Fixture f(64, 4, 16);
  Request* r = f.add(40);
  std::vector<int32_t> chunks;
  std::vector<bool> samples;
  for (int i = 0; i < 4; ++i) {
    const SchedulerStep& s = f.step();
    ASSERT_EQ(s.chunks.size(), 1u);
    chunks.push_back(s.chunks[0].num_tokens);
    samples.push_back(s.chunks[0].samples);
  }
  EXPECT_EQ(chunks, (std::vector<int32_t>{16, 16, 8, 1}));
  EXPECT_EQ(samples, (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ(r->output.size(), 2u);
  EXPECT_EQ(f.cache->seq_capacity(r->seq), 44) << "blocks reserved for 41 tokens, 4 per block";
}

TEST(Scheduler, DecodesFirstPrefillsTakeTheRest) {
  Fixture f(64, 4, 16);
  Request* a = f.add(3);
  Request* b = f.add(5);
  f.step();  // both prefilled whole (3 + 5 <= 16)
  Request* c = f.add(30);
  const SchedulerStep& s = f.step();
  EXPECT_EQ(f.tokens_of(s, a), 1);
  EXPECT_EQ(f.tokens_of(s, b), 1);
  EXPECT_EQ(f.tokens_of(s, c), 14) << "the prefill chunk gets what the decodes leave";
  EXPECT_EQ(s.num_tokens, 16);
}

TEST(Scheduler, SequenceCapLimitsAdmission) {
  Fixture f(64, 2, 64);
  f.add(2);
  f.add(2);
  Request* c = f.add(2);
  const SchedulerStep& s = f.step();
  EXPECT_EQ(s.chunks.size(), 2u);
  EXPECT_EQ(c->status, RequestStatus::kWaiting);
}

TEST(Scheduler, AdmissionNeedsFreeBlocksAndKeepsOrder) {
  Fixture f(4, 4, 64);  // 16 tokens in all
  Request* a = f.add(10);
  Request* b = f.add(9);  // does not fit beside a (3 + 3 blocks > 4)
  Request* c = f.add(1);  // would fit, but may not jump the queue
  const SchedulerStep& s = f.step();
  ASSERT_EQ(s.chunks.size(), 1u);
  EXPECT_EQ(s.chunks[0].request, a);
  EXPECT_EQ(b->status, RequestStatus::kWaiting);
  EXPECT_EQ(c->status, RequestStatus::kWaiting);
  f.scheduler->remove(a);  // a finishes: its blocks come back
  EXPECT_EQ(f.cache->num_free_blocks(), 4);
  const SchedulerStep& s2 = f.step();
  EXPECT_EQ(s2.chunks.size(), 2u);
  EXPECT_EQ(b->status, RequestStatus::kRunning);
  EXPECT_EQ(c->status, RequestStatus::kRunning);
}

TEST(Scheduler, DecodeWithoutABlockPreemptsTheNewest) {
  Fixture f(4, 4, 64);
  Request* a = f.add(8);
  Request* b = f.add(8);
  f.step();  // a, b: 2 blocks each, pool full; each sampled one token
  ASSERT_EQ(f.cache->num_free_blocks(), 0);
  // Both decode position 8, which needs a third block each.
  const SchedulerStep& s = f.step();
  EXPECT_EQ(s.num_preempted, 1);
  ASSERT_EQ(s.chunks.size(), 1u);
  EXPECT_EQ(s.chunks[0].request, a);
  EXPECT_EQ(b->status, RequestStatus::kWaiting);
  EXPECT_EQ(b->seq, -1);
  EXPECT_EQ(b->num_computed, 0);
  EXPECT_EQ(b->output.size(), 1u) << "recompute keeps the generated tokens";
  EXPECT_EQ(b->num_preemptions, 1);
  EXPECT_EQ(f.scheduler->waiting().front(), b);
  EXPECT_EQ(f.scheduler->num_preemptions(), 1);
}

TEST(Scheduler, NoAdmissionInAStepThatPreempted) {
  Fixture f(4, 4, 64);
  f.add(8);
  f.add(8);
  f.step();
  const SchedulerStep& s = f.step();  // preempts the second; it must not come straight back
  EXPECT_EQ(s.num_preempted, 1);
  EXPECT_EQ(s.chunks.size(), 1u);
}

TEST(Scheduler, PreemptedRequestRecomputesPromptAndOutput) {
  Fixture f(4, 4, 64);
  Request* a = f.add(8, 1);  // will finish after one token
  Request* b = f.add(8);
  f.step();
  f.step();  // b preempted
  f.scheduler->remove(a);
  const SchedulerStep& s = f.step();
  ASSERT_EQ(s.chunks.size(), 1u);
  EXPECT_EQ(s.chunks[0].request, b);
  EXPECT_EQ(s.chunks[0].num_tokens, 9) << "8 prompt tokens + 1 generated";
  EXPECT_TRUE(s.chunks[0].samples);
}

TEST(Scheduler, RemoveFromWaitingAndRunningFreesBlocks) {
  Fixture f(16, 4, 64);
  Request* a = f.add(10);
  f.step();
  Request* b = f.add(5);
  EXPECT_GT(f.cache->num_used_blocks(), 0);
  f.scheduler->remove(a);
  f.scheduler->remove(b);
  EXPECT_EQ(f.cache->num_used_blocks(), 0);
  EXPECT_TRUE(f.scheduler->running().empty());
  EXPECT_TRUE(f.scheduler->waiting().empty());
}

}  // namespace
}  // namespace nanoserve
