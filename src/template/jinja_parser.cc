#include "template/jinja_parser.h"

#include <algorithm>
#include <initializer_list>

#include "template/jinja_builtins.h"
#include "template/jinja_parse_expr.h"

namespace nanoserve::jinja {

namespace {

// Statements (text, {{ }}, and the tags), over the expression grammar of ExprParser.
class Parser : public ExprParser {
 public:
  explicit Parser(const Lexed& lexed) : ExprParser(lexed.tokens) {}

  Body parse_template() {
    std::string end;
    return parse_body({}, end);
  }

 private:
  void expect_block_end() {
    if (cur().type != Tok::kBlockEnd) fail("expected the end of the tag ('%}'), got " + describe(cur()));
    advance();
  }

  // Statements up to a block tag named in `ends` (returned in `end`, positioned after its name).
  Body parse_body(std::initializer_list<std::string_view> ends, std::string& end) {
    Depth d(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::kEof) {
        if (ends.size() == 0) return body;
        fail("unexpected end of the template: a block is not closed (expected '" +
             std::string(*(ends.end() - 1)) + "')");
      }
      if (t.type == Tok::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kText;
        s->pos = t.pos;
        s->text = t.text;
        body.push_back(std::move(s));
        advance();
      } else if (t.type == Tok::kVarBegin) {
        advance();
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kPrint;
        s->pos = t.pos;
        s->expr = parse_tuple_or_expr();
        if (cur().type != Tok::kVarEnd)
          fail("expected the end of the expression ('}}'), got " + describe(cur()));
        advance();
        body.push_back(std::move(s));
      } else if (t.type == Tok::kBlockBegin) {
        advance();
        if (cur().type != Tok::kName) fail("expected a tag name, got " + describe(cur()));
        for (std::string_view e : ends) {
          if (cur().text == e) {
            end = cur().text;
            advance();
            return body;
          }
        }
        body.push_back(parse_statement(t.pos));
      } else {
        fail("unexpected " + describe(t));
      }
    }
  }

  StmtPtr parse_statement(uint32_t pos) {
    const std::string tag = cur().text;
    auto s = std::make_unique<Stmt>();
    s->pos = pos;
    advance();
    std::string end;
    if (tag == "if") {
      s->kind = StmtKind::kIf;
      s->conds.push_back(parse_expression());
      expect_block_end();
      while (true) {
        s->bodies.push_back(parse_body({"elif", "else", "endif"}, end));
        if (end == "elif") {
          s->conds.push_back(parse_expression());
          expect_block_end();
        } else if (end == "else") {
          expect_block_end();
          s->bodies.push_back(parse_body({"endif"}, end));
          break;
        } else {
          s->bodies.emplace_back();
          break;
        }
      }
    } else if (tag == "for") {
      s->kind = StmtKind::kFor;
      s->targets = parse_targets();
      if (!is_name("in")) fail("expected 'in', got " + describe(cur()));
      advance();
      s->expr = parse_or();
      if (is_name("if")) {
        advance();
        s->cond = parse_expression();
      }
      if (is_name("recursive")) fail("'recursive' loops are not supported");
      expect_block_end();
      ++loop_depth_;
      s->bodies.push_back(parse_body({"else", "endfor"}, end));
      --loop_depth_;
      if (end == "else") {
        expect_block_end();
        s->bodies.push_back(parse_body({"endfor"}, end));
      } else {
        s->bodies.emplace_back();
      }
    } else if (tag == "set") {
      if (cur().type == Tok::kName && peek().type == Tok::kOp && peek().text == ".") {
        s->kind = StmtKind::kSet;
        s->targets.push_back(cur().text);
        advance();
        advance();
        s->ns_attr = expect_name("an attribute name");
        expect_op("=");
        s->expr = parse_tuple_or_expr();
      } else {
        s->targets = parse_targets();
        if (cur().type == Tok::kBlockEnd && s->targets.size() == 1) {
          s->kind = StmtKind::kSetBlock;
          advance();
          s->bodies.push_back(parse_body({"endset"}, end));
        } else {
          s->kind = StmtKind::kSet;
          expect_op("=");
          s->expr = parse_tuple_or_expr();
        }
      }
    } else if (tag == "macro") {
      s->kind = StmtKind::kMacro;
      s->name = expect_name("a macro name");
      expect_op("(");
      while (!is_op(")")) {
        s->targets.push_back(expect_name("a parameter name"));
        if (is_op("=")) {
          advance();
          s->defaults.push_back(parse_expression());
        } else {
          s->defaults.push_back(nullptr);
        }
        if (!is_op(",")) break;
        advance();
      }
      expect_op(")");
      expect_block_end();
      const int outer_loops = loop_depth_;
      loop_depth_ = 0;  // a loop around the definition is not around the call
      s->bodies.push_back(parse_body({"endmacro"}, end));
      loop_depth_ = outer_loops;
      if (cur().type == Tok::kName && cur().text == s->name) advance();
    } else if (tag == "filter") {
      s->kind = StmtKind::kFilterBlock;
      ExprPtr chain;  // null input: the rendered body
      do {
        chain = parse_filter(std::move(chain));
      } while (is_op("|") && (advance(), true));
      s->expr = std::move(chain);
      expect_block_end();
      s->bodies.push_back(parse_body({"endfilter"}, end));
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail_at(pos, "'" + tag + "' outside a loop");
      s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
    } else if (tag == "generation") {
      s->kind = StmtKind::kBlock;
      expect_block_end();
      s->bodies.push_back(parse_body({"endgeneration"}, end));
    } else {
      fail_at(pos, "unknown or unsupported tag '" + tag + "'");
    }
    expect_block_end();
    return s;
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    bool paren = is_op("(");
    if (paren) advance();
    while (true) {
      names.push_back(expect_name("a variable name"));
      if (!is_op(",")) break;
      advance();
    }
    if (paren) expect_op(")");
    return names;
  }

  int loop_depth_ = 0;  // enclosing for bodies: break and continue need one
};

// Macros that read varargs, kwargs or caller (extra arguments, call blocks) are refused: we
// do not implement them, and jinja2 would render them differently.
void check_macro(const Stmt& m) {
  std::vector<std::string> names;
  collect_names(m.bodies[0], names);
  for (const char* special : {"varargs", "kwargs", "caller"}) {
    if (std::find(names.begin(), names.end(), special) != names.end())
      throw ParseError{m.pos, "macro '" + m.name + "' reads '" + special + "', which is not supported"};
  }
}

// jinja2 refuses a filter or test it does not have when it compiles the template, except in
// a "soft" frame: an if (its conditions and bodies) or a conditional expression, where the name
// fails only when it is reached. A for body, its loop filter and else, a macro, a set block, a
// filter block and {% generation %} open a frame that is not soft again; a for's iterable is
// in the frame around it.
void check_names(const Expr& e, bool soft) {
  if (!soft && e.kind == ExprKind::kFilter && !jinja2_has_filter(e.name))
    throw ParseError{e.pos, "no filter named '" + e.name + "'"};
  if (!soft && e.kind == ExprKind::kTest && !jinja2_has_test(e.name))
    throw ParseError{e.pos, "no test named '" + e.name + "'"};
  const bool inner = soft || e.kind == ExprKind::kCondition;
  for (const ExprPtr& x : e.args) {
    if (x) check_names(*x, inner);
  }
  for (const auto& kv : e.kwargs) check_names(*kv.second, inner);
}

void check_names(const Body& body, bool soft) {
  for (const StmtPtr& s : body) {
    switch (s->kind) {
      case StmtKind::kIf:
        for (const ExprPtr& c : s->conds) check_names(*c, true);
        for (const Body& b : s->bodies) check_names(b, true);
        break;
      case StmtKind::kFor:
        check_names(*s->expr, soft);
        if (s->cond) check_names(*s->cond, false);
        for (const Body& b : s->bodies) check_names(b, false);
        break;
      case StmtKind::kMacro:
        check_macro(*s);
        for (const ExprPtr& d : s->defaults) {
          if (d) check_names(*d, false);
        }
        check_names(s->bodies[0], false);
        break;
      default:
        if (s->expr) check_names(*s->expr, s->kind == StmtKind::kFilterBlock ? false : soft);
        for (const Body& b : s->bodies) check_names(b, false);
        break;
    }
  }
}

void collect_names(const Expr& e, std::vector<std::string>& out) {
  if (e.kind == ExprKind::kName) out.push_back(e.name);
  for (const ExprPtr& x : e.args) {
    if (x) collect_names(*x, out);
  }
  for (const auto& kv : e.kwargs) collect_names(*kv.second, out);
}

}  // namespace

void collect_names(const Body& body, std::vector<std::string>& out) {
  for (const StmtPtr& s : body) {
    for (const Expr* e : {s->expr.get(), s->cond.get()}) {
      if (e) collect_names(*e, out);
    }
    for (const ExprPtr& e : s->conds) collect_names(*e, out);
    for (const ExprPtr& e : s->defaults) {
      if (e) collect_names(*e, out);
    }
    for (const Body& b : s->bodies) collect_names(b, out);
  }
}

StatusOr<Body> parse(const Lexed& lexed) {
  try {
    Parser p(lexed);
    Body body = p.parse_template();
    check_names(body, false);
    return body;
  } catch (const ParseError& e) {
    return invalid_argument("chat template: " + position_text(lexed.source, e.pos) + ": " + e.what);
  }
}

}  // namespace nanoserve::jinja
