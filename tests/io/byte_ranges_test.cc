#include "io/byte_ranges.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <vector>

namespace nanoserve {
namespace {

bool share_a_byte(const ByteRange& a, const ByteRange& b) {
  return std::max(a.begin, b.begin) < std::min(a.end, b.end);
}

TEST(ByteRanges, DisjointAdjacentAndEmptyRangesPass) {
  EXPECT_FALSE(find_overlap({}).has_value());
  const std::vector<ByteRange> r = {{64, 96}, {0, 32}, {32, 64}, {32, 32}, {0, 0}, {96, 96}, {200, 201}};
  EXPECT_FALSE(find_overlap(r).has_value());
}

TEST(ByteRanges, NamesTheOverlappingPair) {
  // One long range covering two later short ones that do not touch each other.
  const std::vector<ByteRange> r = {{50, 60}, {200, 300}, {0, 100}, {10, 20}};
  auto o = find_overlap(r);
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->first, 2u);
  EXPECT_EQ(o->second, 3u);
  // Equal begins: the one listed first comes first.
  const std::vector<ByteRange> same = {{8, 16}, {0, 4}, {8, 12}};
  o = find_overlap(same);
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->first, 0u);
  EXPECT_EQ(o->second, 2u);
}

// Against the pairwise check on random small sets: found iff some pair shares
// a byte, and the pair returned does.
TEST(ByteRanges, AgreesWithPairwiseCheck) {
  std::mt19937 rng(11);
  int with_overlap = 0;
  for (int trial = 0; trial < 5000; ++trial) {
    const int n = static_cast<int>(rng() % 7);
    std::vector<ByteRange> r(static_cast<size_t>(n));
    for (ByteRange& x : r) {
      x.begin = rng() % 64;
      x.end = x.begin + rng() % 12;
    }
    bool any = false;
    for (int i = 0; i < n; ++i) {
      for (int j = i + 1; j < n; ++j) any = any || share_a_byte(r[i], r[j]);
    }
    auto o = find_overlap(r);
    ASSERT_EQ(o.has_value(), any) << "trial " << trial;
    if (o) {
      ASSERT_NE(o->first, o->second);
      ASSERT_TRUE(share_a_byte(r[o->first], r[o->second])) << "trial " << trial;
      ASSERT_LE(r[o->first].begin, r[o->second].begin);
    }
    with_overlap += any;
  }
  EXPECT_GT(with_overlap, 1000);
  EXPECT_LT(with_overlap, 4000);
}

TEST(ByteRanges, QuarterMillionRangesAreQuick) {
  // The most tensor infos a 6 MB header can hold; pairwise would be 3e10 checks.
  std::vector<ByteRange> r(1 << 18);
  for (size_t i = 0; i < r.size(); ++i) {
    const uint64_t at = ((i * 7919) % r.size()) * 32;  // 7919 is prime: a permutation
    r[i] = {at, at + 32};
  }
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(find_overlap(r).has_value());
  r[12345].end += 1;
  EXPECT_TRUE(find_overlap(r).has_value());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 5.0);
}

}  // namespace
}  // namespace nanoserve
