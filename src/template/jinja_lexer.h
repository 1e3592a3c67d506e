#pragma once
// Splits a Jinja template into text and tag tokens, as jinja2's lexer does with
// the settings transformers uses: trim_blocks (the newline after a block or
// comment tag is dropped), lstrip_blocks (blanks from the start of a line up to
// a block or comment tag are dropped), `{%-`/`-%}` strip all whitespace on that
// side, `{%+`/`+%}` turn the two settings off for one tag. Newlines are
// normalised to \n and one trailing newline is dropped (keep_trailing_newline
// off). Inside brackets, `}}` and `%}` are operators, not tag ends.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace nanoserve::jinja {

enum class Tok { kText, kBlockBegin, kBlockEnd, kVarBegin, kVarEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Token {
  Tok type = Tok::kEof;
  std::string text;  // kText: the text; kName/kOp: the spelling; kString: the decoded value
  int64_t i = 0;     // kInt
  double f = 0;      // kFloat
  uint32_t pos = 0;  // byte offset in the normalised source
};

// The normalised source (what token positions index) and its tokens, ending with kEof.
struct Lexed {
  std::string source;
  std::vector<Token> tokens;
};

StatusOr<Lexed> lex(std::string_view source);

// "line L, column C" (both from 1, columns in bytes) of a byte offset.
std::string position_text(std::string_view source, uint32_t pos);

}  // namespace nanoserve::jinja
