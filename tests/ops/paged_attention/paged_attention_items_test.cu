// The block list of an attention launch whose rows share blocks (pair_rows):
// row_blocks, the one function behind both the list attention_items_kernel
// writes and the grid the host sizes for it, against a brute-force count of
// the dense grid's live blocks (a block (row, split) is live when its row
// leads its window in the launch and the split is one of the row's); and the
// query-tiled kernel's tiles (query_tile_starts) against a brute-force cut
// of each sequence. Host code only: it runs without a GPU.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "ops/paged_attention/paged_attention_common.cuh"

namespace nanoserve {
namespace {

using paged_attention_kernels::plan_splits;
using paged_attention_kernels::row_blocks;
using paged_attention_kernels::window_rows;

constexpr int kTile = 64, kMaxSplits = 32, kMinTiles = 4;

// A step's rows: row_meta [T][2] (sequence, first position this step) and positions [T].
struct Rows {
  std::vector<int32_t> meta, pos;
  void add(int32_t seq, int32_t first, int32_t n) {
    for (int32_t i = 0; i < n; ++i) {
      meta.push_back(seq);
      meta.push_back(first);
      pos.push_back(first + i);
    }
  }
  int size() const { return static_cast<int>(pos.size()); }
};

// Row t leads in the launch [r0, r1): it is the launch's first row, or the
// row before is another sequence's, not the position before, or in another
// window of R positions.
bool leads(const Rows& r, int r0, int t, int R) {
  if (t == r0 || R == 1) return true;
  const int32_t p = r.pos[t], q = r.pos[t - 1];
  return r.meta[2 * t] != r.meta[2 * (t - 1)] || q + 1 != p || q / R != p / R;
}

// The live blocks of the dense grid: (row, split) for every split of every leading row.
int brute_force_items(const Rows& r, int r0, int r1, int R) {
  int n = 0;
  for (int t = r0; t < r1; ++t) {
    for (int split = 0; split < kMaxSplits; ++split) {
      const int ctx = r.pos[t] + 1;
      const int tiles = (ctx + kTile - 1) / kTile;
      const int per = tiles > kMaxSplits * kMinTiles ? (tiles + kMaxSplits - 1) / kMaxSplits : kMinTiles;
      n += leads(r, r0, t, R) && split * per < tiles;
    }
  }
  return n;
}

int listed_items(const Rows& r, int r0, int r1, int R) {
  int n = 0;
  for (int t = r0; t < r1; ++t) {
    n += row_blocks(r.meta.data(), r.pos.data(), r0, r1, t, R, kTile, kMaxSplits, kMinTiles);
  }
  return n;
}

// The rows whose G heads each fill the 8 kNT columns (a power of two).
TEST(PagedAttentionItems, WindowSizes) {
  EXPECT_EQ(window_rows(1, 1), 8);
  EXPECT_EQ(window_rows(4, 1), 2);
  EXPECT_EQ(window_rows(4, 2), 4);
  EXPECT_EQ(window_rows(8, 1), 1);
  EXPECT_EQ(window_rows(8, 2), 2);
}

TEST(PagedAttentionItems, OnePrefillListsOnlyLeadingRows) {
  Rows r;
  r.add(0, 0, 1024);
  for (int R : {1, 2, 4}) {
    // A 1,024-token prefill: 1,024 / R leading rows, each with its splits.
    int want = 0;
    for (int p = 0; p < 1024; p += R) want += plan_splits(p + 1, kTile, kMaxSplits, kMinTiles).n_splits;
    EXPECT_EQ(listed_items(r, 0, 1024, R), want) << "R " << R;
    EXPECT_EQ(listed_items(r, 0, 1024, R), brute_force_items(r, 0, 1024, R)) << "R " << R;
  }
  // Rows that continue a window list nothing; leaders list their splits.
  EXPECT_EQ(row_blocks(r.meta.data(), r.pos.data(), 0, 1024, 5, 4, kTile, kMaxSplits, kMinTiles), 0);
  EXPECT_EQ(row_blocks(r.meta.data(), r.pos.data(), 0, 1024, 1020, 4, kTile, kMaxSplits, kMinTiles), 4);
}

TEST(PagedAttentionItems, MixedStepsAgreeWithTheDenseGrid) {
  Rows r;
  r.add(0, 6, 11);   // a chunk starting mid-window: positions 6 .. 16
  r.add(1, 400, 1);  // decode rows
  r.add(2, 3000, 1);
  r.add(3, 0, 37);  // a prompt
  r.add(4, 8191, 1);
  r.add(5, 5, 2);  // positions 5 and 6: across a window edge at R = 2, inside one at R = 4
  const int T = r.size();
  for (int R : {1, 2, 4}) {
    EXPECT_EQ(listed_items(r, 0, T, R), brute_force_items(r, 0, T, R)) << "R " << R;
    // Split into launches anywhere: each launch's first row leads.
    for (int cut : {1, 7, 12, 13, 30, T - 1}) {
      EXPECT_EQ(listed_items(r, 0, cut, R), brute_force_items(r, 0, cut, R)) << "R " << R << " cut " << cut;
      EXPECT_EQ(listed_items(r, cut, T, R), brute_force_items(r, cut, T, R)) << "R " << R << " cut " << cut;
    }
  }
  // Position 6 leads at R = 4 (first of the step's rows), 7 continues it, 8 leads.
  EXPECT_GT(row_blocks(r.meta.data(), r.pos.data(), 0, T, 0, 4, kTile, kMaxSplits, kMinTiles), 0);
  EXPECT_EQ(row_blocks(r.meta.data(), r.pos.data(), 0, T, 1, 4, kTile, kMaxSplits, kMinTiles), 0);
  EXPECT_GT(row_blocks(r.meta.data(), r.pos.data(), 0, T, 2, 4, kTile, kMaxSplits, kMinTiles), 0);
  // A launch that starts at row 1 makes it a leader.
  EXPECT_GT(row_blocks(r.meta.data(), r.pos.data(), 1, T, 1, 4, kTile, kMaxSplits, kMinTiles), 0);
}

// A sliding window's first covered position (sliding_first): a whole tile,
// at or before the row's first visible position and less than two tiles
// before it (so the first split, at least kMinTiles tiles, reaches it), and
// the same for every row of a tile (rows that share a block agree on their
// split plan with the plan each has alone). With it, a row's blocks are those
// of its covered length.
TEST(PagedAttentionItems, SlidingWindowFirstPosition) {
  using paged_attention_kernels::sliding_first;
  for (int W : {1, 5, 63, 64, 65, 128, 200, 4096}) {
    for (int ctx = 1; ctx <= 9000; ++ctx) {
      const int first = sliding_first(ctx, W, kTile), visible = std::max(0, ctx - W);
      ASSERT_EQ(first % kTile, 0) << "W " << W << " ctx " << ctx;
      ASSERT_LE(first, visible) << "W " << W << " ctx " << ctx;
      ASSERT_LT(visible - first, 2 * kTile) << "W " << W << " ctx " << ctx;
      ASSERT_LT(visible - first, kMinTiles * kTile) << "W " << W << " ctx " << ctx;
      const int tile_first_ctx = (ctx - 1) / kTile * kTile + 1;  // the tile's first row
      ASSERT_EQ(first, sliding_first(tile_first_ctx, W, kTile)) << "W " << W << " ctx " << ctx;
    }
  }
  EXPECT_EQ(sliding_first(5000, 0, kTile), 0);
  Rows r;
  r.add(0, 0, 1);
  r.add(1, 8999, 1);
  EXPECT_EQ(row_blocks(r.meta.data(), r.pos.data(), 0, 2, 1, 1, kTile, kMaxSplits, kMinTiles, 128),
            plan_splits(9000 - sliding_first(9000, 128, kTile), kTile, kMaxSplits, kMinTiles).n_splits);
  EXPECT_EQ(row_blocks(r.meta.data(), r.pos.data(), 0, 2, 1, 1, kTile, kMaxSplits, kMinTiles, 128), 1);
}

// The query-tiled kernel's tiles: the rows where query_tile_starts holds,
// each running to the next such row or its sequence's end (as the kernel's
// block counts its rows), against a brute force: every sequence of several
// rows cut into groups of R rows from its first row this step (a single row
// is the decode kernel's). A chunk that starts at an odd position, decode
// rows and tiles cut by a sequence's end included.
TEST(PagedAttentionItems, QueryTilesCutEachSequenceIntoGroupsOfR) {
  Rows r;
  r.add(0, 6, 150);  // a chunk over a history, starting at position 6
  r.add(1, 400, 1);  // decode rows
  r.add(2, 0, 64);   // a prompt of exactly one tile at R = 64
  r.add(3, 0, 65);   // one more row
  r.add(4, 3000, 1);
  r.add(5, 21, 42);  // two tiles of 21 rows at R = 21
  const int T = r.size();
  for (int R : {64, 32, 21, 16, 8, 5, 1}) {
    // The brute force: (first row, rows) of each group.
    std::vector<std::pair<int, int>> want;
    for (int t = 0; t < T;) {
      int end = t;
      while (end < T && r.meta[2 * end] == r.meta[2 * t]) ++end;
      if (end - t > 1) {
        for (int g = t; g < end; g += R) want.push_back({g, std::min(R, end - g)});
      }
      t = end;
    }
    // The kernel's: a tile at every starting row, its rows counted as the block counts them.
    std::vector<std::pair<int, int>> got;
    for (int t = 0; t < T; ++t) {
      if (!paged_attention_kernels::query_tile_starts(r.meta.data(), r.pos.data(), t, R, T)) continue;
      int n = 0;
      while (n < R && t + n < T && r.meta[2 * (t + n)] == r.meta[2 * t]) ++n;
      got.push_back({t, n});
    }
    EXPECT_EQ(got, want) << "R " << R;
  }
}

}  // namespace
}  // namespace nanoserve
