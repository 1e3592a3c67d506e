#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <memory>
#include <tuple>
#include <vector>

#include "engine/fake_model.h"

namespace nanoserve {
namespace {

// A scheduler over a block manager of `num_blocks` blocks of 4 tokens
// (prefix caching off unless asked: the prompts here are alike).
struct Fixture {
  Fixture(int32_t num_blocks, int32_t max_seqs, int32_t budget, bool prefix_caching = false,
          int32_t swap_slots = 0, PreemptionMode mode = PreemptionMode::kSwap,
          double swap_block_seconds = 1.0, double recompute_token_seconds = 1.0) {
    BlockManagerConfig bc;
    bc.block_size = 4;
    bc.num_blocks = num_blocks;
    bc.max_num_seqs = max_seqs;
    bc.max_seq_len = 1 << 20;
    bc.enable_prefix_caching = prefix_caching;
    SchedulerConfig sc;
    sc.max_num_seqs = max_seqs;
    sc.max_num_batched_tokens = budget;
    sc.num_swap_slots = swap_slots;
    sc.preemption_mode = mode;
    sc.swap_block_seconds = swap_block_seconds;
    sc.recompute_token_seconds = recompute_token_seconds;
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

// ---- Preemption by swap ----

TEST(Scheduler, SwapOutListsTheVictimsBlocksAndKeepsItsLength) {
  Fixture f(4, 4, 64, false, /*swap_slots=*/8);
  Request* a = f.add(8);
  Request* b = f.add(8);
  f.step();
  const std::vector<int32_t> b_blocks(f.blocks().block_table(b->seq).begin(),
                                      f.blocks().block_table(b->seq).end());
  const SchedulerStep& s = f.step();  // both need a third block: b is swapped out
  EXPECT_EQ(s.num_preempted, 1);
  EXPECT_EQ(s.num_swapped_out, 1);
  ASSERT_EQ(s.chunks.size(), 1u);
  EXPECT_EQ(s.chunks[0].request, a);
  EXPECT_EQ(b->status, RequestStatus::kSwapped);
  EXPECT_EQ(b->seq, -1);
  EXPECT_EQ(b->swapped_len, 8);
  ASSERT_EQ(b->swap_slots.size(), 2u);
  ASSERT_EQ(s.swap_out.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(s.swap_out[i].block, b_blocks[i]);
    EXPECT_EQ(s.swap_out[i].slot, b->swap_slots[i]);
  }
  EXPECT_EQ(b->swap_slots, (std::vector<int32_t>{0, 1})) << "lowest slots first";
  EXPECT_TRUE(s.swap_in.empty());
  EXPECT_EQ(f.scheduler->swapped().front(), b);
  EXPECT_TRUE(f.scheduler->waiting().empty());
  EXPECT_EQ(f.scheduler->swap_space().num_used_slots(), 2);
  EXPECT_EQ(f.scheduler->num_swap_preemptions(), 1);
  EXPECT_EQ(f.scheduler->num_recomputed_tokens(), 0);
}

TEST(Scheduler, SwappedRequestComesBackBeforeWaitingOnesAndDecodes) {
  Fixture f(4, 4, 64, false, /*swap_slots=*/8);
  Request* a = f.add(8);
  Request* b = f.add(8);
  f.step();
  f.step();               // b swapped out; a holds 3 blocks, 1 free
  Request* c = f.add(2);  // would fit the free block, but b comes first and does not fit yet
  const SchedulerStep& s1 = f.step();
  EXPECT_EQ(f.tokens_of(s1, c), 0) << "a waiting request jumped a swapped one";
  EXPECT_EQ(c->status, RequestStatus::kWaiting);
  EXPECT_EQ(b->status, RequestStatus::kSwapped);
  f.scheduler->remove(a);
  const SchedulerStep& s2 = f.step();
  ASSERT_EQ(s2.num_swapped_in, 1);
  ASSERT_EQ(s2.swap_in.size(), 2u);
  EXPECT_EQ(b->status, RequestStatus::kRunning);
  EXPECT_TRUE(b->swap_slots.empty());
  EXPECT_EQ(f.scheduler->swap_space().num_used_slots(), 0);
  const std::span<const int32_t> table = f.blocks().block_table(b->seq);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(s2.swap_in[i].block, table[i]);
    EXPECT_EQ(s2.swap_in[i].slot, static_cast<int32_t>(i));
  }
  EXPECT_EQ(f.tokens_of(s2, b), 1) << "a decode, nothing recomputed";
  EXPECT_EQ(f.scheduler->num_computed(b), 9) << "its 8 swapped tokens and this step's decode";
  EXPECT_EQ(f.tokens_of(s2, c), 2) << "admitted behind it, in the same step";
  EXPECT_EQ(f.scheduler->num_swap_ins(), 1);
  EXPECT_TRUE(f.blocks().check_invariants().ok());
}

TEST(Scheduler, FullSwapAreaFallsBackToRecompute) {
  Fixture f(4, 4, 64, false, /*swap_slots=*/1);  // b holds 2 blocks: no room
  f.add(8);
  Request* b = f.add(8);
  f.step();
  const SchedulerStep& s = f.step();
  EXPECT_EQ(s.num_preempted, 1);
  EXPECT_EQ(s.num_swapped_out, 0);
  EXPECT_TRUE(s.swap_out.empty());
  EXPECT_EQ(b->status, RequestStatus::kWaiting);
  EXPECT_EQ(f.scheduler->waiting().front(), b);
  EXPECT_EQ(f.scheduler->num_recomputed_tokens(), 8);
  EXPECT_EQ(f.scheduler->swap_space().num_used_slots(), 0);
}

TEST(Scheduler, AutoModeSwapsOnlyWhereCheaper) {
  // Two blocks' round trip against eight tokens' prefill.
  for (const auto& [block_s, token_s, swaps] :
       {std::tuple{1.0, 1.0, true}, std::tuple{4.0, 1.0, false}, std::tuple{3.9, 1.0, true}}) {
    Fixture f(4, 4, 64, false, 8, PreemptionMode::kAuto, block_s, token_s);
    f.add(8);
    Request* b = f.add(8);
    f.step();
    f.step();
    EXPECT_EQ(b->status, swaps ? RequestStatus::kSwapped : RequestStatus::kWaiting)
        << block_s << " s a block, " << token_s << " s a token";
  }
  Fixture never(4, 4, 64, false, 8, PreemptionMode::kRecompute);
  never.add(8);
  Request* b = never.add(8);
  never.step();
  never.step();
  EXPECT_EQ(b->status, RequestStatus::kWaiting);
}

TEST(Scheduler, RemoveOfASwappedRequestFreesItsSlots) {
  Fixture f(4, 4, 64, false, 8);
  f.add(8);
  Request* b = f.add(8);
  f.step();
  f.step();
  ASSERT_EQ(b->status, RequestStatus::kSwapped);
  f.scheduler->remove(b);
  EXPECT_TRUE(f.scheduler->swapped().empty());
  EXPECT_EQ(f.scheduler->swap_space().num_used_slots(), 0);
  EXPECT_TRUE(b->swap_slots.empty());
}

TEST(Scheduler, SwapOutOfAPartialPrefillResumesIt) {
  // b is mid-prompt (chunked by the budget) when swapped out; it resumes where it stopped.
  Fixture f(5, 4, 16, false, 8);
  Request* a = f.add(8);
  Request* b = f.add(12);
  f.step();  // a: 8 tokens; b: 8 of 12 (budget 16)
  ASSERT_EQ(f.scheduler->num_computed(b), 8);
  f.step();  // a decodes (needs a 3rd block), b wants 4 more (1 block): 6 > 5 blocks, b swapped out
  ASSERT_EQ(b->status, RequestStatus::kSwapped);
  EXPECT_EQ(b->swapped_len, 8);
  f.scheduler->remove(a);
  const SchedulerStep& s = f.step();
  EXPECT_EQ(f.tokens_of(s, b), 4) << "the rest of its prompt only";
  EXPECT_TRUE(s.chunks[0].samples);
}

}  // namespace
}  // namespace nanoserve
