#pragma once
// A small hand-made byte-level vocab for unit tests: the 256 byte tokens
// (ids 0..255, in byte order) plus the given merges and extra tokens.

#include <string>
#include <vector>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"

namespace nanoserve::testing {

// Alphabet text of raw bytes, e.g. " a" -> "Ġa".
inline std::string alpha(std::string_view raw) {
  std::string out;
  byte_level::encode(raw, out);
  return out;
}

// merges: pairs of raw-byte strings, lowest rank first; each merge's result
// is appended as a token. extra: (text, type) appended after.
inline VocabData tiny_vocab(const std::vector<std::pair<std::string, std::string>>& merges,
                            const std::vector<std::pair<std::string, TokenType>>& extra = {}) {
  VocabData v;
  v.pre = "gpt2";
  for (int b = 0; b < 256; ++b) {
    std::string t;
    utf8::append(t, byte_level::byte_to_code_point(static_cast<uint8_t>(b)));
    v.tokens.push_back(t);
    v.token_types.push_back(TokenType::kNormal);
  }
  for (const auto& [l, r] : merges) {
    v.merges.push_back(alpha(l) + " " + alpha(r));
    v.tokens.push_back(alpha(l + r));
    v.token_types.push_back(TokenType::kNormal);
  }
  for (const auto& [text, type] : extra) {
    v.tokens.push_back(text);
    v.token_types.push_back(type);
  }
  return v;
}

}  // namespace nanoserve::testing
