#pragma once
// Parses lexed Jinja into a syntax tree, with jinja2's operator precedence
// (lowest first): `x if c else y`, or, and, not, comparisons (== != < > <= >=
// in, not in; chained), + -, ~, * / // %, **, unary - +, then postfix
// (.attr, [index], [a:b:c], call) with filters (|f) and tests (is t).

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "template/jinja_ast.h"
#include "template/jinja_lexer.h"

namespace nanoserve::jinja {

// Nesting of expressions and blocks the parser accepts; deeper input is an error, not a stack overflow.
inline constexpr int kMaxParseDepth = 200;

// Parses, then refuses what jinja2 refuses when it compiles (a filter or test it does not have,
// outside an if) and macros that read varargs, kwargs or caller.
StatusOr<Body> parse(const Lexed& lexed);

// Appends every name `body` reads as a variable (with repeats).
void collect_names(const Body& body, std::vector<std::string>& out);

}  // namespace nanoserve::jinja
