// Soft-capped attention scores (Gemma 2: cap * tanh(score / cap) before the
// softmax), with and without a sliding window: the fast CPU kernel against
// the frozen reference, and bitwise against attend_row over a contiguous
// copy (the gather path's arithmetic). A cap that is ignored misses the
// reference by far more than the tolerance.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "ops/attention/attend_row.h"
#include "ops/paged_attention/paged_attention.h"
#include "ops/paged_attention/paged_case.h"

namespace nanoserve {
namespace {

using Case = testing::PagedCase;

TEST(PagedAttention, SoftCapMatchesReferenceAndGatherBitwise) {
  const Case c({{1, 1}, {17, 1}, {97, 1}, {97, 17}, {40, 40}}, 7);
  ThreadPool pool(2);
  const int64_t stride = paged_attention_cpu_scores_stride(Case::kRep, 97);
  std::vector<float> scores(2 * stride);
  for (int32_t window : {0, 7}) {
    SCOPED_TRACE(::testing::Message() << "window " << window);
    std::vector<float> ref(c.q.size(), NAN), fast(c.q.size(), NAN), uncapped(c.q.size(), NAN);
    ASSERT_TRUE(validate_paged_attention_args(c.args(ref.data(), window, 2.0f)).ok());
    paged_attention_reference(c.args(ref.data(), window, 2.0f));
    paged_attention_reference(c.args(uncapped.data(), window, 0.0f));
    paged_attention_cpu(c.args(fast.data(), window, 2.0f), pool, scores.data(), stride);
    const std::vector<float> gather = c.gather(window, 2.0f);
    float worst = 0, planted = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      worst = std::max(worst, std::fabs(fast[i] - ref[i]));
      planted = std::max(planted, std::fabs(uncapped[i] - ref[i]));
      ASSERT_EQ(std::memcmp(&gather[i], &fast[i], sizeof(float)), 0) << "element " << i;
    }
    EXPECT_LE(worst, 1e-5f);
    EXPECT_GT(planted, 1e-2f) << "the cap does not bite";
  }
  std::vector<float> out(c.q.size());
  EXPECT_FALSE(validate_paged_attention_args(c.args(out.data(), 0, -1.0f)).ok());
}

}  // namespace
}  // namespace nanoserve
