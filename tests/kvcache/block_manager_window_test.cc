// BlockManager with a sliding window: the blocks wholly behind what a
// sequence can still read (its window and the runner's margin) go back as it
// grows, its table keeps a released prefix that fill_batch never hands out as
// another's block, and the prefix cache only matches what is still cached.

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "engine/rng.h"
#include "kvcache/block_manager.h"

namespace nanoserve {
namespace {

BlockManagerConfig windowed(int32_t block_size, int32_t num_blocks, int64_t window, int64_t margin = 0,
                            bool caching = true, int32_t max_seqs = 8) {
  BlockManagerConfig c;
  c.block_size = block_size;
  c.num_blocks = num_blocks;
  c.max_num_seqs = max_seqs;
  c.max_seq_len = 1 << 20;
  c.enable_prefix_caching = caching;
  c.sliding_window = window;
  c.window_read_margin = margin;
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

// Blocks a sequence of len tokens still needs: from the block holding its
// next token's first read (len + 1 - window - margin) to its end.
int64_t held_blocks(int64_t len, int64_t bs, int64_t window, int64_t margin) {
  const int64_t first = std::max<int64_t>(0, len + 1 - window - margin);
  return (len + bs - 1) / bs - first / bs;
}

TEST(BlockManagerWindow, ConfigRefusesNegativeWindowAndMargin) {
  for (auto [field, c] : {std::pair{"sliding_window", windowed(4, 8, -1)},
                          std::pair{"window_read_margin", windowed(4, 8, 8, -2)}}) {
    const Status st = c.validate();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(field), std::string::npos) << st.message();
  }
}

TEST(BlockManagerWindow, ReleasableCountsWholeBlocksBeforeTheFirstRead) {
  BlockManager m(windowed(4, 64, 6));
  // Next position 8 reads [3, 8]: block 0 holds 0..3, still read.
  EXPECT_EQ(m.releasable_blocks(8), 0);
  EXPECT_EQ(m.releasable_blocks(9), 1);  // reads [4, 9]
  EXPECT_EQ(m.releasable_blocks(12), 1);
  EXPECT_EQ(m.releasable_blocks(13), 2);
  BlockManager with_margin(windowed(4, 64, 6, 5));
  EXPECT_EQ(with_margin.releasable_blocks(13), 0);  // reads [3, 13]
  EXPECT_EQ(with_margin.releasable_blocks(14), 1);
  BlockManager none(windowed(4, 64, 0));
  EXPECT_EQ(none.releasable_blocks(1000), 0);
}

// One token at a time (decode) and in chunks (prefill): the sequence holds
// exactly its window's blocks after every commit, and the rest are free.
TEST(BlockManagerWindow, ALongSequenceHoldsOnlyItsWindow) {
  for (const int64_t margin : {0, 5}) {
    for (const int64_t chunk : {1, 7, 16}) {
      SCOPED_TRACE(::testing::Message() << "margin " << margin << ", chunk " << chunk);
      const int64_t bs = 4, window = 6;
      BlockManager m(windowed(bs, 64, window, margin, /*caching=*/false));
      const std::vector<int32_t> tokens = iota(200);
      const int32_t s = *m.add_sequence();
      int64_t most = 0;
      for (int64_t len = 0; len < 200;) {
        const int64_t next = std::min<int64_t>(200, len + chunk);
        ASSERT_TRUE(m.reserve(s, next).ok());
        m.commit(s, seq_of(tokens), next);
        len = next;
        ASSERT_EQ(m.num_held_blocks(s), held_blocks(len, bs, window, margin)) << len;
        ASSERT_EQ(m.num_in_use_blocks(), m.num_held_blocks(s));
        ASSERT_EQ(static_cast<int64_t>(m.block_table(s).size()), (len + bs - 1) / bs);
        for (int32_t i = 0; i < m.num_released(s); ++i) ASSERT_EQ(m.block_table(s)[i], -1);
        const Status st = m.check_invariants();
        ASSERT_TRUE(st.ok()) << st.to_string();
        most = std::max<int64_t>(most, m.num_in_use_blocks());
      }
      // 200 tokens would take 50 blocks; the window and margin take a few.
      EXPECT_LE(most, (window - 1 + margin + chunk + 2 * bs - 2) / bs + 1);
      EXPECT_EQ(m.num_window_releases(), 50 - m.num_held_blocks(s));
      m.free_sequence(s);
      EXPECT_EQ(m.num_free_blocks(), 64);
    }
  }
}

// The batch's table holds a pool id in every entry a context covers (the
// oldest held block in released ones), and the step's slots are its own.
TEST(BlockManagerWindow, FillBatchPutsTheOldestHeldBlockInReleasedEntries) {
  BlockManager m(windowed(4, 32, 6));
  const std::vector<int32_t> tokens = iota(30);
  const int32_t s = *m.add_sequence();
  ASSERT_TRUE(m.reserve(s, 30).ok());
  m.commit(s, seq_of(tokens), 30);
  ASSERT_EQ(m.num_released(s), 6);  // 30 + 1 - 6 = 25: blocks 0..5 end by 24
  ASSERT_TRUE(m.reserve(s, 31).ok());
  ForwardBatch b;
  b.seq_ids = {s};
  b.seq_starts = {0, 1};
  b.positions = {30};
  b.tokens = {7};
  b.context_lens = {31};
  m.fill_batch(b);
  const std::span<const int32_t> table = m.block_table(s);
  for (int32_t i = 0; i < 6; ++i) EXPECT_EQ(b.block_tables[i], table[6]) << i;
  ASSERT_EQ(b.max_blocks_per_seq, 8);  // eight blocks, released ones included
  ASSERT_EQ(b.block_tables.size(), 8u);
  for (int32_t i = 6; i < 8; ++i) EXPECT_EQ(b.block_tables[i], table[i]) << i;
  EXPECT_EQ(b.slot_mapping[0], table[7] * 4 + 2);
}

// Released blocks that were cached stay cached (evictable): a new sequence
// with the same prefix hits all of it, takes back only what its window
// needs, and once the first block is evicted nothing past it matches.
TEST(BlockManagerWindow, PrefixHitsNeedEveryBlockFromZeroStillCached) {
  const int64_t bs = 4, window = 6;
  BlockManager m(windowed(bs, 16, window));
  const std::vector<int32_t> tokens = iota(41);
  const int32_t a = *m.add_sequence();
  for (int64_t len = 1; len <= 40; ++len) {
    ASSERT_TRUE(m.reserve(a, len).ok());
    m.commit(a, seq_of(tokens), len);
  }
  EXPECT_EQ(m.num_held_blocks(a), 2);  // 40 + 1 - 6 = 35: blocks 8 and 9
  EXPECT_EQ(m.num_cached_blocks(), 10);
  EXPECT_EQ(m.num_evictable_blocks(), 8);
  m.free_sequence(a);

  const int32_t b = *m.add_sequence();
  EXPECT_EQ(m.cached_prefix_len(seq_of(tokens)), 40);
  EXPECT_EQ(m.attach_cached_prefix(b, seq_of(tokens)), 40);
  EXPECT_EQ(m.num_held_blocks(b), 2);  // attached, then the 8 behind the window released at once
  EXPECT_EQ(m.num_released(b), 8);
  const Status st = m.check_invariants();
  ASSERT_TRUE(st.ok()) << st.to_string();
  m.free_sequence(b);

  // Another sequence takes the 6 free blocks and then evicts, least recently
  // used first: b's released blocks 7, 6, ... 0 (released newest first), then 9, 8.
  const int32_t c = *m.add_sequence();
  ASSERT_TRUE(m.reserve(c, 7 * bs).ok());
  EXPECT_EQ(m.num_evictions(), 1);
  EXPECT_EQ(m.cached_prefix_len(seq_of(tokens)), 7 * bs) << "the match ends at the evicted block 7";
  ASSERT_TRUE(m.reserve(c, 14 * bs).ok());
  EXPECT_EQ(m.num_evictions(), 8);
  EXPECT_EQ(m.num_cached_blocks(), 2);  // blocks 8 and 9: cached, but behind an evicted block 0
  EXPECT_EQ(m.cached_prefix_len(seq_of(tokens)), 0) << "matched past an evicted block 0";
  m.free_sequence(c);
  const int32_t d = *m.add_sequence();
  EXPECT_EQ(m.attach_cached_prefix(d, seq_of(tokens)), 0);
  EXPECT_EQ(m.num_held_blocks(d), 0);
  const Status st2 = m.check_invariants();
  EXPECT_TRUE(st2.ok()) << st2.to_string();
}

TEST(BlockManagerWindow, ShrinkToWithinTheWindowKeepsTheReleasedPrefix) {
  BlockManager m(windowed(4, 32, 6, 0, /*caching=*/false));
  const std::vector<int32_t> tokens = iota(40);
  const int32_t s = *m.add_sequence();
  ASSERT_TRUE(m.reserve(s, 36).ok());
  m.commit(s, seq_of(tokens), 30);  // releases 6; 30 tokens, table of 9
  ASSERT_EQ(m.num_released(s), 6);
  m.shrink_to(s, 29);  // 29 + 1 - 6 = 24: still 6 releasable
  EXPECT_EQ(m.num_released(s), 6);
  EXPECT_EQ(m.block_table(s).size(), 8u);
  const Status st = m.check_invariants();
  EXPECT_TRUE(st.ok()) << st.to_string();
}

TEST(BlockManagerWindowDeathTest, ShrinkBelowAReleasedBlockAborts) {
  BlockManager m(windowed(4, 32, 6, 0, /*caching=*/false));
  const std::vector<int32_t> tokens = iota(40);
  const int32_t s = *m.add_sequence();
  ASSERT_TRUE(m.reserve(s, 30).ok());
  m.commit(s, seq_of(tokens), 30);
  EXPECT_DEATH(m.shrink_to(s, 28), "released behind the window");
}

// Random growth (one token, a prefill chunk, a speculative step with a
// rollback), admission from the cache, and frees, with windows and margins:
// check_invariants (exactly the window's blocks held) after every move, and
// no two live sequences share a private block.
TEST(BlockManagerWindow, RandomizedInvariants) {
  for (int32_t bs : {1, 3, 4}) {
    for (const int64_t margin : {0, 4}) {
      SCOPED_TRACE(::testing::Message() << "block_size " << bs << ", margin " << margin);
      const int64_t window = 5;
      BlockManager m(windowed(bs, 40, window, margin, true, 6));
      Rng rng(31 + bs + static_cast<uint64_t>(margin));
      struct Live {
        int32_t seq;
        std::vector<int32_t> tokens;
      };
      std::vector<Live> live;
      const std::vector<int32_t> prefixes[2] = {iota(19, 1000), iota(13, 2000)};
      int64_t hits = 0;
      for (int op = 0; op < 3000; ++op) {
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
          if (!m.can_reserve(s, static_cast<int64_t>(t.size()))) {
            m.free_sequence(s);
          } else {
            ASSERT_TRUE(m.reserve(s, static_cast<int64_t>(t.size())).ok());
            m.commit(s, seq_of(t), static_cast<int64_t>(t.size()));
            live.push_back({s, t});
          }
        } else if (what == 1 && !live.empty()) {
          // A decode or a prefill chunk.
          Live& l = live[rng.next_u64() % live.size()];
          const int64_t n0 = static_cast<int64_t>(l.tokens.size());
          const int64_t add = 1 + static_cast<int64_t>(rng.next_u64() % 9);
          if (m.can_reserve(l.seq, n0 + add)) {
            for (int64_t i = 0; i < add; ++i) l.tokens.push_back(static_cast<int32_t>(rng.next_u64() % 3));
            ASSERT_TRUE(m.reserve(l.seq, n0 + add).ok());
            m.commit(l.seq, seq_of(l.tokens), n0 + add);
          }
        } else if (what == 3 && !live.empty()) {
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
        std::set<int32_t> private_blocks;
        for (const Live& l : live) {
          const int64_t len = static_cast<int64_t>(l.tokens.size());
          ASSERT_EQ(m.num_held_blocks(l.seq), held_blocks(len, bs, window, margin));
          for (int32_t blk : m.block_table(l.seq)) {
            if (blk >= 0 && !m.is_cached(blk)) {
              ASSERT_TRUE(private_blocks.insert(blk).second) << "block " << blk << " shared";
            }
          }
        }
      }
      EXPECT_GT(hits, 0);
      EXPECT_GT(m.num_window_releases(), 0);
      EXPECT_GT(m.num_evictions(), 0);
    }
  }
}

}  // namespace
}  // namespace nanoserve
