#include "tokenizer/jinja_parser.h"

#include <initializer_list>
#include <stdexcept>

namespace nanoserve::jinja {

namespace {

struct ParseError {
  uint32_t pos;
  std::string what;
};

class Parser {
 public:
  explicit Parser(const Lexed& lexed) : toks_(lexed.tokens) {}

  Body parse_template() {
    std::string end;
    Body body = parse_body({}, end);
    return body;
  }

 private:
  const Token& cur() const { return toks_[at_]; }
  const Token& peek(size_t k = 1) const { return toks_[std::min(at_ + k, toks_.size() - 1)]; }
  void advance() {
    if (at_ + 1 < toks_.size()) ++at_;
  }
  [[noreturn]] void fail(const std::string& what) const { throw ParseError{cur().pos, what}; }
  [[noreturn]] void fail_at(uint32_t pos, const std::string& what) const { throw ParseError{pos, what}; }

  bool is_op(std::string_view op) const { return cur().type == Tok::kOp && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().type == Tok::kName && cur().text == n; }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case Tok::kEof: return "the end of the template";
      case Tok::kBlockEnd: return "the end of the tag ('%}')";
      case Tok::kVarEnd: return "the end of the expression ('}}')";
      case Tok::kText: return "text";
      case Tok::kString: return "a string";
      case Tok::kInt:
      case Tok::kFloat: return "the number " + t.text;
      default: return "'" + t.text + "'";
    }
  }
  void expect_op(std::string_view op) {
    if (!is_op(op)) fail("expected '" + std::string(op) + "', got " + describe(cur()));
    advance();
  }
  std::string expect_name(const char* what) {
    if (cur().type != Tok::kName) fail(std::string("expected ") + what + ", got " + describe(cur()));
    std::string n = cur().text;
    advance();
    return n;
  }
  void expect_block_end() {
    if (cur().type != Tok::kBlockEnd) fail("expected the end of the tag ('%}'), got " + describe(cur()));
    advance();
  }

  struct Depth {
    explicit Depth(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxParseDepth)
        p_.fail("nesting deeper than " + std::to_string(kMaxParseDepth) + " (the parser's recursion limit)");
    }
    ~Depth() { --p_.depth_; }
    Parser& p_;
  };

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

  ExprPtr node(ExprKind kind, uint32_t pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }

  ExprPtr parse_tuple_or_expr() {
    uint32_t pos = cur().pos;
    ExprPtr first = parse_expression();
    if (!is_op(",")) return first;
    auto t = node(ExprKind::kTuple, pos);
    t->args.push_back(std::move(first));
    while (is_op(",")) {
      advance();
      if (cur().type == Tok::kVarEnd || cur().type == Tok::kBlockEnd) break;
      t->args.push_back(parse_expression());
    }
    return t;
  }

  ExprPtr parse_expression() {
    Depth d(*this);
    uint32_t pos = cur().pos;
    ExprPtr e = parse_or();
    while (is_name("if")) {
      advance();
      auto c = node(ExprKind::kCondition, pos);
      c->args.push_back(parse_or());
      c->args.push_back(std::move(e));
      if (is_name("else")) {
        advance();
        c->args.push_back(parse_expression());
      } else {
        c->args.push_back(nullptr);
      }
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(ExprKind kind, std::string op, ExprPtr l, ExprPtr r) {
    auto e = node(kind, l->pos);
    e->name = std::move(op);
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (is_name("or")) {
      advance();
      l = binary(ExprKind::kOr, "or", std::move(l), parse_and());
    }
    return l;
  }
  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (is_name("and")) {
      advance();
      l = binary(ExprKind::kAnd, "and", std::move(l), parse_not());
    }
    return l;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      Depth d(*this);
      auto e = node(ExprKind::kNot, cur().pos);
      advance();
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == Tok::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                     cur().text == ">" || cur().text == "<=" || cur().text == ">=")) {
        op = cur().text;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().type == Tok::kName && peek().text == "in") {
        op = "notin";
        advance();
        advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(ExprKind::kCompare, first->pos);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }
  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      advance();
      l = binary(ExprKind::kBinary, op, std::move(l), parse_concat());
    }
    return l;
  }
  ExprPtr parse_concat() {
    ExprPtr l = parse_math2();
    while (is_op("~")) {
      advance();
      l = binary(ExprKind::kBinary, "~", std::move(l), parse_math2());
    }
    return l;
  }
  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      advance();
      l = binary(ExprKind::kBinary, op, std::move(l), parse_pow());
    }
    return l;
  }
  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    while (is_op("**")) {
      advance();
      l = binary(ExprKind::kBinary, "**", std::move(l), parse_unary(true));
    }
    return l;
  }
  ExprPtr parse_unary(bool with_filter) {
    Depth d(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = node(is_op("-") ? ExprKind::kNeg : ExprKind::kPos, cur().pos);
      advance();
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    if (t.type == Tok::kName) {
      auto e = node(ExprKind::kLiteral, t.pos);
      if (t.text == "true" || t.text == "True") {
        e->value = Value::boolean(true);
      } else if (t.text == "false" || t.text == "False") {
        e->value = Value::boolean(false);
      } else if (t.text == "none" || t.text == "None") {
        e->value = Value::none();
      } else {
        e->kind = ExprKind::kName;
        e->name = t.text;
      }
      advance();
      return e;
    }
    if (t.type == Tok::kString) {
      auto e = node(ExprKind::kLiteral, t.pos);
      std::string s;
      while (cur().type == Tok::kString) {  // adjacent literals join, as in Python
        s += cur().text;
        advance();
      }
      e->value = Value::template_string(std::move(s));
      return e;
    }
    if (t.type == Tok::kInt || t.type == Tok::kFloat) {
      auto e = node(ExprKind::kLiteral, t.pos);
      e->value = t.type == Tok::kInt ? Value::integer(t.i) : Value::number(t.f);
      advance();
      return e;
    }
    if (is_op("(")) {
      uint32_t pos = t.pos;
      advance();
      if (is_op(")")) {
        advance();
        return node(ExprKind::kTuple, pos);
      }
      ExprPtr first = parse_expression();
      if (is_op(")")) {
        advance();
        return first;
      }
      auto tup = node(ExprKind::kTuple, pos);
      tup->args.push_back(std::move(first));
      while (is_op(",")) {
        advance();
        if (is_op(")")) break;
        tup->args.push_back(parse_expression());
      }
      expect_op(")");
      return tup;
    }
    if (is_op("[")) {
      auto e = node(ExprKind::kList, t.pos);
      advance();
      while (!is_op("]")) {
        e->args.push_back(parse_expression());
        if (!is_op(",")) break;
        advance();
      }
      expect_op("]");
      return e;
    }
    if (is_op("{")) {
      auto e = node(ExprKind::kDict, t.pos);
      advance();
      while (!is_op("}")) {
        e->args.push_back(parse_expression());
        expect_op(":");
        e->args.push_back(parse_expression());
        if (!is_op(",")) break;
        advance();
      }
      expect_op("}");
      return e;
    }
    fail("unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        advance();
        if (cur().type == Tok::kInt) {
          auto item = node(ExprKind::kItem, e->pos);
          auto idx = node(ExprKind::kLiteral, cur().pos);
          idx->value = Value::integer(cur().i);
          advance();
          item->args.push_back(std::move(e));
          item->args.push_back(std::move(idx));
          e = std::move(item);
        } else {
          auto a = node(ExprKind::kAttr, e->pos);
          a->name = expect_name("an attribute name");
          a->args.push_back(std::move(e));
          e = std::move(a);
        }
      } else if (is_op("[")) {
        advance();
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e), ExprKind::kCall);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    uint32_t pos = obj->pos;
    ExprPtr parts[3];
    bool slice = false;
    for (int k = 0; k < 3; ++k) {
      if (!is_op(":") && !is_op("]")) parts[k] = parse_expression();
      if (k < 2 && is_op(":")) {
        slice = true;
        advance();
      } else {
        break;
      }
    }
    expect_op("]");
    auto e = node(slice ? ExprKind::kSlice : ExprKind::kItem, pos);
    e->args.push_back(std::move(obj));
    if (!slice && !parts[0]) fail_at(pos, "an empty subscript '[]'");
    e->args.push_back(std::move(parts[0]));
    if (slice) {
      e->args.push_back(std::move(parts[1]));
      e->args.push_back(std::move(parts[2]));
    }
    return e;
  }

  // Call arguments into `e` (args after any already there, then kwargs).
  void parse_args(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (is_op("*") || is_op("**")) fail("'*args' and '**kwargs' in calls are not supported");
      if (cur().type == Tok::kName && peek().type == Tok::kOp && peek().text == "=") {
        std::string k = cur().text;
        advance();
        advance();
        e.kwargs.emplace_back(std::move(k), parse_expression());
      } else {
        if (!e.kwargs.empty()) fail("a positional argument after a keyword argument");
        e.args.push_back(parse_expression());
      }
      if (!is_op(",")) break;
      advance();
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee, ExprKind kind) {
    auto e = node(kind, callee->pos);
    e->args.push_back(std::move(callee));
    parse_args(*e);
    return e;
  }

  // `| name[.name](args)` applied to `input` (null in a filter block).
  ExprPtr parse_filter(ExprPtr input) {
    uint32_t pos = cur().pos;
    auto e = node(ExprKind::kFilter, input ? input->pos : pos);
    e->name = expect_name("a filter name");
    while (is_op(".")) {
      advance();
      e->name += '.';
      e->name += expect_name("a filter name");
    }
    e->args.push_back(std::move(input));
    if (is_op("(")) parse_args(*e);
    return e;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        advance();
        e = parse_filter(std::move(e));
      } else if (is_name("is")) {
        advance();
        auto t = node(ExprKind::kTest, e->pos);
        if (is_name("not")) {
          t->negated = true;
          advance();
        }
        t->name = expect_name("a test name");
        while (is_op(".")) {
          advance();
          t->name += '.';
          t->name += expect_name("a test name");
        }
        t->args.push_back(std::move(e));
        const Token& n = cur();
        bool arg_follows = n.type == Tok::kString || n.type == Tok::kInt || n.type == Tok::kFloat ||
                           (n.type == Tok::kName && n.text != "else" && n.text != "or" && n.text != "and") ||
                           (n.type == Tok::kOp && (n.text == "[" || n.text == "{"));
        if (is_op("(")) {
          parse_args(*t);
        } else if (arg_follows) {
          if (is_name("is")) fail("a test cannot take 'is' as its argument");
          t->args.push_back(parse_postfix(parse_primary()));
        }
        e = std::move(t);
      } else if (is_op("(")) {
        e = parse_call(std::move(e), ExprKind::kCall);
      } else {
        return e;
      }
    }
  }

  const std::vector<Token>& toks_;
  size_t at_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;  // enclosing for bodies: break and continue need one
};

}  // namespace

StatusOr<Body> parse(const Lexed& lexed) {
  try {
    Parser p(lexed);
    return p.parse_template();
  } catch (const ParseError& e) {
    return invalid_argument("chat template: " + position_text(lexed.source, e.pos) + ": " + e.what);
  }
}

}  // namespace nanoserve::jinja
