#pragma once
// A regular-expression subset compiled to a DFA over bytes: the `pattern` and
// `format` keywords of a schema's strings, and vLLM's guided_regex /
// guided_choice over the whole output (docs/structured_output.md, "Patterns").
//
// The subset (Python `re` syntax and meaning, matched against the whole string):
//   literals (any UTF-8 text), `.`, classes `[a-z_]` and `[^...]` of ASCII
//   characters and ranges, escapes \d \w \s \D \W \S, \t \n \r, escaped
//   punctuation (`\.`, `\-`, `\\`, ...), groups `(...)` and `(?:...)`,
//   alternation `|`, quantifiers `?` `*` `+` `{m}` `{m,}` `{m,n}` (and their
//   lazy forms, which match the same strings), `^` first and `$` last.
// Anything else (backreferences, lookaround, \b, \p{..}, named groups, flags,
// anchors inside) is refused with a message that names it.
//
// What is generated is a subset of what the pattern matches, so every output
// fullmatches it: `.`, \D \W \S and negated classes generate printable ASCII
// only, \w generates [A-Za-z0-9_], \s a space. In a JSON string the bytes `"`
// `\` and control bytes are never generated (they would need escapes).

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace nanoserve::structured {

struct RegexOptions {
  bool json_string = false;  // the text goes raw inside a JSON string
};

// Every state kept can still reach an accepting one: a walk that only takes
// bytes with a next state can always finish.
class ByteDfa {
 public:
  static constexpr int32_t kDead = -1;
  static constexpr int32_t kMaxStates = 4096;

  int32_t start() const { return 0; }
  int32_t next(int32_t state, uint8_t byte) const { return next_[static_cast<size_t>(state) * 256 + byte]; }
  bool accepting(int32_t state) const { return accepting_[state] != 0; }
  // Some byte leads on from `state`.
  bool continues(int32_t state) const { return continues_[state] != 0; }
  int32_t num_states() const { return static_cast<int32_t>(accepting_.size()); }
  // Whether the DFA accepts `text` whole.
  bool matches(std::string_view text) const;

 private:
  friend StatusOr<std::shared_ptr<const ByteDfa>> compile_regex(std::string_view, const RegexOptions&);
  std::vector<int32_t> next_;  // [states * 256]
  std::vector<uint8_t> accepting_, continues_;
};

// INVALID_ARGUMENT naming what is outside the subset, or a pattern nothing generable matches.
StatusOr<std::shared_ptr<const ByteDfa>> compile_regex(std::string_view pattern, const RegexOptions& options);

// `text` with every character that means something to the subset escaped: a pattern matching just it.
std::string regex_escape(std::string_view text);

// The pattern that stands for a JSON-schema `format`: date, date-time, time,
// email, uuid, ipv4 (every generated value passes Python jsonschema's format
// checks); NOT_FOUND for any other.
StatusOr<std::string> format_pattern(std::string_view format);

}  // namespace nanoserve::structured
