#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace nanoserve::byte_level {

namespace {

constexpr bool maps_to_itself(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

constexpr std::array<char32_t, 256> make_byte_table() {
  std::array<char32_t, 256> t{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) t[b] = maps_to_itself(b) ? static_cast<char32_t>(b) : next++;
  return t;
}

// Code points used are < 0x144 (256 + 68), so an inverse table is small.
constexpr int kMaxCodePoint = 256 + 68;
constexpr std::array<int16_t, kMaxCodePoint> make_inverse_table() {
  std::array<int16_t, kMaxCodePoint> t{};
  for (auto& v : t) v = -1;
  auto bytes = make_byte_table();
  for (int b = 0; b < 256; ++b) t[bytes[b]] = static_cast<int16_t>(b);
  return t;
}

constexpr std::array<char32_t, 256> kByteToCp = make_byte_table();
constexpr std::array<int16_t, kMaxCodePoint> kCpToByte = make_inverse_table();

}  // namespace

char32_t byte_to_code_point(uint8_t b) {
  return kByteToCp[b];
}

std::optional<uint8_t> code_point_to_byte(char32_t cp) {
  if (cp >= static_cast<char32_t>(kMaxCodePoint) || kCpToByte[cp] < 0) return std::nullopt;
  return static_cast<uint8_t>(kCpToByte[cp]);
}

void encode(std::string_view bytes, std::string& out) {
  for (char c : bytes) {
    char32_t cp = kByteToCp[static_cast<uint8_t>(c)];
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else {  // all code points here are < 0x800: two UTF-8 bytes
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
}

bool decode(std::string_view text, std::string& out) {
  for (size_t pos = 0; pos < text.size();) {
    size_t n = utf8::sequence_length(text, pos);
    if (n == 0) return false;
    auto b = code_point_to_byte(utf8::decode_at(text, pos, n));
    if (!b) return false;
    out.push_back(static_cast<char>(*b));
    pos += n;
  }
  return true;
}

}  // namespace nanoserve::byte_level
