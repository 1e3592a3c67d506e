#pragma once
// GPT-2 byte-level alphabet: every byte 0..255 is given a printable Unicode
// code point so that BPE vocabularies can be stored as text. Printable Latin-1
// bytes ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) map to themselves; the other
// 68 bytes map, in increasing byte order, to U+0100, U+0101, ...
//
// Vocab strings and merges are in this alphabet; the text given to encode()
// and returned by decode() is raw bytes.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nanoserve::byte_level {

char32_t byte_to_code_point(uint8_t b);
// The byte a code point stands for, or nullopt if it is not in the alphabet.
std::optional<uint8_t> code_point_to_byte(char32_t cp);

// Raw bytes -> their alphabet string (UTF-8). Appends to `out`.
void encode(std::string_view bytes, std::string& out);
// Alphabet string -> raw bytes. False if `text` is not valid UTF-8 or holds a
// code point outside the alphabet (then `out` is unspecified).
bool decode(std::string_view text, std::string& out);

}  // namespace nanoserve::byte_level
