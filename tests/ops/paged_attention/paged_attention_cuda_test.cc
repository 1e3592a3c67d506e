// The CUDA paged attention kernels against the frozen CPU reference
// (paged_attention_reference, f64 accumulation over f32 inputs), on fresh
// random inputs: contexts 1, 17, 97, 2048 and 16384; batches of 1, 3, 64 and
// 256 uneven sequences; n_rep 1, 3, 4, 8 and 12; head_dim 64, 128 and 256
// (decode here; the rest of 256 and soft-capping in
// paged_attention_gemma_cuda_test.cc); block
// sizes 8, 16, 32 and 64; bf16 and f16; decode and causal extend chunks;
// slot-major and head-major pools (bitwise the same output). The
// step's K/V go into the pools through paged_kv_write_cuda, the output is
// NaN-filled before every call, and unused pool slots hold NaN so that a read
// outside a context shows. Big batches check a sample of sequences against the
// reference (every output row is still checked for NaN).
// Without a CUDA device every test reports SKIPPED with the runtime's reason.

#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "ops/paged_attention/paged_attention_cuda_harness.h"

namespace nanoserve {
namespace {

using namespace paged_attention_test;

// ---- decode: one query token a sequence ---------------------------------------

struct DecodeParam {
  DType dtype;
  int head_dim, block_size, n_rep;
};

class PagedAttentionCudaDecode : public ::testing::TestWithParam<DecodeParam> {};

TEST_P(PagedAttentionCudaDecode, AwkwardContextsMatchReference) {
  NS_SKIP_WITHOUT_GPU();
  const DecodeParam& d = GetParam();
  const Shape s{d.dtype, d.head_dim, d.block_size, 2, d.n_rep};
  check_problem(s, {{1, 1}, {17, 1}, {97, 1}, {2048, 1}, {16384, 1}});
}

std::vector<DecodeParam> decode_params() {
  std::vector<DecodeParam> v;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (int hd : {64, 128, 256}) {
      for (int bs : {16, 32}) {
        for (int n_rep : {1, 4, 8}) v.push_back({dt, hd, bs, n_rep});
      }
    }
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, PagedAttentionCudaDecode, ::testing::ValuesIn(decode_params()),
                         [](const ::testing::TestParamInfo<DecodeParam>& info) {
                           const DecodeParam& d = info.param;
                           return std::string(d.dtype == DType::kBF16 ? "bf16" : "f16") + "_hd" +
                                  std::to_string(d.head_dim) + "_bs" + std::to_string(d.block_size) + "_rep" +
                                  std::to_string(d.n_rep);
                         });

// Batches of uneven decode sequences; the reference checks a sample (the
// shortest, the longest and random others).
void check_uneven_batch(int batch, int max_ctx, const Shape& s) {
  std::mt19937 rng(static_cast<uint32_t>(fresh_seed()));
  std::uniform_int_distribution<int> len(1, max_ctx);
  std::vector<std::pair<int, int>> seqs;
  for (int b = 0; b < batch; ++b) seqs.push_back({len(rng), 1});
  std::vector<int> check;
  if (batch <= 8) {
    for (int b = 0; b < batch; ++b) check.push_back(b);
  } else {
    const auto [lo, hi] = std::minmax_element(seqs.begin(), seqs.end());
    check = {static_cast<int>(lo - seqs.begin()), static_cast<int>(hi - seqs.begin())};
    std::uniform_int_distribution<int> pick(0, batch - 1);
    while (check.size() < 8) check.push_back(pick(rng));
    std::sort(check.begin(), check.end());
    check.erase(std::unique(check.begin(), check.end()), check.end());
  }
  check_problem(s, seqs, check);
}

TEST(PagedAttentionCuda, UnevenBatchesMatchReference) {
  NS_SKIP_WITHOUT_GPU();
  check_uneven_batch(1, 4096, {DType::kBF16, 128, 16, 8, 4});
  check_uneven_batch(3, 3000, {DType::kBF16, 128, 16, 8, 4});
  check_uneven_batch(64, 2500, {DType::kBF16, 128, 32, 4, 8});
  check_uneven_batch(256, 1200, {DType::kBF16, 128, 16, 2, 4});
  check_uneven_batch(256, 700, {DType::kF16, 64, 32, 2, 1});
}

// Other block sizes (any power of two >= 8) and GQA groups that are not a power
// of two (SmolLM2's 3) or more than one head group (12).
TEST(PagedAttentionCuda, OtherBlockSizesAndGroupsMatchReference) {
  NS_SKIP_WITHOUT_GPU();
  check_problem({DType::kBF16, 64, 8, 3, 3}, {{1, 1}, {97, 1}, {2049, 1}});
  check_problem({DType::kBF16, 128, 64, 1, 12}, {{17, 1}, {700, 1}, {5000, 1}});
  check_problem({DType::kF16, 128, 128, 2, 2}, {{255, 1}, {256, 1}, {257, 1}});
  // A shorter context can have more splits than the longest one in the batch.
  check_problem({DType::kBF16, 128, 16, 8, 4}, {{2100, 1}, {2048, 1}, {1000, 1}});
}

// ---- extend: several query tokens a sequence, causal within the chunk ----------

TEST(PagedAttentionCuda, ExtendChunksMatchReference) {
  NS_SKIP_WITHOUT_GPU();
  // (context after the step, tokens this step): a fresh prompt, chunks over a
  // history, a chunk that crosses split boundaries, and decodes in the same batch.
  const std::vector<std::pair<int, int>> seqs{{1, 1}, {37, 37}, {120, 20}, {1000, 300}, {2048, 1}, {5, 2}};
  check_problem({DType::kBF16, 128, 16, 2, 4}, seqs);
  check_problem({DType::kF16, 64, 32, 2, 8}, seqs);
  check_problem({DType::kBF16, 64, 8, 3, 3}, {{200, 200}, {31, 7}});
}

// Extend rows sharing a block (pair_rows, the default: the rows of an aligned
// window of positions, two column tiles of the mma) against every row in a
// block of its own, bitwise: whole prefills, chunks starting at odd and even
// positions (mid-window), decodes beside them, several launches (a 3-row
// workspace cuts windows at launch boundaries), head groups of G = 1, 2, 4 and
// 8 (windows of 16, 8, 4 and 2 rows; n_rep = 3 leaves a head of G = 4 empty). Also
// against the CPU reference, so a window that is equal but wrong fails too.
TEST(PagedAttentionCuda, PairedExtendRowsEqualSingleRows) {
  NS_SKIP_WITHOUT_GPU();
  const std::vector<std::pair<int, int>> seqs{{1024, 1024}, {778, 301}, {5, 1}, {300, 40}, {2, 2}, {9, 3}};
  PagedAttentionTuning single;
  single.pair_rows = false;
  for (const Shape& s : {Shape{DType::kBF16, 128, 16, 2, 4}, Shape{DType::kBF16, 64, 16, 2, 2},
                         Shape{DType::kF16, 128, 32, 1, 3}, Shape{DType::kBF16, 64, 8, 2, 1},
                         Shape{DType::kBF16, 128, 16, 1, 8}}) {
    const uint64_t seed = fresh_seed();
    const std::vector<uint16_t> paired = check_problem(s, seqs, {}, {}, seed);
    const Problem p = make_problem(seed, s, seqs);
    EXPECT_TRUE(download16(run_on_device(p, single).out) == paired)
        << describe(s) << ", seed " << seed << ": paired rows differ from single rows";
    EXPECT_TRUE(download16(run_on_device(p, {}, 3).out) == paired)
        << describe(s) << ", seed " << seed << ": paired rows differ over launches of 3 rows";
  }
}

// A sliding window (Mistral 7B v0.1's, gpt-oss's, Gemma's local layers):
// windows of 1 to 300 over decodes, whole prompts and chunks that cross them,
// contexts past several splits, both head dims; rows sharing blocks bitwise
// equal to rows alone; and, at the small windows where one position is a
// large share of the weights, a window one longer than the reference's lands
// far outside the tolerance, so an off-by-one cannot pass.
TEST(PagedAttentionCuda, SlidingWindowMatchesReference) {
  NS_SKIP_WITHOUT_GPU();
  const std::vector<std::pair<int, int>> seqs{{1, 1},    {37, 37}, {120, 20}, {1000, 300},
                                              {2048, 1}, {5, 2},   {700, 1},  {4500, 1}};
  PagedAttentionTuning single;
  single.pair_rows = false;
  for (const int w : {1, 5, 64, 100, 300}) {
    for (Shape s : {Shape{DType::kBF16, 128, 16, 2, 4}, Shape{DType::kBF16, 64, 16, 2, 2},
                    Shape{DType::kF16, 128, 32, 1, 3}}) {
      s.window = w;
      const uint64_t seed = fresh_seed();
      const std::vector<uint16_t> paired = check_problem(s, seqs, {}, {}, seed);
      const Problem p = make_problem(seed, s, seqs);
      EXPECT_TRUE(download16(run_on_device(p, single).out) == paired)
          << describe(s) << ", seed " << seed << ": paired rows differ from single rows";
      if (w > 5) continue;
      // The planted error: the device one position wider than the reference.
      Problem wider = p;
      wider.shape.window = w + 1;
      const std::vector<uint16_t> off = download16(run_on_device(wider).out);
      double worst = 0.0;
      std::vector<int> all;
      for (size_t b = 0; b < seqs.size(); ++b) all.push_back(static_cast<int>(b));
      for (const auto& [t, rel] : reference_errors(p, off, all, w)) worst = std::max(worst, rel);
      EXPECT_GT(worst, 3 * tolerance(s.dtype)) << describe(s) << ": a window one wider passed";
    }
  }
}

// ---- write kernel --------------------------------------------------------------

TEST(PagedAttentionCuda, KvWriteSkipsNegativeSlots) {
  NS_SKIP_WITHOUT_GPU();
  const Shape s{DType::kBF16, 64, 16, 2, 1};
  Problem p = make_problem(fresh_seed(), s, {{20, 3}});
  const int32_t skipped = p.batch.slot_mapping[1];
  p.batch.slot_mapping[1] = -1;  // a padding token: its slot must stay as it was (NaN)
  const int64_t row = int64_t{s.n_kv} * s.head_dim;
  std::vector<uint16_t> expect_k = p.k_pool16_full;
  for (int64_t e = 0; e < row; ++e) expect_k[skipped * row + e] = p.k_pool16[skipped * row + e];
  const DeviceRun r = run_on_device(p);
  EXPECT_TRUE(download16(r.k_pool) == expect_k);
}

}  // namespace
}  // namespace nanoserve
