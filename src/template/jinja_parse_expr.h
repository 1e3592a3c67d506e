#pragma once
// The Jinja parser's token cursor and its expression grammar (jinja2's
// precedence, lowest first: `x if c else y`, or, and, not, comparisons, + -, ~,
// * / // %, **, unary - +, then postfix .attr, [index], [a:b:c], calls, with
// filters |f and tests `is t`). jinja_parser.cc parses statements on top of it.
// Internal to the parser.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "template/jinja_ast.h"
#include "template/jinja_lexer.h"
#include "template/jinja_parser.h"

namespace nanoserve::jinja {

// A syntax error at a byte offset of the source (parse() turns it into a Status).
struct ParseError {
  uint32_t pos;
  std::string what;
};

class ExprParser {
 public:
  explicit ExprParser(const std::vector<Token>& toks) : toks_(toks) {}

 protected:
  const Token& cur() const { return toks_[at_]; }
  const Token& peek(size_t k = 1) const { return toks_[std::min(at_ + k, toks_.size() - 1)]; }
  void advance() {
    if (at_ + 1 < toks_.size()) ++at_;
  }
  [[noreturn]] void fail(const std::string& what) const { throw ParseError{cur().pos, what}; }
  [[noreturn]] void fail_at(uint32_t pos, const std::string& what) const { throw ParseError{pos, what}; }

  bool is_op(std::string_view op) const { return cur().type == Tok::kOp && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().type == Tok::kName && cur().text == n; }
  std::string describe(const Token& t) const;
  void expect_op(std::string_view op);
  std::string expect_name(const char* what);

  // Counts nesting (blocks and expressions) while alive; past kMaxParseDepth it is an error.
  struct Depth {
    explicit Depth(ExprParser& p);
    ~Depth() { --p_.depth_; }
    ExprParser& p_;
  };

  ExprPtr node(ExprKind kind, uint32_t pos);
  // `a, b, ...` without brackets (print, set), else one expression.
  ExprPtr parse_tuple_or_expr();
  ExprPtr parse_expression();
  ExprPtr parse_or();
  // `| name[.name](args)` applied to `input` (null in a filter block).
  ExprPtr parse_filter(ExprPtr input);

 private:
  ExprPtr binary(ExprKind kind, std::string op, ExprPtr l, ExprPtr r);
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr e);
  ExprPtr parse_subscript(ExprPtr obj);
  // Call arguments into `e` (args after any already there, then kwargs).
  void parse_args(Expr& e);
  ExprPtr parse_call(ExprPtr callee, ExprKind kind);
  ExprPtr parse_filter_expr(ExprPtr e);

  const std::vector<Token>& toks_;
  size_t at_ = 0;
  int depth_ = 0;
};

}  // namespace nanoserve::jinja
