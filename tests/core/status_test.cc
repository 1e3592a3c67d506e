#include "core/status.h"

#include <gtest/gtest.h>

namespace nanoserve {
namespace {

StatusOr<int> parse_positive(int x) {
  if (x <= 0) return invalid_argument("x must be positive, got " + std::to_string(x));
  return x;
}

Status doubled(int x, int* out) {
  NS_ASSIGN_OR_RETURN(int v, parse_positive(x));
  *out = 2 * v;
  return Status();
}

TEST(Status, OkAndError) {
  EXPECT_TRUE(Status().ok());
  Status s = data_loss("bad magic at offset 0");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.to_string(), "DATA_LOSS: bad magic at offset 0");
}

TEST(Status, AssignOrReturnPropagates) {
  int out = 0;
  EXPECT_TRUE(doubled(21, &out).ok());
  EXPECT_EQ(out, 42);
  Status s = doubled(-1, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("-1"), std::string::npos);
}

}  // namespace
}  // namespace nanoserve
