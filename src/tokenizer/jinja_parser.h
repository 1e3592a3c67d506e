#pragma once
// Parses lexed Jinja into a syntax tree, with jinja2's operator precedence
// (lowest first): `x if c else y`, or, and, not, comparisons (== != < > <= >=
// in, not in; chained), + -, ~, * / // %, **, unary - +, then postfix
// (.attr, [index], [a:b:c], call) with filters (|f) and tests (is t).

#include <string>
#include <string_view>

#include "core/status.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_lexer.h"

namespace nanoserve::jinja {

// Nesting of expressions and blocks the parser accepts; deeper input is an error, not a stack overflow.
inline constexpr int kMaxParseDepth = 200;

StatusOr<Body> parse(const Lexed& lexed);

}  // namespace nanoserve::jinja
