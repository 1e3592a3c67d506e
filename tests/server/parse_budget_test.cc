#include "server/parse_budget.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace nanoserve::server {
namespace {

using std::chrono::milliseconds;

constexpr size_t kKiB = 1024;

// capacity 1000 KiB, of which 100 KiB is reserved for bodies of at most 10 KiB.
ParseBudget::Options small_options(milliseconds max_wait) {
  ParseBudget::Options o;
  o.capacity_bytes = 1000 * kKiB;
  o.small_body_bytes = 10 * kKiB;
  o.small_reserve_bytes = 100 * kKiB;
  o.max_wait = max_wait;
  return o;
}

TEST(ParseBudget, AcquireAndReleaseCountBytes) {
  ParseBudget budget(small_options(milliseconds(0)));
  EXPECT_EQ(budget.max_body_bytes(), 900 * kKiB);
  {
    ParseBudget::Lease a = budget.acquire(300 * kKiB);
    ASSERT_TRUE(a.held());
    EXPECT_EQ(a.bytes(), 300 * kKiB);
    EXPECT_EQ(budget.in_use(), 300 * kKiB);
    ParseBudget::Lease b = budget.acquire(5);
    ASSERT_TRUE(b.held());
    EXPECT_EQ(budget.in_use(), 300 * kKiB + 5);
    b.release();
    b.release();  // idempotent
    EXPECT_FALSE(b.held());
    EXPECT_EQ(budget.in_use(), 300 * kKiB);
  }
  EXPECT_EQ(budget.in_use(), 0u);
}

TEST(ParseBudget, RefusesWhenFullAndAdmitsOnceFreed) {
  ParseBudget budget(small_options(milliseconds(0)));
  ParseBudget::Lease a = budget.acquire(600 * kKiB);
  ASSERT_TRUE(a.held());
  ParseBudget::Lease refused = budget.acquire(400 * kKiB);  // 1000 > 900 for large bodies
  EXPECT_FALSE(refused.held());
  EXPECT_EQ(refused.bytes(), 0u);
  EXPECT_EQ(budget.in_use(), 600 * kKiB);                // a refusal takes nothing
  ParseBudget::Lease fits = budget.acquire(300 * kKiB);  // exactly up to capacity - reserve
  EXPECT_TRUE(fits.held());
  a.release();
  EXPECT_TRUE(budget.acquire(400 * kKiB).held());
  EXPECT_EQ(budget.in_use(), 300 * kKiB);  // the temporary lease ended with its statement
}

TEST(ParseBudget, BodyAboveTheLargeLimitIsRefusedAtOnce) {
  ParseBudget budget(small_options(milliseconds(5000)));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(budget.acquire(900 * kKiB + 1).held());
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1000));  // did not wait out max_wait
  EXPECT_TRUE(budget.acquire(900 * kKiB).held());
}

TEST(ParseBudget, SmallBodiesUseTheReserveLargeOnesCannot) {
  ParseBudget budget(small_options(milliseconds(0)));
  ParseBudget::Lease large = budget.acquire(900 * kKiB);
  ASSERT_TRUE(large.held());
  EXPECT_FALSE(budget.acquire(10 * kKiB + 1).held());  // a large body may not take the reserve
  std::vector<ParseBudget::Lease> small;
  for (int i = 0; i < 10; ++i) {
    small.push_back(budget.acquire(10 * kKiB));
    EXPECT_TRUE(small.back().held()) << i;
  }
  EXPECT_EQ(budget.in_use(), 1000 * kKiB);
  EXPECT_FALSE(budget.acquire(1).held());  // now the reserve is full too
}

TEST(ParseBudget, WaiterIsAdmittedWhenRoomFrees) {
  ParseBudget budget(small_options(milliseconds(10000)));
  ParseBudget::Lease a = budget.acquire(800 * kKiB);
  ASSERT_TRUE(a.held());
  std::atomic<bool> admitted{false};
  std::thread waiter([&] {
    ParseBudget::Lease b = budget.acquire(800 * kKiB);
    admitted = b.held();
  });
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_FALSE(admitted.load());
  a.release();
  waiter.join();
  EXPECT_TRUE(admitted.load());
  EXPECT_EQ(budget.in_use(), 0u);
}

TEST(ParseBudget, WaiterGivesUpAfterMaxWait) {
  ParseBudget budget(small_options(milliseconds(50)));
  ParseBudget::Lease a = budget.acquire(800 * kKiB);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(budget.acquire(800 * kKiB).held());
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(50));
  EXPECT_EQ(budget.in_use(), 800 * kKiB);
}

TEST(ParseBudget, NoLeakOnExceptionOrEarlyReturn) {
  ParseBudget budget(small_options(milliseconds(0)));
  auto parse_that_throws = [&] {
    ParseBudget::Lease lease = budget.acquire(500 * kKiB);
    if (lease.held()) throw std::runtime_error("parse failed");
  };
  EXPECT_THROW(parse_that_throws(), std::runtime_error);
  EXPECT_EQ(budget.in_use(), 0u);
  auto parse_that_returns_early = [&](bool bail) -> int {
    ParseBudget::Lease lease = budget.acquire(500 * kKiB);
    if (bail) return 1;
    return 2;
  };
  EXPECT_EQ(parse_that_returns_early(true), 1);
  EXPECT_EQ(parse_that_returns_early(false), 2);
  EXPECT_EQ(budget.in_use(), 0u);
}

TEST(ParseBudget, MovedLeaseReleasesOnce) {
  ParseBudget budget(small_options(milliseconds(0)));
  ParseBudget::Lease a = budget.acquire(100 * kKiB);
  ParseBudget::Lease b = std::move(a);
  EXPECT_FALSE(a.held());  // NOLINT(bugprone-use-after-move): moved-from state is specified
  EXPECT_TRUE(b.held());
  ParseBudget::Lease c = budget.acquire(200 * kKiB);
  c = std::move(b);  // c's own 200 KiB go back, it now holds b's 100 KiB
  EXPECT_EQ(budget.in_use(), 100 * kKiB);
  c.release();
  EXPECT_EQ(budget.in_use(), 0u);
}

TEST(ParseBudget, ManyThreadsNeverExceedTheCapacity) {
  ParseBudget budget(small_options(milliseconds(2000)));
  std::atomic<size_t> peak{0};
  std::atomic<int> refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const size_t bytes = (i + t) % 3 == 0 ? 4 * kKiB : 300 * kKiB;
        ParseBudget::Lease lease = budget.acquire(bytes);
        if (!lease.held()) {
          ++refused;
          continue;
        }
        size_t now = budget.in_use();
        size_t seen = peak.load();
        while (now > seen && !peak.compare_exchange_weak(seen, now)) {
        }
        std::this_thread::yield();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LE(peak.load(), 1000 * kKiB);
  EXPECT_GT(peak.load(), 0u);
  EXPECT_EQ(budget.in_use(), 0u);
}

}  // namespace
}  // namespace nanoserve::server
