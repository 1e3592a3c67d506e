// SwapSpace: slot ids handed out lowest first, freed, refused when too few,
// and recounted by check_invariants.

#include "kvcache/swap_space.h"

#include <gtest/gtest.h>

#include <vector>

#include "engine/rng.h"

namespace nanoserve {
namespace {

TEST(SwapSpace, HandsOutLowestSlotsFirstAndRefusesWhatDoesNotFit) {
  SwapSpace s(6);
  std::vector<int32_t> a, b, c;
  ASSERT_TRUE(s.allocate(2, a));
  ASSERT_TRUE(s.allocate(3, b));
  EXPECT_EQ(a, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(b, (std::vector<int32_t>{2, 3, 4}));
  EXPECT_EQ(s.num_free_slots(), 1);
  EXPECT_FALSE(s.allocate(2, c)) << "only one slot is free";
  EXPECT_TRUE(c.empty()) << "a refused allocation changes nothing";
  EXPECT_EQ(s.num_free_slots(), 1);
  s.free(a);
  ASSERT_TRUE(s.allocate(3, c));
  EXPECT_EQ(c, (std::vector<int32_t>{0, 1, 5})) << "the holes first, then past the others";
  EXPECT_EQ(s.num_free_slots(), 0);
  EXPECT_TRUE(s.check_invariants(6).ok());
  EXPECT_FALSE(s.check_invariants(5).ok()) << "a slot no sequence holds is a leak";
}

TEST(SwapSpace, EmptyAreaRefusesEverySlot) {
  SwapSpace s(0);
  std::vector<int32_t> out;
  EXPECT_FALSE(s.allocate(1, out));
  EXPECT_TRUE(s.allocate(0, out));
  EXPECT_TRUE(s.check_invariants(0).ok());
}

TEST(SwapSpace, FreeOfAFreeSlotAborts) {
  SwapSpace s(4);
  std::vector<int32_t> a;
  ASSERT_TRUE(s.allocate(1, a));
  s.free(a);
  EXPECT_DEATH(s.free(a), "free of free swap slot");
}

// Random allocations and frees against a plain model of which slots are used.
TEST(SwapSpace, RandomizedAgainstAModel) {
  SwapSpace s(37);
  std::vector<std::vector<int32_t>> held;
  std::vector<bool> used(37, false);
  Rng rng(11);
  for (int op = 0; op < 3000; ++op) {
    if (held.empty() || rng.next_u64() % 2 == 0) {
      const int32_t n = static_cast<int32_t>(rng.next_u64() % 6);
      std::vector<int32_t> got;
      int32_t free_now = 0;
      for (bool u : used) free_now += u ? 0 : 1;
      const bool ok = s.allocate(n, got);
      ASSERT_EQ(ok, n <= free_now);
      if (!ok) continue;
      // The n lowest free slots, in order.
      std::vector<int32_t> want;
      for (int32_t i = 0; i < 37 && static_cast<int32_t>(want.size()) < n; ++i)
        if (!used[i]) want.push_back(i);
      ASSERT_EQ(got, want);
      for (int32_t x : got) used[x] = true;
      held.push_back(got);
    } else {
      const size_t k = rng.next_u64() % held.size();
      s.free(held[k]);
      for (int32_t x : held[k]) used[x] = false;
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(k));
    }
    int64_t n_used = 0;
    for (bool u : used) n_used += u ? 1 : 0;
    ASSERT_TRUE(s.check_invariants(n_used).ok()) << s.check_invariants(n_used).to_string();
    ASSERT_EQ(s.num_used_slots(), n_used);
  }
}

}  // namespace
}  // namespace nanoserve
