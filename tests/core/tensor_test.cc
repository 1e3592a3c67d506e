#include "core/tensor.h"

#include <gtest/gtest.h>

namespace nanoserve {
namespace {

TEST(Tensor, ShapeStridesAndBytes) {
  Tensor t = Tensor::zeros(DType::kF32, {3, 4});
  EXPECT_EQ(t.numel(), 12);
  EXPECT_EQ(t.nbytes(), 48);
  EXPECT_EQ(t.strides(), (std::vector<int64_t>{4, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.shape_string(), "[3, 4]");
}

TEST(Tensor, QuantizedRowBytes) {
  Tensor t = Tensor::empty(DType::kQ4_1, {2, 64});
  EXPECT_EQ(t.nbytes(), 2 * 2 * 20);
  Tensor row = t.slice_rows(1, 2);
  EXPECT_EQ(static_cast<char*>(row.data()) - static_cast<char*>(t.data()), 40);
}

TEST(Tensor, SliceAndReshapeShareStorage) {
  Tensor t = Tensor::zeros(DType::kF32, {4, 2});
  t.data_as<float>()[5] = 7.0f;
  Tensor s = t.slice_rows(2, 4);
  EXPECT_EQ(s.dim(0), 2);
  EXPECT_EQ(s.data_as<float>()[1], 7.0f);
  EXPECT_EQ(t.reshape({8}).data_as<float>()[5], 7.0f);
}

}  // namespace
}  // namespace nanoserve
