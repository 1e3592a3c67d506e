// The tile arithmetic (PagedAttentionKernel::kTiles: the query-tiled kernel
// for the rows of sequences with several rows in a step, the decode kernel
// for single rows) against the frozen CPU reference, and bitwise against
// itself: every row the same whether a prefill, a chunk of any size or a
// decode step computed it, alone or in any batch, in one launch or several.
// The harness is paged_attention_cuda_harness.h. Without a CUDA device every
// test reports SKIPPED with the runtime's reason.

#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "ops/paged_attention/paged_attention_cuda_harness.h"

namespace nanoserve {
namespace {

using namespace paged_attention_test;

PagedAttentionTuning tiles() {
  PagedAttentionTuning t;
  t.tiles = true;
  return t;
}

// Against the reference, and every row bitwise the same as a decode row, in
// chunks of 5 and 64 rows; the decode rows also in launches of 3 rows, with
// their copies all after the dependency wait, and at 2 and 3 stages with 1, 2 and 4 splits a block.
void expect_tiles_consistent(const Shape& s, const std::vector<std::pair<int, int>>& seqs) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(describe(s) + ", seed " + std::to_string(seed));
  const std::vector<uint16_t> base = check_problem(s, seqs, {}, tiles(), seed);
  const Problem p = make_problem(seed, s, seqs);
  for (int chunk : {1, 5, 64}) {
    EXPECT_TRUE(download16(run_on_device(as_chunks(p, chunk), tiles()).out) == base)
        << "rows in chunks of " << chunk << " differ from the whole step's";
  }
  const Problem decodes = as_chunks(p, 1);
  EXPECT_TRUE(download16(run_on_device(decodes, tiles(), 3).out) == base) << "decode launches of 3 rows";
  PagedAttentionTuning late = tiles();
  late.early_kv = false;
  EXPECT_TRUE(download16(run_on_device(decodes, late).out) == base) << "decode copies after the wait";
  for (int stages : {2, 3}) {
    for (int group : {1, 2, 4}) {
      PagedAttentionTuning deeper = tiles();
      deeper.stages = stages;
      deeper.split_group = group;
      EXPECT_TRUE(download16(run_on_device(decodes, deeper).out) == base)
          << "decode, " << stages << " stages, " << group << " splits a block";
    }
  }
}

// Whole prompts, chunks over a history that start mid-tile, decodes in the
// same launch, tiles cut by a sequence's end, contexts of 1 to 9,000 (one to
// 32 splits, and past: 36 tiles a split), head groups of 1 to 16 and
// SmolLM2's 3 (query tiles of 64, 21 and 4 rows), both head dims, block sizes
// 8 to 64, bf16 and f16.
TEST(PagedAttentionTiles, MatchReferenceAndEqualAcrossChunksAndKernels) {
  NS_SKIP_WITHOUT_GPU();
  const std::vector<std::pair<int, int>> seqs{{1, 1},    {37, 37}, {120, 20}, {1000, 300},
                                              {2048, 1}, {5, 2},   {130, 65}, {700, 1}};
  expect_tiles_consistent({DType::kBF16, 128, 16, 2, 4}, seqs);
  expect_tiles_consistent({DType::kBF16, 128, 16, 8, 4}, {{1024, 1024}});
  expect_tiles_consistent({DType::kF16, 64, 32, 2, 8}, seqs);
  expect_tiles_consistent({DType::kBF16, 64, 8, 3, 3}, {{200, 200}, {31, 7}, {97, 1}});
  expect_tiles_consistent({DType::kBF16, 128, 64, 2, 1}, {{300, 150}, {64, 64}, {65, 1}});
  expect_tiles_consistent({DType::kBF16, 128, 32, 1, 16}, {{500, 499}, {17, 1}, {260, 3}});
  expect_tiles_consistent({DType::kBF16, 128, 16, 1, 4}, {{9000, 70}, {8193, 1}, {4096, 1}, {257, 2}});
}

// Small steps, for compute-sanitizer (scripts/gpu-check): both kernels, a
// row of several splits, rows cut by a tile's end, against the reference
// and each other.
TEST(PagedAttentionTiles, SmallStepsMatchReference) {
  NS_SKIP_WITHOUT_GPU();
  const Shape s{DType::kBF16, 64, 16, 1, 3};
  const std::vector<std::pair<int, int>> seqs{{1, 1}, {37, 37}, {120, 20}, {300, 1}, {5, 2}};
  const uint64_t seed = fresh_seed();
  const std::vector<uint16_t> base = check_problem(s, seqs, {}, tiles(), seed);
  EXPECT_TRUE(download16(run_on_device(as_chunks(make_problem(seed, s, seqs), 1), tiles()).out) == base)
      << "seed " << seed << ": decode rows differ";
}

// A sequence's rows bitwise the same alone as in a batch of others.
TEST(PagedAttentionTiles, OutputIndependentOfBatch) {
  NS_SKIP_WITHOUT_GPU();
  const Shape s{DType::kBF16, 128, 16, 2, 4};
  const std::vector<std::pair<int, int>> seqs{{3000, 1}, {5, 1}, {9000, 1}, {300, 40}, {64, 1}, {700, 700}};
  const Problem p = make_problem(fresh_seed(), s, seqs);
  const std::vector<uint16_t> base = download16(run_on_device(p, tiles()).out);
  const int64_t row_elems = int64_t{s.n_kv} * s.n_rep * s.head_dim;
  for (size_t b = 0; b < seqs.size(); ++b) {
    const Problem alone = sequence_alone(p, b);
    const int t0 = p.batch.seq_starts[b];
    const std::vector<uint16_t> out = download16(run_on_device(alone, tiles()).out);
    EXPECT_TRUE(std::equal(out.begin(), out.end(), base.begin() + t0 * row_elems))
        << "sequence " << b << " alone";
  }
}

// What the model refuses to route here, the entry point refuses too.
TEST(PagedAttentionTiles, SupportNamesItsLimits) {
  EXPECT_TRUE(paged_attention_tiles_support(128, 4, 0, 0.0f, false, DType::kBF16));
  EXPECT_TRUE(paged_attention_tiles_support(64, 16, 0, 0.0f, false, DType::kF16));
  EXPECT_FALSE(paged_attention_tiles_support(256, 2, 0, 0.0f, false, DType::kBF16));
  EXPECT_FALSE(paged_attention_tiles_support(128, 17, 0, 0.0f, false, DType::kBF16));
  EXPECT_FALSE(paged_attention_tiles_support(128, 4, 4096, 0.0f, false, DType::kBF16));
  EXPECT_FALSE(paged_attention_tiles_support(128, 4, 0, 50.0f, false, DType::kBF16));
  EXPECT_FALSE(paged_attention_tiles_support(128, 4, 0, 0.0f, true, DType::kBF16));
  EXPECT_TRUE(paged_attention_tiles_support(128, 4, 0, 0.0f, false, DType::kF8E4M3));
  EXPECT_FALSE(paged_attention_tiles_support(128, 4, 0, 0.0f, false, DType::kF32));
}

}  // namespace
}  // namespace nanoserve
