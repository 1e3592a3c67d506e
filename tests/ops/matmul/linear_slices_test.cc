// The FP8 linear kernel's walk over K (ops/matmul/linear_slices.h): a run of
// slices in units of one or two chunks, every chunk of the run once, in
// order, no unit across a slice's end.

#include "ops/matmul/linear_slices.h"

#include <gtest/gtest.h>

namespace nanoserve::linear_detail {
namespace {

TEST(LinearSlices, SlicesCoverTheChunksInOrder) {
  for (int chunks = 1; chunks <= 300; ++chunks) {
    EXPECT_EQ(slice_begin(0, chunks), 0);
    EXPECT_EQ(slice_begin(kSlices, chunks), chunks);
    for (int w = 0; w < kSlices; ++w) EXPECT_LE(slice_begin(w, chunks), slice_begin(w + 1, chunks));
  }
}

// Walks the units as the kernel does (per slice: its pairs, then an odd
// slice's single chunk), and checks unit_chunk and run_units against it.
void check_run(int w0, int n, int chunks) {
  SCOPED_TRACE(testing::Message() << "slices " << w0 << " .. " << w0 + n - 1 << " of " << chunks << " chunks");
  int u = 0, next_chunk = slice_begin(w0, chunks);
  for (int w = w0; w < w0 + n; ++w) {
    const int first = u, last = u + slice_units(w, chunks), pairs_end = u + slice_pairs(w, chunks);
    for (; u < last; ++u) {
      const int width = u < pairs_end ? 2 : 1;
      ASSERT_EQ(unit_chunk(w0, n, u, chunks), next_chunk) << "unit " << u;
      next_chunk += width;
      ASSERT_LE(next_chunk, slice_begin(w + 1, chunks)) << "unit " << u << " runs past slice " << w;
    }
    EXPECT_EQ(next_chunk, slice_begin(w + 1, chunks)) << "slice " << w << " not covered";
    EXPECT_LE(last - first, 1 + (slice_begin(w + 1, chunks) - slice_begin(w, chunks)) / 2);
  }
  EXPECT_EQ(run_units(w0, n, chunks), u);
}

TEST(LinearSlices, UnitsCoverEachChunkOnceInOrder) {
  for (int chunks = 1; chunks <= 300; ++chunks) {
    check_run(0, kSlices, chunks);  // whole K
    for (int w = 0; w < kSlices; ++w) check_run(w, 1, chunks);  // one slice a block
  }
}

TEST(LinearSlices, OddSlicesEndInASingleChunk) {
  // K = 576: nine chunks, slices of 2, 2, 2 and 3; the last slice is a pair
  // and a single chunk, and the run has 1 + 1 + 1 + 2 units.
  EXPECT_EQ(slice_pairs(3, 9), 1);
  EXPECT_EQ(slice_units(3, 9), 2);
  EXPECT_EQ(run_units(0, kSlices, 9), 5);
  EXPECT_EQ(unit_chunk(0, kSlices, 4, 9), 8);
  // Fewer chunks than slices: the empty slices have no units.
  EXPECT_EQ(run_units(0, kSlices, 3), 3);
  EXPECT_EQ(slice_units(0, 3), 0);
}

}  // namespace
}  // namespace nanoserve::linear_detail
