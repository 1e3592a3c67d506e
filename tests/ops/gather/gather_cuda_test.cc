// gather_rows_cuda: a byte copy, so the output rows must equal the chosen
// input rows bitwise. bf16 and f32 rows of 576, 4096 (16-byte copies), 100
// and 7 elements (2-byte copies); 1, 3, 17, 97 and 300 rows out of 300, with
// repeats, the first and the last row; indices outside [0, T) give 0xFF rows
// (NaN); output rows past num_rows stay as they were (poisoned).

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/cuda_op_check.h"
#include "ops/gather/gather_cuda.cuh"

namespace nanoserve {
namespace {

using namespace nanoserve::testing;

template <typename T>
void check_gather(DType dt, int64_t T_rows, int64_t dim, int32_t R, bool bad_rows) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(std::string(dtype_name(dt)) + " T " + std::to_string(T_rows) + " dim " + std::to_string(dim) +
               " R " + std::to_string(R) + ", seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::vector<T> x(static_cast<size_t>(T_rows * dim));
  for (T& v : x) v = static_cast<T>(rng());  // any bits: it is a copy
  std::vector<int32_t> rows(static_cast<size_t>(R));
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(T_rows - 1));
  for (int32_t& r : rows) r = pick(rng);
  rows[0] = static_cast<int32_t>(T_rows - 1);
  if (R > 2) rows[1] = 0, rows[2] = 0;  // a repeat
  if (bad_rows && R > 4) rows[3] = -1, rows[4] = static_cast<int32_t>(T_rows);

  const Tensor xd = upload(x, dt, {T_rows, dim});
  const Tensor rd = upload(rows, DType::kI32, {R});
  const Tensor out = poisoned(dt, {R + 1, dim});
  gather_rows_cuda(xd, rd.data_as<const int32_t>(), R, out, nullptr);
  cuda::synchronize();
  const std::vector<T> got = download<T>(out);
  const T ones = static_cast<T>(~T{0});
  for (int32_t r = 0; r <= R; ++r) {
    const bool filled = r == R || rows[r] < 0 || rows[r] >= T_rows;  // poison, or the NaN row
    for (int64_t e = 0; e < dim; ++e) {
      const T want = filled ? ones : x[static_cast<size_t>(rows[r] * dim + e)];
      ASSERT_EQ(got[static_cast<size_t>(r * dim + e)], want) << "output row " << r << " element " << e;
    }
  }
}

TEST(GatherRowsCuda, CopiesTheChosenRows) {
  NS_SKIP_WITHOUT_GPU();
  for (int32_t R : {1, 3, 17, 97, 300}) {
    for (int64_t dim : {576, 4096, 100, 7}) {
      check_gather<uint16_t>(DType::kBF16, 300, dim, R, false);
      check_gather<uint32_t>(DType::kF32, 300, dim, R, false);
    }
  }
}

TEST(GatherRowsCuda, OutOfRangeRowsGiveNanRows) {
  NS_SKIP_WITHOUT_GPU();
  check_gather<uint16_t>(DType::kBF16, 40, 576, 17, true);
  check_gather<uint16_t>(DType::kBF16, 40, 7, 17, true);
  check_gather<uint32_t>(DType::kF32, 40, 100, 17, true);
}

}  // namespace
}  // namespace nanoserve
