// The CUDA paged attention at Gemma's shapes against the frozen CPU reference
// (paged_attention_reference): head_dim 256 (gemma-2-2b's 8 heads on 4 kv
// heads, gemma-3-1b's 4 on 1, gemma-3-12b's 16 on 8) over decodes, uneven
// batches, extend chunks and both local windows (Gemma 3's 512 and 1024 and
// Gemma 2's 4096), and the soft-capping of the scaled scores (Gemma 2's
// 50, and a cap of 2 where it changes every row): each with a planted error
// that must land far outside the tolerance (the cap dropped; the window one
// wider). The harness is paged_attention_cuda_harness.h; the determinism of
// these shapes is in paged_attention_determinism_cuda_test.cc. Without a CUDA
// device every test reports SKIPPED with the runtime's reason.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "ops/paged_attention/paged_attention_cuda_harness.h"

namespace nanoserve {
namespace {

using namespace paged_attention_test;

// Worst relative row error of the device run of `device` (the problem with
// its shape changed: the planted error) against the reference of `truth`.
double worst_against(const Problem& truth, const Problem& device) {
  const std::vector<uint16_t> out = download16(run_on_device(device).out);
  std::vector<int> all;
  for (size_t b = 0; b < truth.batch.seq_ids.size(); ++b) all.push_back(static_cast<int>(b));
  double worst = 0.0;
  for (const auto& [t, rel] : reference_errors(truth, out, all, truth.shape.window))
    worst = std::max(worst, rel);
  return worst;
}

const std::vector<std::pair<int, int>> kMixed{{1, 1},    {37, 37}, {120, 20}, {1000, 300},
                                              {2048, 1}, {5, 2},   {700, 1},  {4500, 1}};

TEST(PagedAttentionCudaGemma, HeadDim256MatchesReference) {
  NS_SKIP_WITHOUT_GPU();
  for (const Shape& s : {Shape{DType::kBF16, 256, 16, 4, 2}, Shape{DType::kBF16, 256, 16, 1, 4},
                         Shape{DType::kBF16, 256, 16, 8, 2}, Shape{DType::kF16, 256, 32, 2, 8},
                         Shape{DType::kBF16, 256, 8, 3, 3}, Shape{DType::kBF16, 256, 64, 2, 1}}) {
    check_problem(s, kMixed);
  }
  // Extend chunks long enough to split, a batch of 64 uneven decodes.
  check_problem({DType::kBF16, 256, 16, 4, 2}, {{2000, 2000}, {3000, 64}, {97, 1}});
  std::vector<std::pair<int, int>> many;
  for (int i = 0; i < 64; ++i) many.emplace_back(1 + (i * 977) % 2000, 1);
  check_problem({DType::kBF16, 256, 16, 8, 2}, many, {0, 1, 17, 33, 63});
}

// Gemma's local layers: windows of 512, 1024 and 4096 at head_dim 256, rows
// sharing blocks equal to rows alone, and the window one wider (planted)
// outside the tolerance where one position weighs enough (a window of 3).
TEST(PagedAttentionCudaGemma, HeadDim256WindowsMatchReference) {
  NS_SKIP_WITHOUT_GPU();
  const std::vector<std::pair<int, int>> seqs{{1, 1},    {600, 600}, {1030, 20}, {3000, 300},
                                              {5000, 1}, {513, 2},   {1025, 1},  {4097, 1}};
  PagedAttentionTuning single;
  single.pair_rows = false;
  for (const int w : {512, 1024, 4096, 3}) {
    Shape s{DType::kBF16, 256, 16, 4, 2};
    s.window = w;
    const uint64_t seed = fresh_seed();
    const std::vector<uint16_t> paired = check_problem(s, seqs, {}, {}, seed);
    const Problem p = make_problem(seed, s, seqs);
    EXPECT_TRUE(download16(run_on_device(p, single).out) == paired)
        << describe(s) << ", seed " << seed << ": paired rows differ from single rows";
    if (w > 3) continue;
    Problem wider = p;
    wider.shape.window = w + 1;
    EXPECT_GT(worst_against(p, wider), 3 * tolerance(s.dtype))
        << describe(s) << ": a window one wider passed";
  }
}

// q times 8 (exact in bf16 and f16): scaled scores of standard deviation
// about 3 to 10, which a cap of 2 bends hard.
void amplify_q(Problem& p) {
  for (float& x : p.q) x *= 8.0f;
  for (size_t i = 0; i < p.q.size(); ++i) p.q16[i] = to_half_bits(p.shape.dtype, p.q[i]);
}

// Soft-capping: the reference's cap * tanh(s / cap) of each scaled score.
// Gemma 2's cap of 50 barely bends random scores; so a cap of 2 over scores
// grown 8-fold checks the arithmetic where it matters (every row), and
// dropping it there (planted) must fail. At head_dim 128 and 64 too (the
// kernel's other geometries), with a window.
TEST(PagedAttentionCudaGemma, SoftcapMatchesReference) {
  NS_SKIP_WITHOUT_GPU();
  for (Shape s : {Shape{DType::kBF16, 256, 16, 4, 2}, Shape{DType::kF16, 256, 16, 2, 4},
                  Shape{DType::kBF16, 128, 16, 2, 4}, Shape{DType::kBF16, 64, 8, 3, 3}}) {
    s.softcap = 50.0f;
    check_problem(s, kMixed);
    s.window = 100;
    check_problem(s, kMixed);
    for (const int w : {0, 100}) {
      s.softcap = 2.0f;
      s.window = w;
      const uint64_t seed = fresh_seed();
      SCOPED_TRACE(describe(s) + ", q x 8, seed " + std::to_string(seed));
      Problem p = make_problem(seed, s, kMixed);
      amplify_q(p);
      const DeviceRun r = run_on_device(p);
      expect_matches_reference(p, download16(r.out), {0, 1, 2, 3, 4, 5, 6, 7});
      Problem uncapped = p;
      uncapped.shape.softcap = 0.0f;
      EXPECT_GT(worst_against(p, uncapped), 3 * tolerance(s.dtype)) << "no soft-cap passed";
    }
  }
}

}  // namespace
}  // namespace nanoserve
