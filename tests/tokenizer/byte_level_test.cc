#include "tokenizer/byte_level.h"

#include <gtest/gtest.h>

#include <set>

namespace nanoserve {
namespace {

TEST(ByteLevel, MapsLikeGpt2) {
  EXPECT_EQ(byte_level::byte_to_code_point(' '), 0x120u);   // 'Ġ'
  EXPECT_EQ(byte_level::byte_to_code_point('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(byte_level::byte_to_code_point('\t'), 0x109u);
  EXPECT_EQ(byte_level::byte_to_code_point('A'), static_cast<char32_t>('A'));
  EXPECT_EQ(byte_level::byte_to_code_point(0xE9), 0xE9u);
  EXPECT_EQ(byte_level::byte_to_code_point(0xAD), 0x143u);  // the last of the 68 remapped bytes
  EXPECT_EQ(byte_level::byte_to_code_point(0x00), 0x100u);
}

TEST(ByteLevel, IsABijectionOnAllBytes) {
  std::set<char32_t> seen;
  std::string all;
  for (int b = 0; b < 256; ++b) {
    char32_t cp = byte_level::byte_to_code_point(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(cp).second);
    EXPECT_EQ(byte_level::code_point_to_byte(cp), std::optional<uint8_t>(static_cast<uint8_t>(b)));
    all.push_back(static_cast<char>(b));
  }
  std::string text, back;
  byte_level::encode(all, text);
  ASSERT_TRUE(byte_level::decode(text, back));
  EXPECT_EQ(back, all);
}

TEST(ByteLevel, DecodeRejectsCodePointsOutsideTheAlphabet) {
  std::string out;
  EXPECT_FALSE(byte_level::decode("\xE4\xBD\xA0", out));  // U+4F60
  EXPECT_FALSE(byte_level::decode("\xFF", out));          // not UTF-8
  EXPECT_FALSE(byte_level::decode(" ", out));             // ' ' itself is not in the alphabet
}

}  // namespace
}  // namespace nanoserve
