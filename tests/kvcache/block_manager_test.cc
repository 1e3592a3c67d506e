// BlockManager: block ids, reference counts, tables, lengths and the prefix
// cache, checked against the counts and check_invariants() after every move.

#include "kvcache/block_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "engine/rng.h"

namespace nanoserve {
namespace {

BlockManagerConfig config(int32_t block_size, int32_t num_blocks, bool caching = true, int32_t max_seqs = 8) {
  BlockManagerConfig c;
  c.block_size = block_size;
  c.num_blocks = num_blocks;
  c.max_num_seqs = max_seqs;
  c.max_seq_len = 1 << 20;
  c.enable_prefix_caching = caching;
  return c;
}

TokenSeq seq_of(const std::vector<int32_t>& v) {
  return {v, {}};
}

std::vector<int32_t> iota(int32_t n, int32_t from = 100) {
  std::vector<int32_t> v(n);
  for (int32_t i = 0; i < n; ++i) v[i] = from + i;
  return v;
}

void expect_consistent(const BlockManager& m) {
  const Status st = m.check_invariants();
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(m.num_free_blocks() + m.num_in_use_blocks() + m.num_evictable_blocks(), m.num_blocks());
}

// A sequence that computed all of `tokens` (as the engine's steps would).
int32_t computed_sequence(BlockManager& m, const std::vector<int32_t>& tokens) {
  const int32_t s = *m.add_sequence();
  const int64_t hit = m.attach_cached_prefix(s, seq_of(tokens));
  EXPECT_TRUE(m.reserve(s, static_cast<int64_t>(tokens.size())).ok());
  EXPECT_GE(static_cast<int64_t>(tokens.size()), hit);
  m.commit(s, seq_of(tokens), static_cast<int64_t>(tokens.size()));
  return s;
}

TEST(BlockManager, ConfigNamesTheBadField) {
  for (auto [field, c] : {std::pair{"num_blocks", config(4, 0)}, std::pair{"block_size", config(0, 4)},
                          std::pair{"max_num_seqs", config(4, 4, true, 0)}}) {
    const Status st = c.validate();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(field), std::string::npos) << st.message();
  }
}

TEST(BlockManager, TableGrowsWhenCrossingIntoANewBlockAndSlotsFollowIt) {
  BlockManager m(config(4, 8, false));
  const int32_t s = *m.add_sequence();
  ASSERT_TRUE(m.reserve(s, 3).ok());
  EXPECT_EQ(m.block_table(s).size(), 1u);
  ASSERT_TRUE(m.reserve(s, 4).ok());  // fills block 0
  EXPECT_EQ(m.block_table(s).size(), 1u);
  ASSERT_TRUE(m.reserve(s, 5).ok());  // crosses into block 1
  EXPECT_EQ(m.block_table(s).size(), 2u);
  EXPECT_EQ(m.num_in_use_blocks(), 2);
  ForwardBatch b;
  b.tokens = {0, 0};
  b.positions = {3, 4};
  b.seq_starts = {0, 2};
  b.seq_ids = {s};
  b.context_lens = {5};
  m.fill_batch(b);
  EXPECT_EQ(b.max_blocks_per_seq, 2) << "the stride is the step's longest table, not max_seq_len's";
  ASSERT_EQ(b.block_tables.size(), 2u);
  EXPECT_EQ(b.block_tables[0], m.block_table(s)[0]);
  EXPECT_EQ(b.block_tables[1], m.block_table(s)[1]);
  EXPECT_EQ(b.slot_mapping[0], m.block_table(s)[0] * 4 + 3);
  EXPECT_EQ(b.slot_mapping[1], m.block_table(s)[1] * 4 + 0);
  // Three blocks: a stride of four (a power of two), -1 past the table's end.
  ASSERT_TRUE(m.reserve(s, 9).ok());
  b.positions = {7, 8};
  b.context_lens = {9};
  m.fill_batch(b);
  EXPECT_EQ(b.max_blocks_per_seq, 4);
  ASSERT_EQ(b.block_tables.size(), 4u);
  for (int32_t i = 0; i < 3; ++i) EXPECT_EQ(b.block_tables[i], m.block_table(s)[i]) << i;
  EXPECT_EQ(b.block_tables[3], -1) << "padding past the table's end";
  EXPECT_EQ(b.slot_mapping[1], m.block_table(s)[2] * 4 + 0);
  expect_consistent(m);
}

TEST(BlockManager, ReserveFailsCleanlyWhenBlocksRunOut) {
  BlockManager m(config(4, 5, false));
  const int32_t a = *m.add_sequence();
  const int32_t b = *m.add_sequence();
  ASSERT_TRUE(m.reserve(a, 12).ok());  // 3 blocks
  EXPECT_EQ(m.num_free_blocks(), 2);
  EXPECT_EQ(m.blocks_needed(b, 9), 3);
  EXPECT_FALSE(m.can_reserve(b, 9));
  EXPECT_EQ(m.reserve(b, 9).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(m.num_free_blocks(), 2) << "a failed reserve must allocate nothing";
  EXPECT_EQ(m.block_table(b).size(), 0u);
  m.free_sequence(a);
  EXPECT_EQ(m.num_free_blocks(), 5);
  EXPECT_TRUE(m.reserve(b, 9).ok());
  EXPECT_EQ(m.num_live_seqs(), 1);
  expect_consistent(m);
}

TEST(BlockManager, SequenceHandlesAreBoundedAndReused) {
  BlockManager m(config(4, 8, true, 2));
  const int32_t a = *m.add_sequence();
  const int32_t b = *m.add_sequence();
  EXPECT_NE(a, b);
  EXPECT_EQ(m.add_sequence().status().code(), StatusCode::kResourceExhausted);
  m.free_sequence(a);
  EXPECT_FALSE(m.is_live(a));
  EXPECT_EQ(*m.add_sequence(), a);
}

TEST(BlockManagerDeathTest, FreeOfUnknownSequenceAborts) {
  BlockManager m(config(4, 8));
  const int32_t s = *m.add_sequence();
  m.free_sequence(s);
  EXPECT_DEATH(m.free_sequence(s), "unknown sequence handle");
}

TEST(BlockManager, LengthIsWhatWasCommitted) {
  BlockManager m(config(4, 8));
  const int32_t s = *m.add_sequence();
  const std::vector<int32_t> t = iota(6);
  ASSERT_TRUE(m.reserve(s, 6).ok());
  EXPECT_EQ(m.seq_len(s), 0) << "reserving is not computing";
  m.commit(s, seq_of(t), 6);
  EXPECT_EQ(m.seq_len(s), 6);
  EXPECT_EQ(m.seq_capacity(s), 8);
  EXPECT_EQ(m.num_cached_blocks(), 1) << "only the full block is cached";
}

TEST(BlockManager, FullBlocksOfAFinishedSequenceAreHitAndShared) {
  BlockManager m(config(4, 16));
  const std::vector<int32_t> prompt = iota(10);  // blocks [0,4) [4,8) and 2 tokens
  const int32_t a = computed_sequence(m, prompt);
  EXPECT_EQ(m.num_cached_blocks(), 2);
  const std::vector<int32_t> a_table(m.block_table(a).begin(), m.block_table(a).end());
  // Same prompt while a still runs: both full blocks are shared.
  std::vector<int32_t> other = prompt;
  other.push_back(7);
  EXPECT_EQ(m.cached_prefix_len(seq_of(other)), 8);
  const int32_t b = *m.add_sequence();
  EXPECT_EQ(m.attach_cached_prefix(b, seq_of(other)), 8);
  EXPECT_EQ(m.seq_len(b), 8);
  EXPECT_EQ(m.block_table(b)[0], a_table[0]);
  EXPECT_EQ(m.block_table(b)[1], a_table[1]);
  EXPECT_EQ(m.ref_count(a_table[0]), 2);
  expect_consistent(m);
  // a finishes: shared blocks keep b's reference; a's private tail block is free.
  m.free_sequence(a);
  EXPECT_EQ(m.ref_count(a_table[0]), 1);
  EXPECT_EQ(m.ref_count(a_table[2]), 0);
  EXPECT_FALSE(m.is_cached(a_table[2]));
  m.free_sequence(b);
  EXPECT_EQ(m.num_evictable_blocks(), 2);
  EXPECT_EQ(m.num_in_use_blocks(), 0);
  expect_consistent(m);
  // A third sequence after both left: still a hit, the blocks come off the LRU list.
  const int32_t c = *m.add_sequence();
  EXPECT_EQ(m.attach_cached_prefix(c, seq_of(other)), 8);
  EXPECT_EQ(m.num_evictable_blocks(), 0);
  expect_consistent(m);
}

TEST(BlockManager, HitStopsAtTheFirstDifferenceAndNeverCoversTheLastToken) {
  BlockManager m(config(4, 16));
  const std::vector<int32_t> prompt = iota(12);
  m.free_sequence(computed_sequence(m, prompt));
  EXPECT_EQ(m.num_cached_blocks(), 3);
  // Exactly the cached 12 tokens: the last must be computed, so only 8 are a hit.
  EXPECT_EQ(m.cached_prefix_len(seq_of(prompt)), 8);
  std::vector<int32_t> diverge = prompt;
  diverge[5] = 1;  // second block differs: the third cannot match either (chain)
  diverge.push_back(0);
  EXPECT_EQ(m.cached_prefix_len(seq_of(diverge)), 4);
  // Same tokens as block 2 but after a different prefix: no hit (the hash is a chain).
  std::vector<int32_t> shifted(prompt.begin() + 8, prompt.end());
  shifted.push_back(0);
  EXPECT_EQ(m.cached_prefix_len(seq_of(shifted)), 0);
  // The two pieces of a TokenSeq are one sequence.
  const std::vector<int32_t> head(prompt.begin(), prompt.begin() + 6), tail(prompt.begin() + 6, prompt.end());
  std::vector<int32_t> tail_more = tail;
  tail_more.push_back(1);
  EXPECT_EQ(m.cached_prefix_len({head, tail_more}), 12);
}

TEST(BlockManager, OffMeansNoHits) {
  BlockManager m(config(4, 16, false));
  const std::vector<int32_t> prompt = iota(12);
  m.free_sequence(computed_sequence(m, prompt));
  EXPECT_EQ(m.num_cached_blocks(), 0);
  EXPECT_EQ(m.num_free_blocks(), 16);
  EXPECT_EQ(m.cached_prefix_len(seq_of(prompt)), 0);
}

TEST(BlockManager, EvictsLeastRecentlyUsedOnlyWhenNeeded) {
  BlockManager m(config(4, 6));
  const std::vector<int32_t> p1 = iota(8, 100), p2 = iota(8, 200);
  m.free_sequence(computed_sequence(m, p1));  // 2 cached blocks, older
  m.free_sequence(computed_sequence(m, p2));  // 2 cached blocks, newer
  EXPECT_EQ(m.num_evictable_blocks(), 4);
  EXPECT_EQ(m.num_free_blocks(), 2);
  EXPECT_EQ(m.num_available_blocks(), 6);
  // Two blocks come from the free list: nothing is evicted.
  const int32_t s = *m.add_sequence();
  ASSERT_TRUE(m.reserve(s, 8).ok());
  EXPECT_EQ(m.num_evictions(), 0);
  EXPECT_EQ(m.cached_prefix_len(seq_of(iota(9, 100))), 8);
  // The third block must evict: p1's tail block goes first (least recently used).
  ASSERT_TRUE(m.reserve(s, 12).ok());
  EXPECT_EQ(m.num_evictions(), 1);
  EXPECT_EQ(m.cached_prefix_len(seq_of(iota(9, 100))), 4) << "p1's first block outlives its tail";
  EXPECT_EQ(m.cached_prefix_len(seq_of(iota(9, 200))), 8);
  expect_consistent(m);
  // Using p2 again refreshes it: the next evictions take p1's head first.
  const int32_t t = *m.add_sequence();
  EXPECT_EQ(m.attach_cached_prefix(t, seq_of(iota(9, 200))), 8);
  m.free_sequence(t);
  ASSERT_TRUE(m.reserve(s, 16).ok());
  EXPECT_EQ(m.cached_prefix_len(seq_of(iota(9, 100))), 0);
  EXPECT_EQ(m.cached_prefix_len(seq_of(iota(9, 200))), 8);
  expect_consistent(m);
}

TEST(BlockManager, SameContentComputedTwiceIsCachedOnce) {
  BlockManager m(config(4, 16));
  const std::vector<int32_t> p = iota(8);
  const int32_t a = *m.add_sequence(), b = *m.add_sequence();
  ASSERT_TRUE(m.reserve(a, 8).ok());
  ASSERT_TRUE(m.reserve(b, 8).ok());
  m.commit(a, seq_of(p), 8);
  m.commit(b, seq_of(p), 8);  // b computed the same blocks before a's were cached
  EXPECT_EQ(m.num_cached_blocks(), 2);
  m.free_sequence(a);
  m.free_sequence(b);
  EXPECT_EQ(m.num_evictable_blocks(), 2);
  EXPECT_EQ(m.num_free_blocks(), 14);
  expect_consistent(m);
}

// Random sequences with shared prefixes, growth, commits, frees and
// evictions; the invariant and the recount hold after every operation, and
// every cached hit holds exactly the tokens asked for.
TEST(BlockManager, ShrinkToGivesBackTheBlocksPastTheLength) {
  BlockManager m(config(4, 10, false));
  const int32_t s = *m.add_sequence();
  const std::vector<int32_t> t = iota(6);
  ASSERT_TRUE(m.reserve(s, 13).ok());  // 6 known + 7 proposed: 4 blocks
  EXPECT_EQ(m.num_free_blocks(), 6);
  m.commit(s, seq_of(t), 6);
  m.shrink_to(s, 6);
  EXPECT_EQ(m.seq_len(s), 6);
  EXPECT_EQ(m.block_table(s).size(), 2u);
  EXPECT_EQ(m.num_free_blocks(), 8);
  // A draft model's cache rolls back below what it committed.
  m.shrink_to(s, 3);
  EXPECT_EQ(m.seq_len(s), 3);
  EXPECT_EQ(m.block_table(s).size(), 1u);
  m.shrink_to(s, 0);
  EXPECT_TRUE(m.block_table(s).empty());
  EXPECT_EQ(m.num_free_blocks(), 10);
  expect_consistent(m);
}

TEST(BlockManager, ShrinkToKeepsCachedBlocksAndTheirHolders) {
  BlockManager m(config(4, 10, true));
  const std::vector<int32_t> t = iota(9);
  const int32_t a = *m.add_sequence();
  ASSERT_TRUE(m.reserve(a, 12).ok());
  m.commit(a, seq_of(t), 9);  // two full blocks cached
  m.shrink_to(a, 9);
  EXPECT_EQ(m.block_table(a).size(), 3u);
  EXPECT_EQ(m.num_cached_blocks(), 2);
  const int32_t b = *m.add_sequence();
  EXPECT_EQ(m.attach_cached_prefix(b, seq_of(t)), 8);
  expect_consistent(m);
}

TEST(BlockManagerDeathTest, ShrinkBelowAHashedBlockAborts) {
  BlockManager m(config(4, 10, true));
  const int32_t s = *m.add_sequence();
  ASSERT_TRUE(m.reserve(s, 8).ok());
  m.commit(s, seq_of(iota(8)), 8);
  EXPECT_DEATH(m.shrink_to(s, 5), "hashed block");
}

TEST(BlockManager, RandomizedInvariants) {
  for (int32_t bs : {1, 3, 4}) {
    SCOPED_TRACE(testing::Message() << "block_size " << bs);
    BlockManager m(config(bs, 40, true, 6));
    Rng rng(17 + bs);
    struct Live {
      int32_t seq;
      std::vector<int32_t> tokens;
    };
    std::vector<Live> live;
    const std::vector<int32_t> prefixes[2] = {iota(9, 1000), iota(7, 2000)};
    int64_t hits = 0;
    for (int op = 0; op < 2000; ++op) {
      const uint64_t what = rng.next_u64() % 5;
      if (what == 0 && m.num_live_seqs() < 6) {
        std::vector<int32_t> t = prefixes[rng.next_u64() % 2];
        t.resize(1 + rng.next_u64() % t.size());
        for (int i = 0, n = static_cast<int>(rng.next_u64() % 5); i < n; ++i)
          t.push_back(static_cast<int32_t>(rng.next_u64() % 3));
        const int32_t s = *m.add_sequence();
        const int64_t hit = m.attach_cached_prefix(s, seq_of(t));
        hits += hit;
        ASSERT_LT(hit, static_cast<int64_t>(t.size()));
        ASSERT_EQ(hit % bs, 0);
        if (!m.can_reserve(s, static_cast<int64_t>(t.size()))) {
          m.free_sequence(s);
        } else {
          ASSERT_TRUE(m.reserve(s, static_cast<int64_t>(t.size())).ok());
          m.commit(s, seq_of(t), static_cast<int64_t>(t.size()));
          live.push_back({s, t});
        }
      } else if (what == 1 && !live.empty()) {
        Live& l = live[rng.next_u64() % live.size()];
        l.tokens.push_back(static_cast<int32_t>(rng.next_u64() % 3));
        const int64_t n = static_cast<int64_t>(l.tokens.size());
        if (m.can_reserve(l.seq, n)) {
          ASSERT_TRUE(m.reserve(l.seq, n).ok());
          m.commit(l.seq, seq_of(l.tokens), n);
        } else {
          l.tokens.pop_back();
        }
      } else if (what == 3 && !live.empty()) {
        // Speculative decoding's step: room for the next token and k
        // proposals, then only a of them kept; the rest's blocks go back.
        Live& l = live[rng.next_u64() % live.size()];
        const int64_t n = static_cast<int64_t>(l.tokens.size());
        const int64_t k = 1 + static_cast<int64_t>(rng.next_u64() % 6);
        if (m.can_reserve(l.seq, n + k)) {
          ASSERT_TRUE(m.reserve(l.seq, n + k).ok());
          const int64_t a = static_cast<int64_t>(rng.next_u64() % (k + 1));
          for (int64_t i = 0; i < a; ++i) l.tokens.push_back(static_cast<int32_t>(rng.next_u64() % 3));
          m.commit(l.seq, seq_of(l.tokens), n + a);
          m.shrink_to(l.seq, n + a);
          ASSERT_EQ(static_cast<int64_t>(m.block_table(l.seq).size()), (n + a + bs - 1) / bs);
        }
      } else if (what == 2 && !live.empty()) {
        const size_t i = rng.next_u64() % live.size();
        m.free_sequence(live[i].seq);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      }
      const Status st = m.check_invariants();
      ASSERT_TRUE(st.ok()) << "op " << op << ": " << st.to_string();
      // No two live sequences' private (uncached) blocks coincide.
      std::set<int32_t> private_blocks;
      for (const Live& l : live) {
        for (int32_t blk : m.block_table(l.seq)) {
          if (!m.is_cached(blk)) {
            ASSERT_TRUE(private_blocks.insert(blk).second) << "block " << blk << " shared";
          }
        }
      }
    }
    EXPECT_GT(hits, 0);
    EXPECT_GT(m.num_evictions(), 0);
  }
}

}  // namespace
}  // namespace nanoserve

namespace nanoserve {
namespace {

// ---- restore_sequence (a swapped-out sequence back into new blocks) ----

TEST(BlockManagerRestore, FreshPrivateBlocksForTheLengthAndItsChainCached) {
  BlockManager m(config(4, 16));
  const std::vector<int32_t> t = iota(10);
  const int32_t a = computed_sequence(m, t);
  const std::vector<int32_t> old(m.block_table(a).begin(), m.block_table(a).end());
  m.free_sequence(a);  // as a swap-out does: 2 full blocks stay cached (evictable)
  EXPECT_EQ(m.num_evictable_blocks(), 2);
  const int32_t b = *m.add_sequence();
  ASSERT_TRUE(m.restore_sequence(b, seq_of(t), 10).ok());
  expect_consistent(m);
  EXPECT_EQ(m.seq_len(b), 10);
  ASSERT_EQ(m.block_table(b).size(), 3u);
  for (int32_t blk : m.block_table(b)) {
    EXPECT_EQ(m.ref_count(blk), 1) << "private";
    // The free list first: the evictable cached blocks stay in the cache for others.
    EXPECT_NE(blk, old[0]);
    EXPECT_NE(blk, old[1]);
  }
  // Its full blocks' hashes were already held by the evictable old blocks: they stay private.
  EXPECT_FALSE(m.is_cached(m.block_table(b)[0]));
  EXPECT_EQ(m.num_cached_blocks(), 2);
  // It grows and commits as any sequence: the third block enters the cache when full.
  ASSERT_TRUE(m.reserve(b, 12).ok());
  std::vector<int32_t> t12 = iota(12);
  m.commit(b, seq_of(t12), 12);
  EXPECT_TRUE(m.is_cached(m.block_table(b)[2]));
  expect_consistent(m);
}

TEST(BlockManagerRestore, CachesItsFullBlocksWhenNoOtherBlockHoldsThem) {
  BlockManager m(config(4, 8));
  const std::vector<int32_t> t = iota(9);
  const int32_t b = *m.add_sequence();
  ASSERT_TRUE(m.restore_sequence(b, seq_of(t), 9).ok());
  EXPECT_TRUE(m.is_cached(m.block_table(b)[0]));
  EXPECT_TRUE(m.is_cached(m.block_table(b)[1]));
  EXPECT_FALSE(m.is_cached(m.block_table(b)[2])) << "partial";
  // Another sequence with that prefix hits the restored blocks.
  const int32_t c = *m.add_sequence();
  EXPECT_EQ(m.attach_cached_prefix(c, seq_of(t)), 8);
  EXPECT_EQ(m.block_table(c)[1], m.block_table(b)[1]);
  expect_consistent(m);
}

TEST(BlockManagerRestore, RefusesWhatDoesNotFitAndChangesNothing) {
  BlockManager m(config(4, 4));
  const int32_t a = *m.add_sequence();
  ASSERT_TRUE(m.reserve(a, 8).ok());
  const int32_t b = *m.add_sequence();
  const Status st = m.restore_sequence(b, seq_of(iota(12)), 12);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.to_string();
  EXPECT_EQ(m.block_table(b).size(), 0u);
  EXPECT_EQ(m.seq_len(b), 0);
  EXPECT_EQ(m.num_free_blocks(), 2);
  expect_consistent(m);
}

TEST(BlockManagerRestore, WindowedSequenceGetsOnlyItsWindowsBlocks) {
  BlockManagerConfig c = config(4, 16);
  c.sliding_window = 5;
  BlockManager m(c);
  const std::vector<int32_t> t = iota(22);
  const int32_t b = *m.add_sequence();
  // releasable(22) = (22 + 1 - 5) / 4 = 4 of its 6 blocks.
  EXPECT_EQ(m.held_blocks_for(22), 2);
  ASSERT_TRUE(m.restore_sequence(b, seq_of(t), 22).ok());
  EXPECT_EQ(m.num_released(b), 4);
  EXPECT_EQ(m.num_held_blocks(b), 2);
  EXPECT_EQ(m.block_table(b)[3], -1);
  EXPECT_GE(m.block_table(b)[4], 0);
  expect_consistent(m);
  // The chain was rebuilt over the released blocks: the held full block 4 entered the cache.
  EXPECT_TRUE(m.is_cached(m.block_table(b)[4]));
  ASSERT_TRUE(m.reserve(b, 24).ok());
  m.commit(b, seq_of(iota(24)), 24);
  expect_consistent(m);
  m.free_sequence(b);
  expect_consistent(m);
  EXPECT_EQ(m.num_in_use_blocks(), 0);
}

}  // namespace
}  // namespace nanoserve
