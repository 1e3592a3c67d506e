#include <gtest/gtest.h>

#include "server/api.h"

namespace nanoserve::server {
namespace {

TEST(ApiRoutes, ModelPathsAndVersion) {
  ASSERT_NE(find_route("/version"), nullptr);
  EXPECT_EQ(find_route("/version")->route, Route::kVersion);
  EXPECT_EQ(find_route("/v1/models")->route, Route::kModels);
  EXPECT_EQ(find_route("/v1/models/a")->route, Route::kModel);
  EXPECT_EQ(find_route("/v1/models/org/name")->route, Route::kModel);
  EXPECT_EQ(find_route("/v1/models/"), nullptr);  // no id
  EXPECT_EQ(find_route("/v1/modelsx"), nullptr);
}

TEST(ApiRoutes, ModelIdIsPercentDecoded) {
  EXPECT_EQ(model_id_of_path("/v1/models/org/name"), "org/name");
  EXPECT_EQ(model_id_of_path("/v1/models/org%2Fname"), "org/name");
  EXPECT_EQ(model_id_of_path("/v1/models/a%20b%2a"), "a b*");
  EXPECT_EQ(model_id_of_path("/v1/models/%zz"), std::nullopt);
  EXPECT_EQ(model_id_of_path("/v1/models/a%2"), std::nullopt);
  EXPECT_EQ(model_id_of_path("/v1/models/a%"), std::nullopt);
  EXPECT_EQ(model_id_of_path("/health"), std::nullopt);
}

}  // namespace
}  // namespace nanoserve::server
