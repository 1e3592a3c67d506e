#pragma once
// UTF-8 helpers shared by the tokenizer pieces.
//
// Validity follows Unicode Table 3-7 (well-formed byte sequences): no overlongs,
// no surrogates (U+D800..U+DFFF), nothing above U+10FFFF. Invalid input is
// replaced the way Python's bytes.decode("utf-8", "replace") and Rust's
// String::from_utf8_lossy do it: each *maximal subpart* of an ill-formed
// sequence becomes one U+FFFD.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace nanoserve::utf8 {

inline constexpr char32_t kReplacement = 0xFFFD;

// Length of the well-formed sequence starting at s[pos], or 0 if the bytes
// there do not start one. If `maximal_subpart` is given and the result is 0,
// it receives how many bytes (>= 1) form the maximal ill-formed subpart
// that one U+FFFD replaces.
size_t sequence_length(std::string_view s, size_t pos, size_t* maximal_subpart = nullptr);

// Number of bytes at the end of `s` that start a well-formed sequence but are
// cut short by the end (0..3). These are what a streaming decoder holds back.
size_t incomplete_tail(std::string_view s);

bool is_valid(std::string_view s);

// `s` with every maximal ill-formed subpart replaced by U+FFFD.
std::string sanitize(std::string_view s);

// Appends the UTF-8 encoding of `cp` (PRECOND: cp <= 0x10FFFF, not a surrogate).
void append(std::string& out, char32_t cp);

// Decodes the well-formed sequence of length `len` at s[pos].
char32_t decode_at(std::string_view s, size_t pos, size_t len);

}  // namespace nanoserve::utf8
