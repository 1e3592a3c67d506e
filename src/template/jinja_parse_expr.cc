// The expression half of the Jinja parser (jinja_parse_expr.h): jinja2's
// grammar from conditional expressions down to literals, with filters and tests.

#include "template/jinja_parse_expr.h"

namespace nanoserve::jinja {

std::string ExprParser::describe(const Token& t) const {
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

void ExprParser::expect_op(std::string_view op) {
  if (!is_op(op)) fail("expected '" + std::string(op) + "', got " + describe(cur()));
  advance();
}

std::string ExprParser::expect_name(const char* what) {
  if (cur().type != Tok::kName) fail(std::string("expected ") + what + ", got " + describe(cur()));
  std::string n = cur().text;
  advance();
  return n;
}

ExprParser::Depth::Depth(ExprParser& p) : p_(p) {
  if (++p_.depth_ > kMaxParseDepth)
    p_.fail("nesting deeper than " + std::to_string(kMaxParseDepth) + " (the parser's recursion limit)");
}

ExprPtr ExprParser::node(ExprKind kind, uint32_t pos) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->pos = pos;
  return e;
}

ExprPtr ExprParser::parse_tuple_or_expr() {
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

ExprPtr ExprParser::parse_expression() {
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

ExprPtr ExprParser::binary(ExprKind kind, std::string op, ExprPtr l, ExprPtr r) {
  auto e = node(kind, l->pos);
  e->name = std::move(op);
  e->args.push_back(std::move(l));
  e->args.push_back(std::move(r));
  return e;
}

ExprPtr ExprParser::parse_or() {
  ExprPtr l = parse_and();
  while (is_name("or")) {
    advance();
    l = binary(ExprKind::kOr, "or", std::move(l), parse_and());
  }
  return l;
}
ExprPtr ExprParser::parse_and() {
  ExprPtr l = parse_not();
  while (is_name("and")) {
    advance();
    l = binary(ExprKind::kAnd, "and", std::move(l), parse_not());
  }
  return l;
}
ExprPtr ExprParser::parse_not() {
  if (is_name("not")) {
    Depth d(*this);
    auto e = node(ExprKind::kNot, cur().pos);
    advance();
    e->args.push_back(parse_not());
    return e;
  }
  return parse_compare();
}
ExprPtr ExprParser::parse_compare() {
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
ExprPtr ExprParser::parse_math1() {
  ExprPtr l = parse_concat();
  while (is_op("+") || is_op("-")) {
    std::string op = cur().text;
    advance();
    l = binary(ExprKind::kBinary, op, std::move(l), parse_concat());
  }
  return l;
}
ExprPtr ExprParser::parse_concat() {
  ExprPtr l = parse_math2();
  while (is_op("~")) {
    advance();
    l = binary(ExprKind::kBinary, "~", std::move(l), parse_math2());
  }
  return l;
}
ExprPtr ExprParser::parse_math2() {
  ExprPtr l = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    std::string op = cur().text;
    advance();
    l = binary(ExprKind::kBinary, op, std::move(l), parse_pow());
  }
  return l;
}
ExprPtr ExprParser::parse_pow() {
  ExprPtr l = parse_unary(true);
  while (is_op("**")) {
    advance();
    l = binary(ExprKind::kBinary, "**", std::move(l), parse_unary(true));
  }
  return l;
}
ExprPtr ExprParser::parse_unary(bool with_filter) {
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

ExprPtr ExprParser::parse_primary() {
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

ExprPtr ExprParser::parse_postfix(ExprPtr e) {
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

ExprPtr ExprParser::parse_subscript(ExprPtr obj) {
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
void ExprParser::parse_args(Expr& e) {
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

ExprPtr ExprParser::parse_call(ExprPtr callee, ExprKind kind) {
  auto e = node(kind, callee->pos);
  e->args.push_back(std::move(callee));
  parse_args(*e);
  return e;
}

// `| name[.name](args)` applied to `input` (null in a filter block).
ExprPtr ExprParser::parse_filter(ExprPtr input) {
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

ExprPtr ExprParser::parse_filter_expr(ExprPtr e) {
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

}  // namespace nanoserve::jinja
