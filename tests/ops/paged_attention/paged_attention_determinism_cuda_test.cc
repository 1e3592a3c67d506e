// The CUDA paged attention kernels' determinism: a sequence's output is
// bitwise the same alone or in any batch, over several launches, with either
// reduction and every launch option, and the split plan depends on a row's
// own context only. The harness is
// paged_attention_cuda_harness.h. Without a CUDA device every test reports
// SKIPPED with the runtime's reason.

#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "ops/paged_attention/paged_attention_cuda_harness.h"

namespace nanoserve {
namespace {

using namespace paged_attention_test;

// ---- determinism ---------------------------------------------------------------

// The split plan depends on a row's own context only, and both reductions sum
// the splits in split order with the same arithmetic: a sequence's output is
// bitwise the same alone, in a batch, over several launches (small workspace),
// any pipeline depth, the first K/V copies before or
// after the dependency wait, and with or without the first tile held in
// registers (before or after the wait).
// Two batches: splits up to 12 and up to 29 a row.
void expect_output_independent_of_batch_and_reduction(const std::vector<std::pair<int, int>>& seqs,
                                                      const Shape& s = {DType::kBF16, 128, 16, 2, 4}) {
  SCOPED_TRACE(describe(s));
  const Problem p = make_problem(fresh_seed(), s, seqs);
  const std::vector<uint16_t> base = download16(run_on_device(p).out);
  PagedAttentionTuning late_kv;
  late_kv.early_kv = false;
  EXPECT_TRUE(download16(run_on_device(p, late_kv).out) == base)
      << "K/V copies all after the dependency wait";
  PagedAttentionTuning unheld;
  unheld.hold_first_tile = false;
  EXPECT_TRUE(download16(run_on_device(p, unheld).out) == base) << "first tile not held in registers";
  PagedAttentionTuning single;
  single.pair_rows = false;
  EXPECT_TRUE(download16(run_on_device(p, single).out) == base) << "extend rows one a block";
  PagedAttentionTuning held_late;
  held_late.hold_before_wait = false;
  EXPECT_TRUE(download16(run_on_device(p, held_late).out) == base) << "first tile held after the wait";
  for (int stages : {2, 3, 4}) {
    if (s.head_dim == 256 && stages > 3) continue;  // 3 at most there (shared memory)
    PagedAttentionTuning deeper;
    deeper.stages = stages;
    deeper.dependent_launch = false;
    EXPECT_TRUE(download16(run_on_device(p, deeper).out) == base) << stages << " pipeline stages";
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

TEST(PagedAttentionCuda, OutputIndependentOfBatchAndReduction) {
  NS_SKIP_WITHOUT_GPU();
  expect_output_independent_of_batch_and_reduction({{3000, 1}, {5, 1}, {300, 40}, {64, 1}});
  expect_output_independent_of_batch_and_reduction({{3000, 1}, {5, 1}, {9000, 1}, {300, 40}, {64, 1}});
}

// The same at Gemma's shapes: head_dim 256 (the plain split kernel, whatever
// the options ask), soft-capped scores, a local layer's window and a global one.
TEST(PagedAttentionCuda, Gemma256OutputIndependentOfBatchAndReduction) {
  NS_SKIP_WITHOUT_GPU();
  Shape s{DType::kBF16, 256, 16, 4, 2};
  s.softcap = 50.0f;
  expect_output_independent_of_batch_and_reduction({{3000, 1}, {5, 1}, {9000, 1}, {300, 40}, {64, 1}}, s);
  s.window = 1024;
  expect_output_independent_of_batch_and_reduction({{3000, 1}, {5, 1}, {9000, 1}, {300, 40}, {64, 1}}, s);
}

TEST(PagedAttentionCuda, SplitPlanDependsOnContextOnly) {
  // Host-side: no device needed.
  EXPECT_EQ(paged_attention_cuda_num_splits(1, 128), 1);
  EXPECT_EQ(paged_attention_cuda_num_splits(128, 128), 1);
  EXPECT_GT(paged_attention_cuda_num_splits(4096, 128), 1);
  EXPECT_LE(paged_attention_cuda_num_splits(1 << 20, 128), PagedAttentionWorkspaceCuda::kMaxSplits);
  for (int ctx : {1, 17, 97, 2048, 16384, 100000}) {
    PagedAttentionTuning four;
    four.max_splits = 4;
    EXPECT_LE(paged_attention_cuda_num_splits(ctx, 64, four), 4);
  }
}

}  // namespace
}  // namespace nanoserve
