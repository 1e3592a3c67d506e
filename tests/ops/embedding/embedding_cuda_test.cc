// embedding_cuda against embedding_ref over the same bf16 table: bf16 -> f32 is
// exact, so the rows must be bitwise equal. Token counts 1, 3, 17, 97 and 300;
// dims 576 and 4096 (16-byte path), 100 and 7 (not multiples of 8: one element
// a thread), and 576 through an x that is not 16-byte aligned (the scalar path
// on a vector-friendly dim). x is NaN-filled first and has two rows more than
// the tokens, which must stay NaN; ids outside the vocab give NaN rows. Scaled
// (Gemma), each row is the CPU's f32 product, bitwise.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ops/cuda_op_check.h"
#include "ops/embedding/embedding.h"
#include "ops/embedding/embedding_cuda.cuh"

namespace nanoserve {
namespace {

using namespace nanoserve::testing;

void check_embedding(int64_t vocab, int64_t dim, int32_t T, bool misaligned_x, bool bad_ids,
                     float scale = 1.0f) {
  const uint64_t seed = fresh_seed();
  const std::string what = "vocab " + std::to_string(vocab) + " dim " + std::to_string(dim) + " T " +
                           std::to_string(T) + (misaligned_x ? " (x misaligned)" : "") + ", seed " +
                           std::to_string(seed) + (scale != 1.0f ? ", scale " + std::to_string(scale) : "");
  SCOPED_TRACE(what);
  std::mt19937_64 rng(seed);
  const std::vector<uint16_t> table16 = to_bf16(uniform_floats(vocab * dim, seed, 2.0f));
  std::vector<int32_t> tokens(static_cast<size_t>(T));
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab - 1));
  for (int32_t& t : tokens) t = pick(rng);
  tokens[0] = static_cast<int32_t>(vocab - 1);  // the last row of the table
  if (T > 1) tokens[1] = 0;
  std::vector<bool> invalid(static_cast<size_t>(T), false);
  if (bad_ids) {
    const int32_t bad[] = {-1, static_cast<int32_t>(vocab), std::numeric_limits<int32_t>::max(),
                           std::numeric_limits<int32_t>::min()};
    for (int i = 0; i < 4 && 2 + 3 * i < T; ++i) {
      tokens[2 + 3 * i] = bad[i];
      invalid[2 + 3 * i] = true;
    }
  }

  // Reference over the valid ids (embedding_ref checks its ids), NaN rows for the rest.
  const Tensor table_host =
      Tensor::view(const_cast<uint16_t*>(table16.data()), DType::kBF16, {vocab, dim}, nullptr);
  std::vector<int32_t> valid_ids;
  for (int32_t t = 0; t < T; ++t) valid_ids.push_back(invalid[t] ? 0 : tokens[t]);
  Tensor ref = Tensor::empty(DType::kF32, {T, dim});
  embedding_ref(table_host, valid_ids, ref);
  std::vector<float> expect(ref.data_as<float>(), ref.data_as<float>() + T * dim);
  for (float& e : expect) e *= scale;  // the CPU forward's product (scale_into), one f32 rounding
  for (int32_t t = 0; t < T; ++t) {
    if (invalid[t]) std::fill(expect.begin() + t * dim, expect.begin() + (t + 1) * dim, quiet_nan());
  }

  const Tensor table = upload(table16, DType::kBF16, {vocab, dim});
  const Tensor tok = upload(tokens, DType::kI32, {T});
  // x: T + 2 rows; misaligned: a view 4 bytes into a larger buffer.
  const Tensor buf = poisoned(DType::kF32, {(T + 2) * dim + 1});
  float* x_ptr = buf.data_as<float>() + (misaligned_x ? 1 : 0);
  const Tensor x = Tensor::view(x_ptr, DType::kF32, {T + 2, dim}, buf.owner(), Device::kCUDA);
  embedding_cuda(table, tok.data_as<const int32_t>(), T, x, nullptr, scale);
  cuda::synchronize();
  const std::vector<float> got = download<float>(x);

  for (int64_t i = 0; i < T * dim; ++i) {
    const float e = expect[static_cast<size_t>(i)], g = got[static_cast<size_t>(i)];
    if (std::isnan(e)) {
      ASSERT_TRUE(std::isnan(g)) << "token " << i / dim << " (id " << tokens[i / dim] << ") element "
                                 << i % dim << " should be NaN, is " << g;
    } else {
      ASSERT_EQ(std::memcmp(&e, &g, 4), 0) << "token " << i / dim << " (id " << tokens[i / dim]
                                           << ") element " << i % dim << ": " << g << " vs " << e;
    }
  }
  for (int64_t i = T * dim; i < (T + 2) * dim; ++i) {
    ASSERT_TRUE(std::isnan(got[static_cast<size_t>(i)]))
        << "row " << i / dim << " past the tokens was written";
  }
}

TEST(EmbeddingCuda, MatchesReferenceBitwise) {
  NS_SKIP_WITHOUT_GPU();
  for (int32_t T : {1, 3, 17, 97, 300}) {
    for (int64_t dim : {576, 4096, 100, 7}) check_embedding(1000, dim, T, false, false);
    check_embedding(1000, 576, T, true, false);
  }
}

// Gemma's embeddings times sqrt(dim): 62 (gemma-3-12b's sqrt(3840) in bf16),
// 48 (gemma-2-2b's sqrt(2304)) and sqrt(32) in f32 (inexact), bitwise the
// CPU's product (a kernel that dropped the scale fails the bitwise check).
TEST(EmbeddingCuda, ScaledRowsEqualTheCpuProduct) {
  NS_SKIP_WITHOUT_GPU();
  for (const float scale : {62.0f, 48.0f, std::sqrt(32.0f)}) {
    for (int64_t dim : {576, 100}) check_embedding(1000, dim, 17, false, false, scale);
    check_embedding(1000, 576, 17, true, true, scale);
  }
}

TEST(EmbeddingCuda, OutOfRangeIdsGiveNanRows) {
  NS_SKIP_WITHOUT_GPU();
  for (int64_t dim : {576, 100}) {
    check_embedding(1000, dim, 17, false, true);
    check_embedding(1000, dim, 300, true, true);
  }
}

TEST(EmbeddingCuda, ZeroTokensWritesNothing) {
  NS_SKIP_WITHOUT_GPU();
  const Tensor table = upload(to_bf16(uniform_floats(10 * 8, 1)), DType::kBF16, {10, 8});
  const Tensor x = poisoned(DType::kF32, {2, 8});
  embedding_cuda(table, nullptr, 0, x, nullptr);
  cuda::synchronize();
  for (float v : download<float>(x)) EXPECT_TRUE(std::isnan(v));
}

}  // namespace
}  // namespace nanoserve
