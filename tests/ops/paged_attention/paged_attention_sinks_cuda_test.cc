// Attention sinks (gpt-oss: one logit a query head joins its softmax's
// denominator, weighing no value) in the CUDA split kernel, against the
// frozen CPU reference with the same sinks (paged_attention_reference, the
// CPU paths' truth: paged_attention_sinks_test.cc): gpt-oss's shape (head_dim
// 64, 8 query heads a kv head) and the others, over decodes, uneven batches,
// extend chunks and contexts long enough to split (the sink enters in the
// split combine there, in the split kernel's epilogue below), with gpt-oss's
// alternating layers (a window of 128 and none) and small windows. Planted:
// the device without the sinks must land far outside the tolerance. Bitwise:
// rows sharing blocks equal rows alone, every launch option and reduction
// alike, a sequence alone equal to the same in a batch, and sinks of -inf
// equal to no sinks. The harness is paged_attention_cuda_harness.h. Without a
// CUDA device every test reports SKIPPED with the runtime's reason.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "ops/paged_attention/paged_attention_cuda_harness.h"

namespace nanoserve {
namespace {

using namespace paged_attention_test;

// Contexts of one split and of several (2048 and 4500 split at head_dim 64
// and 128), decodes, extends and a whole prompt.
const std::vector<std::pair<int, int>> kMixed{{1, 1},    {37, 37}, {120, 20}, {1000, 300},
                                              {2048, 1}, {5, 2},   {700, 1},  {4500, 1}};

// Worst relative row error of the device run of `device` against the reference of `truth`.
double worst_against(const Problem& truth, const Problem& device) {
  const std::vector<uint16_t> out = download16(run_on_device(device).out);
  std::vector<int> all;
  for (size_t b = 0; b < truth.batch.seq_ids.size(); ++b) all.push_back(static_cast<int>(b));
  double worst = 0.0;
  for (const auto& [t, rel] : reference_errors(truth, out, all, truth.shape.window))
    worst = std::max(worst, rel);
  return worst;
}

TEST(PagedAttentionCudaSinks, MatchReference) {
  NS_SKIP_WITHOUT_GPU();
  PagedAttentionTuning single;
  single.pair_rows = false;
  // gpt-oss-20b's heads (64 query heads of 64 over 8 kv heads: 8 a group),
  // then the other geometries and groups.
  for (Shape s : {Shape{DType::kBF16, 64, 16, 2, 8}, Shape{DType::kBF16, 64, 16, 3, 2},
                  Shape{DType::kF16, 128, 32, 2, 4}, Shape{DType::kBF16, 128, 16, 1, 3},
                  Shape{DType::kBF16, 256, 16, 2, 2}, Shape{DType::kBF16, 64, 8, 2, 1}}) {
    s.sinks = true;
    for (const int w : {0, 128, 5}) {
      s.window = w;
      const uint64_t seed = fresh_seed();
      const std::vector<uint16_t> paired = check_problem(s, kMixed, {}, {}, seed);
      const Problem p = make_problem(seed, s, kMixed);
      EXPECT_TRUE(download16(run_on_device(p, single).out) == paired)
          << describe(s) << ", seed " << seed << ": paired rows differ from single rows";
      // The planted error: the device ignoring the sinks.
      Problem ignored = p;
      ignored.sinks.clear();
      const double off = worst_against(p, ignored);
      std::printf("    %s, seed %llu: sinks ignored, worst relative error %.2e\n", describe(s).c_str(),
                  static_cast<unsigned long long>(seed), off);
      EXPECT_GT(off, 3 * tolerance(s.dtype)) << describe(s) << ": sinks ignored passed";
    }
  }
}

// Sinks of -inf weigh nothing: the bits of no sinks, in one split and in several.
TEST(PagedAttentionCudaSinks, MinusInfinityIsNoSinks) {
  NS_SKIP_WITHOUT_GPU();
  for (const int w : {0, 128}) {
    Shape s{DType::kBF16, 64, 16, 2, 8};
    s.window = w;
    const Problem plain = make_problem(fresh_seed(), s, kMixed);
    Problem none = plain;
    none.sinks.assign(static_cast<size_t>(plain.n_heads), -INFINITY);
    EXPECT_TRUE(download16(run_on_device(none).out) == download16(run_on_device(plain).out))
        << describe(s) << ": sinks of -inf differ from no sinks";
  }
}

// A sequence's rows bitwise the same alone and in a batch, whatever the
// launch options and the reduction (the split plan is the row's own).
TEST(PagedAttentionCudaSinks, OutputIndependentOfBatchAndReduction) {
  NS_SKIP_WITHOUT_GPU();
  const std::vector<std::pair<int, int>> seqs{{3000, 1}, {5, 1}, {9000, 1}, {300, 40}, {64, 1}};
  PagedAttentionTuning single, late_kv, unheld, deeper;
  single.pair_rows = false;
  late_kv.early_kv = false;
  unheld.hold_first_tile = false;
  deeper.stages = 4;
  deeper.dependent_launch = false;
  for (const int w : {0, 128}) {
    Shape s{DType::kBF16, 64, 16, 2, 8};
    s.sinks = true;
    s.window = w;
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(describe(s) + ", seed " + std::to_string(seed));
    const Problem p = make_problem(seed, s, seqs);
    const std::vector<uint16_t> base = download16(run_on_device(p).out);
    for (const PagedAttentionTuning& t : {single, late_kv, unheld, deeper}) {
      EXPECT_TRUE(download16(run_on_device(p, t).out) == base) << "a launch option changed the bits";
    }
    EXPECT_TRUE(download16(run_on_device(p, {}, 3).out) == base) << "workspace of 3 rows (several launches)";
    const int64_t row_elems = int64_t{s.n_kv} * s.n_rep * s.head_dim;
    for (size_t b = 0; b < seqs.size(); ++b) {
      const Problem alone = sequence_alone(p, b);
      const int t0 = p.batch.seq_starts[b];
      const std::vector<uint16_t> out = download16(run_on_device(alone).out);
      EXPECT_TRUE(std::equal(out.begin(), out.end(), base.begin() + t0 * row_elems))
          << "sequence " << b << " alone";
    }
  }
}

}  // namespace
}  // namespace nanoserve
