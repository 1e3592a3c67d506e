#include "server/auth.h"

#include <gtest/gtest.h>

namespace nanoserve::server {
namespace {

TEST(Auth, ConstantTimeEqual) {
  EXPECT_TRUE(constant_time_equal("secret", "secret"));
  EXPECT_FALSE(constant_time_equal("secreT", "secret"));
  EXPECT_FALSE(constant_time_equal("secret!", "secret"));
  EXPECT_FALSE(constant_time_equal("secre", "secret"));
  EXPECT_FALSE(constant_time_equal("", "secret"));
  EXPECT_FALSE(constant_time_equal("secretsecret", "secret"));  // a repeat of the key is not the key
  EXPECT_TRUE(constant_time_equal("", ""));
}

TEST(Auth, Bearer) {
  EXPECT_TRUE(bearer_authorized("Bearer k1", "k1"));
  EXPECT_TRUE(bearer_authorized("bearer k1", "k1"));
  EXPECT_FALSE(bearer_authorized("Bearer k2", "k1"));
  EXPECT_FALSE(bearer_authorized("k1", "k1"));
  EXPECT_FALSE(bearer_authorized("", "k1"));
  EXPECT_FALSE(bearer_authorized("Basic k1", "k1"));
  EXPECT_TRUE(bearer_authorized("", ""));  // no key configured
}

}  // namespace
}  // namespace nanoserve::server
