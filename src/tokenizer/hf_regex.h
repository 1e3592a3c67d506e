#pragma once
// The patterns of a tokenizer.json (Split, Replace) and the character classes
// of its components, matched with PCRE2 (UTF + UCP, JIT when available).
//
// Hugging Face compiles its patterns with Oniguruma (Ruby syntax). The two
// engines differ in a few escapes, which `from_onig` spells out so that PCRE2
// matches what Oniguruma matches:
//   \s  Unicode White_Space (PCRE2's also takes U+180E)
//   \w  Alphabetic | Mark | Number | Connector_Punctuation (PCRE2 10.42's is
//       Letter | Number | '_')
//   \h  a hexadecimal digit (PCRE2's is horizontal space)
//   ^ $ line anchors (Ruby), so PCRE2_MULTILINE
// \S, \W and \H inside a bracketed class, and nested classes, have no simple
// PCRE2 spelling and are refused (UNIMPLEMENTED).

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace nanoserve::hf {

// Unicode White_Space as the body of a PCRE2 class.
extern const char* const kWhiteSpaceClass;
// Oniguruma's \w as the body of a PCRE2 class.
extern const char* const kWordClass;
// Rust's regex crate's \w (Unicode's word characters: Alphabetic | Mark |
// Decimal_Number | Connector_Punctuation | Join_Control), which HF's
// Whitespace pre-tokenizer uses.
extern const char* const kRustWordClass;

class Regex {
 public:
  // An Oniguruma pattern from a tokenizer.json.
  static StatusOr<Regex> from_onig(std::string_view pattern);
  // A literal string (HF's String pattern; PRECOND: non-empty).
  static StatusOr<Regex> literal(std::string_view text);
  // A pattern already in PCRE2 syntax (the components' own classes).
  static StatusOr<Regex> from_pcre2(std::string_view pattern);

  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  ~Regex();

  // The non-overlapping matches of `text` (PRECOND: valid UTF-8), leftmost
  // first, as [begin, end) byte offsets. Empty matches are skipped.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;
  // Whether the whole of `text` is one match.
  bool matches_whole(std::string_view text) const;

 private:
  struct Code;
  Regex() = default;
  std::unique_ptr<Code> code_;
};

}  // namespace nanoserve::hf
