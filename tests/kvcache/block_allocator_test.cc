#include "kvcache/block_allocator.h"

#include <gtest/gtest.h>

#include <set>

namespace nanoserve {
namespace {

TEST(BlockAllocator, HandsOutEveryBlockOnceThenRunsOut) {
  BlockAllocator a(5);
  EXPECT_EQ(a.num_blocks(), 5);
  EXPECT_EQ(a.num_free(), 5);
  std::set<int32_t> seen;
  for (int i = 0; i < 5; ++i) {
    auto b = a.allocate();
    ASSERT_TRUE(b.has_value());
    EXPECT_GE(*b, 0);
    EXPECT_LT(*b, 5);
    EXPECT_TRUE(seen.insert(*b).second) << "block " << *b << " handed out twice";
    EXPECT_EQ(a.ref_count(*b), 1);
    EXPECT_EQ(a.num_free() + a.num_used(), 5);
  }
  EXPECT_EQ(a.num_free(), 0);
  EXPECT_FALSE(a.allocate().has_value());
}

TEST(BlockAllocator, FreedBlockIsReused) {
  BlockAllocator a(3);
  const int32_t b0 = *a.allocate();
  const int32_t b1 = *a.allocate();
  const int32_t b2 = *a.allocate();
  EXPECT_TRUE(a.free(b1));
  EXPECT_EQ(a.num_free(), 1);
  EXPECT_EQ(a.ref_count(b1), 0);
  EXPECT_EQ(*a.allocate(), b1);
  EXPECT_TRUE(a.free(b0));
  EXPECT_TRUE(a.free(b2));
  EXPECT_EQ(a.num_free(), 2);
}

TEST(BlockAllocator, SharedBlockFreedByLastHolder) {
  BlockAllocator a(2);
  const int32_t b = *a.allocate();
  a.incref(b);
  a.incref(b);
  EXPECT_EQ(a.ref_count(b), 3);
  EXPECT_FALSE(a.free(b));
  EXPECT_FALSE(a.free(b));
  EXPECT_EQ(a.num_free(), 1);
  EXPECT_TRUE(a.free(b));
  EXPECT_EQ(a.num_free(), 2);
}

TEST(BlockAllocatorDeathTest, DoubleFreeAborts) {
  BlockAllocator a(2);
  const int32_t b = *a.allocate();
  EXPECT_TRUE(a.free(b));
  EXPECT_DEATH(a.free(b), "double free of block");
}

TEST(BlockAllocatorDeathTest, UnknownBlockAborts) {
  BlockAllocator a(2);
  EXPECT_DEATH(a.free(2), "unknown block 2");
  EXPECT_DEATH(a.free(-1), "unknown block -1");
  EXPECT_DEATH(a.incref(7), "unknown block 7");
}

TEST(BlockAllocatorDeathTest, IncrefOfFreeBlockAborts) {
  BlockAllocator a(2);
  EXPECT_DEATH(a.incref(0), "incref of free block");
}

}  // namespace
}  // namespace nanoserve
