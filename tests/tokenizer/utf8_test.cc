#include "tokenizer/utf8.h"

#include <gtest/gtest.h>

namespace nanoserve {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8, ValidSequences) {
  EXPECT_TRUE(utf8::is_valid(""));
  EXPECT_TRUE(utf8::is_valid("ascii"));
  EXPECT_TRUE(utf8::is_valid("\xC3\xA9\xE4\xBD\xA0\xF0\x9F\x98\x80"));
  EXPECT_TRUE(utf8::is_valid("\xF4\x8F\xBF\xBF"));  // U+10FFFF
  EXPECT_TRUE(utf8::is_valid(std::string("a\0b", 3)));
}

TEST(Utf8, IllFormedSequences) {
  EXPECT_FALSE(utf8::is_valid("\x80"));
  EXPECT_FALSE(utf8::is_valid("\xC0\xAF"));          // overlong
  EXPECT_FALSE(utf8::is_valid("\xE0\x80\xAF"));      // overlong
  EXPECT_FALSE(utf8::is_valid("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(utf8::is_valid("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(utf8::is_valid("\xE2\x82"));          // truncated
}

// Expected values are Python's bytes.decode("utf-8", "replace").
TEST(Utf8, SanitizeReplacesMaximalSubparts) {
  EXPECT_EQ(utf8::sanitize("abc"), "abc");
  EXPECT_EQ(utf8::sanitize("\xE2\x82"
                           "x"),
            kFffd + "x");                                            // one subpart
  EXPECT_EQ(utf8::sanitize("\xF0\x80\x80"), kFffd + kFffd + kFffd);  // F0 80: 80 is not a valid 2nd byte
  EXPECT_EQ(utf8::sanitize("\xED\xA0\x80"), kFffd + kFffd + kFffd);
  EXPECT_EQ(utf8::sanitize("\xF0\x9F\x98"), kFffd);
  EXPECT_EQ(utf8::sanitize("\xC0\xAF"), kFffd + kFffd);
  EXPECT_EQ(utf8::sanitize("a\xFF"
                           "b\xFE"),
            "a" + kFffd + "b" + kFffd);
  EXPECT_EQ(utf8::sanitize("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);
}

TEST(Utf8, IncompleteTail) {
  EXPECT_EQ(utf8::incomplete_tail(""), 0u);
  EXPECT_EQ(utf8::incomplete_tail("abc"), 0u);
  EXPECT_EQ(utf8::incomplete_tail("a\xF0"), 1u);
  EXPECT_EQ(utf8::incomplete_tail("a\xF0\x9F"), 2u);
  EXPECT_EQ(utf8::incomplete_tail("a\xF0\x9F\x98"), 3u);
  EXPECT_EQ(utf8::incomplete_tail("a\xF0\x9F\x98\x80"), 0u);
  EXPECT_EQ(utf8::incomplete_tail("a\xE4\xBD"), 2u);
  EXPECT_EQ(utf8::incomplete_tail("a\xF0\x80"), 0u);  // can never complete
  EXPECT_EQ(utf8::incomplete_tail("a\x80"), 0u);
  EXPECT_EQ(utf8::incomplete_tail("a\xC3"), 1u);
}

TEST(Utf8, AppendAndDecodeRoundTrip) {
  for (char32_t cp : {0x0u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xFFFDu, 0x10000u, 0x10FFFFu}) {
    std::string s;
    utf8::append(s, cp);
    size_t n = utf8::sequence_length(s, 0);
    ASSERT_EQ(n, s.size());
    EXPECT_EQ(utf8::decode_at(s, 0, n), cp);
  }
}

}  // namespace
}  // namespace nanoserve
