#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/fake_model.h"

namespace nanoserve {
namespace {

// A scheduler over a block manager of `num_blocks` blocks of 4 tokens
// (prefix caching off unless asked: the prompts here are alike).
struct Fixture {
  Fixture(int32_t num_blocks, int32_t max_seqs, int32_t budget, bool prefix_caching = false) {
    BlockManagerConfig bc;
    bc.block_size = 4;
    bc.num_blocks = num_blocks;
    bc.max_num_seqs = max_seqs;
    bc.max_seq_len = 1 << 20;
    bc.enable_prefix_caching = prefix_caching;
    SchedulerConfig sc;
    sc.max_num_seqs = max_seqs;
    sc.max_num_batched_tokens = budget;
    scheduler = std::make_unique<Scheduler>(sc, bc);
  }
  Request* add(int prompt_len, int max_tokens = 100, int32_t token = 1) {
    SamplingParams p;
    p.max_tokens = max_tokens;
    requests.push_back(std::make_unique<Request>(requests.size() + 1, std::vector<int32_t>(prompt_len, token),
                                                 p, 0, std::span<const int32_t>{}, nullptr));
    scheduler->add(requests.back().get());
    return requests.back().get();
  }
  // What the engine does after a step: advance, and append a token where sampled.
  const SchedulerStep& step() {
    const SchedulerStep& s = scheduler->schedule();
    scheduler->commit(s);
    for (const ScheduledChunk& c : s.chunks) {
      if (c.samples) c.request->output.push_back(3);
    }
    return s;
  }
  int32_t tokens_of(const SchedulerStep& s, const Request* r) {
    for (const ScheduledChunk& c : s.chunks)
      if (c.request == r) return c.num_tokens;
    return 0;
  }
  const BlockManager& blocks() const { return scheduler->block_manager(); }
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
  EXPECT_EQ(f.blocks().seq_capacity(r->seq), 44) << "blocks reserved for 41 tokens, 4 per block";
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
  EXPECT_EQ(f.blocks().num_free_blocks(), 4);
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
  ASSERT_EQ(f.blocks().num_free_blocks(), 0);
  // Both decode position 8, which needs a third block each.
  const SchedulerStep& s = f.step();
  EXPECT_EQ(s.num_preempted, 1);
  ASSERT_EQ(s.chunks.size(), 1u);
  EXPECT_EQ(s.chunks[0].request, a);
  EXPECT_EQ(b->status, RequestStatus::kWaiting);
  EXPECT_EQ(b->seq, -1);
  EXPECT_EQ(f.scheduler->num_computed(b), 0);
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
  EXPECT_GT(f.blocks().num_in_use_blocks(), 0);
  f.scheduler->remove(a);
  f.scheduler->remove(b);
  EXPECT_EQ(f.blocks().num_in_use_blocks(), 0);
  EXPECT_TRUE(f.scheduler->running().empty());
  EXPECT_TRUE(f.scheduler->waiting().empty());
}

TEST(Scheduler, AdmissionStartsAfterTheCachedPrefixAndCountsIt) {
  Fixture f(16, 4, 64, /*prefix_caching=*/true);
  Request* a = f.add(10, 100, 5);
  f.step();
  EXPECT_EQ(f.scheduler->prefix_cache_queries(), 10);
  EXPECT_EQ(f.scheduler->prefix_cache_hits(), 0);
  Request* b = f.add(10, 100, 5);  // the same prompt: its first two blocks are cached
  const SchedulerStep& s = f.step();
  EXPECT_EQ(f.tokens_of(s, b), 2) << "8 of 10 prompt tokens come from the cache";
  EXPECT_EQ(f.scheduler->prefix_cache_queries(), 20);
  EXPECT_EQ(f.scheduler->prefix_cache_hits(), 8);
  EXPECT_EQ(f.blocks().block_table(a->seq)[0], f.blocks().block_table(b->seq)[0]);
  EXPECT_TRUE(f.blocks().check_invariants().ok());
}

TEST(Scheduler, PreemptionKeepsCachedBlocksForTheReadmission) {
  Fixture f(4, 4, 64, /*prefix_caching=*/true);
  Request* a = f.add(8, 100, 1);
  Request* b = f.add(8, 100, 2);
  f.step();  // 2 full blocks each, all cached
  EXPECT_EQ(f.blocks().num_cached_blocks(), 4);
  f.step();  // both need a third block: b is preempted, its blocks stay cached
  EXPECT_EQ(b->status, RequestStatus::kWaiting);
  EXPECT_EQ(f.blocks().num_evictable_blocks(), 1) << "b's first block; its tail block went to a's growth";
  f.scheduler->remove(a);
  const SchedulerStep& s = f.step();
  ASSERT_EQ(s.chunks.size(), 1u);
  EXPECT_EQ(s.chunks[0].request, b);
  EXPECT_EQ(s.chunks[0].num_tokens, 5) << "recompute of 9 tokens starts after the cached block";
  EXPECT_TRUE(f.blocks().check_invariants().ok());
}

}  // namespace
}  // namespace nanoserve
