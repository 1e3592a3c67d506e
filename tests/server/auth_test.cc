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

TEST(Auth, BearerKeyIsExactBytes) {
  using namespace std::string_view_literals;
  EXPECT_FALSE(bearer_authorized("Bearer k1%00", "k1"));  // no percent-decoding, nothing appended
  EXPECT_FALSE(bearer_authorized("Bearer k1%00;anything", "k1"));
  EXPECT_FALSE(bearer_authorized("Bearer %6B%31", "k1"));  // the key percent-encoded
  EXPECT_FALSE(bearer_authorized("Bearer k1\0"sv, "k1"));  // no cut at NUL
  EXPECT_FALSE(bearer_authorized("Bearer k1 ", "k1"));
  EXPECT_FALSE(bearer_authorized("Bearer  k1", "k1"));
  EXPECT_FALSE(bearer_authorized("Bearer K1", "k1"));  // the key is case-sensitive
  EXPECT_TRUE(bearer_authorized("Bearer k\0x"sv, "k\0x"sv));  // every byte of the key counts
}

}  // namespace
}  // namespace nanoserve::server
