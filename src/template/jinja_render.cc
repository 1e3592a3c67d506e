#include "template/jinja_render.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>

#include "template/jinja_builtins.h"
#include "template/jinja_parser.h"

namespace nanoserve::jinja {

namespace {

enum class Flow { kNormal, kBreak, kContinue };

using Clock = std::chrono::steady_clock;

const char* const kGlobals[] = {"range", "namespace", "dict", "raise_exception", "strftime_now"};

class Renderer {
 public:
  Renderer(const Variables& vars, const RenderLimits& limits, std::optional<std::time_t> now)
      : vars_(vars), limits_(limits), now_(now) {
    builtin_limits_.max_string_bytes = limits.max_output_bytes;
    frames_.emplace_back();
    deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(limits.max_seconds));
  }

  Str run(const Body& body) {
    Str out;
    out_.push_back(&out);
    exec(body);
    out_.pop_back();
    return out;
  }

 private:
  struct Nest {
    Nest(Renderer& r, uint32_t pos) : r_(r) {
      r_.pos_ = pos;
      if (++r_.nesting_ > r_.limits_.max_nesting)
        fail(pos, "nesting deeper than " + std::to_string(r_.limits_.max_nesting) + " (max_nesting)");
      if (++r_.steps_ > r_.limits_.max_steps)
        fail(pos, "the render took more than " + std::to_string(r_.limits_.max_steps) + " steps (max_steps)");
      if ((r_.steps_ & 4095) == 0 && Clock::now() > r_.deadline_)
        fail(pos,
             "the render took longer than " + std::to_string(r_.limits_.max_seconds) + " s (max_seconds)");
    }
    ~Nest() { --r_.nesting_; }
    Renderer& r_;
  };

  void write(const Str& s, uint32_t pos) {
    Str& out = *out_.back();
    if (out.text.size() + s.text.size() > limits_.max_output_bytes)
      fail(pos, "the output is larger than " + std::to_string(limits_.max_output_bytes) +
                    " bytes (max_output_bytes)");
    out.append(s);
  }

  // ---- variables ----
  Value lookup(const std::string& name, uint32_t pos) {
    for (size_t k = frames_.size(); k-- > floor_;) {
      for (const auto& [n, v] : frames_[k]) {
        if (n == name) return v;
      }
    }
    if (floor_ > 0) {
      for (const auto& [n, v] : frames_[0]) {
        if (n == name) return v;
      }
    }
    for (const auto& [n, v] : vars_) {
      if (n == name) return v;
    }
    for (const char* g : kGlobals) {
      if (name == g) {
        auto c = std::make_shared<Callable>();
        c->type = Callable::Type::kGlobal;
        c->name = name;
        Value v;
        v.kind = Kind::kCallable;
        v.fn = std::move(c);
        return v;
      }
    }
    (void)pos;
    return Value::undefined("'" + name + "' is undefined");
  }

  void assign(const std::string& name, Value v) {
    auto& frame = frames_.back();
    for (auto& [n, x] : frame) {
      if (n == name) {
        x = std::move(v);
        return;
      }
    }
    frame.emplace_back(name, std::move(v));
  }

  void assign_targets(const std::vector<std::string>& targets, const Value& v, uint32_t pos) {
    if (targets.size() == 1) return assign(targets[0], v);
    List items = iterate(v, pos);
    if (items.size() != targets.size()) {
      fail(pos, items.size() < targets.size()
                    ? "not enough values to unpack (expected " + std::to_string(targets.size()) + ", got " +
                          std::to_string(items.size()) + ")"
                    : "too many values to unpack (expected " + std::to_string(targets.size()) + ")");
    }
    for (size_t k = 0; k < targets.size(); ++k) assign(targets[k], items[k]);
  }

  // ---- statements ----
  Flow exec(const Body& body) {
    for (const StmtPtr& s : body) {
      Flow f = exec(*s);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Flow exec(const Stmt& s) {
    Nest n(*this, s.pos);
    switch (s.kind) {
      case StmtKind::kText: write(Str{s.text, {}}, s.pos); return Flow::kNormal;
      case StmtKind::kPrint: write(to_str(eval(*s.expr)), s.pos); return Flow::kNormal;
      case StmtKind::kIf:
        for (size_t k = 0; k < s.conds.size(); ++k) {
          if (truthy(eval(*s.conds[k]))) return exec(s.bodies[k]);
        }
        return exec(s.bodies.back());
      case StmtKind::kFor: return exec_for(s);
      case StmtKind::kSet:
        if (!s.ns_attr.empty()) {
          Value ns = lookup(s.targets[0], s.pos);
          if (ns.kind != Kind::kNamespace) fail(s.pos, "cannot assign attribute on non-namespace object");
          ns.dict->set(Value::template_string(s.ns_attr), eval(*s.expr));
        } else {
          assign_targets(s.targets, eval(*s.expr), s.pos);
        }
        return Flow::kNormal;
      case StmtKind::kSetBlock:
        assign(s.targets[0], Value::string(capture(s.bodies[0])));
        return Flow::kNormal;
      case StmtKind::kMacro: {
        auto c = std::make_shared<Callable>();
        c->type = Callable::Type::kMacro;
        c->name = s.name;
        c->macro = &s;
        Value v;
        v.kind = Kind::kCallable;
        v.fn = std::move(c);
        assign(s.name, std::move(v));
        return Flow::kNormal;
      }
      case StmtKind::kFilterBlock: {
        Value text = Value::string(capture(s.bodies[0]));
        write(to_str(apply_filters(*s.expr, text)), s.pos);
        return Flow::kNormal;
      }
      case StmtKind::kBreak: return Flow::kBreak;
      case StmtKind::kContinue: return Flow::kContinue;
      case StmtKind::kBlock: return exec(s.bodies[0]);
    }
    return Flow::kNormal;
  }

  Str capture(const Body& body) {
    Str out;
    out_.push_back(&out);
    exec(body);
    out_.pop_back();
    return out;
  }

  // A filter block's chain: the innermost filter's input (null) is `input`.
  Value apply_filters(const Expr& e, const Value& input) {
    Value in = e.args[0] ? apply_filters(*e.args[0], input) : input;
    return call_filter(e.name, in, eval_args(e, 1), e.pos, builtin_limits_);
  }

  Flow exec_for(const Stmt& s) {
    List items = iterate(eval(*s.expr), s.pos);
    frames_.emplace_back();
    if (s.cond) {
      List kept;
      for (const Value& x : items) {
        assign_targets(s.targets, x, s.pos);
        if (truthy(eval(*s.cond))) kept.push_back(x);
      }
      items = std::move(kept);
    }
    auto state = std::make_shared<LoopState>();
    state->length = static_cast<int64_t>(items.size());
    for (size_t k = 0; k < items.size(); ++k) {
      Nest tick(*this, s.pos);  // an iteration is a step, even with an empty body
      state->index0 = static_cast<int64_t>(k);
      state->previtem = k > 0 ? items[k - 1] : Value::undefined("there is no previous item");
      state->nextitem = k + 1 < items.size() ? items[k + 1] : Value::undefined("there is no next item");
      Value loop;
      loop.kind = Kind::kLoop;
      loop.loop = state;
      frames_.emplace_back();  // each iteration starts from a fresh scope, as in jinja2
      assign("loop", loop);
      assign_targets(s.targets, items[k], s.pos);
      const Flow f = exec(s.bodies[0]);
      frames_.pop_back();
      if (f == Flow::kBreak) break;
    }
    frames_.pop_back();
    if (items.empty()) return exec(s.bodies[1]);
    return Flow::kNormal;
  }

  // ---- expressions ----
  Args eval_args(const Expr& e, size_t first) {
    Args a;
    for (size_t k = first; k < e.args.size(); ++k) a.positional.push_back(eval(*e.args[k]));
    for (const auto& [name, x] : e.kwargs) a.keyword.emplace_back(name, eval(*x));
    return a;
  }

  Value eval(const Expr& e) {
    Nest n(*this, e.pos);
    switch (e.kind) {
      case ExprKind::kLiteral: return e.value;
      case ExprKind::kName: return lookup(e.name, e.pos);
      case ExprKind::kList:
      case ExprKind::kTuple: {
        List l;
        for (const ExprPtr& x : e.args) l.push_back(eval(*x));
        Value v = checked_depth(Value::make_list(std::move(l)), e.pos);
        if (e.kind == ExprKind::kTuple) v.form = ListForm::kTuple;
        return v;
      }
      case ExprKind::kDict: {
        Dict d;
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) d.set(eval(*e.args[k]), eval(*e.args[k + 1]));
        return checked_depth(Value::make_dict(std::move(d)), e.pos);
      }
      case ExprKind::kAttr: return get_attr(eval(*e.args[0]), e.name, e.pos);
      case ExprKind::kItem: return get_item(eval(*e.args[0]), eval(*e.args[1]), e.pos);
      case ExprKind::kSlice: {
        Value obj = eval(*e.args[0]);
        if (obj.is_undefined()) fail(e.pos, obj.undefined_hint);
        Value bounds[3];
        const Value* given[3] = {nullptr, nullptr, nullptr};
        for (int k = 0; k < 3; ++k) {
          if (e.args[k + 1]) {
            bounds[k] = eval(*e.args[k + 1]);
            given[k] = &bounds[k];
          }
        }
        return slice_of(obj, given, e.pos);
      }
      case ExprKind::kCall: return call(e);
      case ExprKind::kFilter:
        return call_filter(e.name, eval(*e.args[0]), eval_args(e, 1), e.pos, builtin_limits_);
      case ExprKind::kTest: {
        Value v = eval(*e.args[0]);
        return Value::boolean(call_test(e.name, v, eval_args(e, 1), e.pos) != e.negated);
      }
      case ExprKind::kNot: return Value::boolean(!truthy(eval(*e.args[0])));
      case ExprKind::kNeg:
      case ExprKind::kPos: {
        Value v = eval(*e.args[0]);
        if (v.is_undefined()) fail(e.pos, v.undefined_hint);
        if (!v.is_number())
          fail(e.pos, std::string("bad operand type for unary ") + (e.kind == ExprKind::kNeg ? "-" : "+") +
                          ": '" + type_name(v) + "'");
        if (e.kind == ExprKind::kPos) return v.kind == Kind::kBool ? Value::integer(v.b) : v;
        if (v.kind == Kind::kFloat) return Value::number(-v.f);
        int64_t i = v.kind == Kind::kBool ? v.b : v.i;
        if (i == INT64_MIN) fail(e.pos, "integer overflow");
        return Value::integer(-i);
      }
      case ExprKind::kAnd: {
        Value l = eval(*e.args[0]);
        return truthy(l) ? eval(*e.args[1]) : l;
      }
      case ExprKind::kOr: {
        Value l = eval(*e.args[0]);
        return truthy(l) ? l : eval(*e.args[1]);
      }
      case ExprKind::kBinary: {
        Value l = eval(*e.args[0]);
        return binary_op(e.name, l, eval(*e.args[1]), e.pos, builtin_limits_);
      }
      case ExprKind::kCompare: {
        Value l = eval(*e.args[0]);
        for (size_t k = 0; k < e.ops.size(); ++k) {
          Value r = eval(*e.args[k + 1]);
          if (!compare(e.ops[k], l, r, e.pos)) return Value::boolean(false);
          l = std::move(r);
        }
        return Value::boolean(true);
      }
      case ExprKind::kCondition:
        if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
        return e.args[2] ? eval(*e.args[2])
                         : Value::undefined("the condition was false and there is no else");
    }
    return Value::undefined();
  }

  bool compare(const std::string& op, const Value& l, const Value& r, uint32_t pos) {
    if (op == "==") return equal(l, r);
    if (op == "!=") return !equal(l, r);
    if (op == "<") return less(l, r, pos);
    if (op == ">") return less(r, l, pos);
    if (op == "<=") return !less(r, l, pos);
    if (op == ">=") return !less(l, r, pos);
    bool in = call_test("in", l, Args{{r}, {}}, pos);
    return op == "in" ? in : !in;
  }

  Value call(const Expr& e) {
    Value callee = eval(*e.args[0]);
    if (callee.is_undefined()) fail(e.pos, callee.undefined_hint);
    if (callee.kind != Kind::kCallable)
      fail(e.pos, std::string("'") + type_name(callee) + "' object is not callable");
    Args a = eval_args(e, 1);
    const Callable& c = *callee.fn;
    switch (c.type) {
      case Callable::Type::kMethod: return call_method(c.self, c.name, a, e.pos, builtin_limits_);
      case Callable::Type::kMacro: return call_macro(*c.macro, a, e.pos);
      case Callable::Type::kGlobal: return call_global(c.name, a, e.pos, now_);
    }
    return Value::undefined();
  }

  Value call_macro(const Stmt& m, const Args& a, uint32_t pos) {
    if (call_depth_ >= limits_.max_call_depth)
      fail(pos,
           "macro calls nested deeper than " + std::to_string(limits_.max_call_depth) + " (max_call_depth)");
    if (a.positional.size() > m.targets.size())
      fail(pos,
           "macro '" + m.name + "' takes not more than " + std::to_string(m.targets.size()) + " argument(s)");
    for (const auto& [k, v] : a.keyword) {
      if (std::find(m.targets.begin(), m.targets.end(), k) == m.targets.end())
        fail(pos, "macro '" + m.name + "' takes no keyword argument '" + k + "'");
    }
    const size_t saved_floor = floor_;
    frames_.emplace_back();
    floor_ = frames_.size() - 1;
    ++call_depth_;
    for (size_t k = 0; k < m.targets.size(); ++k) {
      const Value* given = a.get(k, m.targets[k]);
      if (given) {
        assign(m.targets[k], *given);
      } else if (m.defaults[k]) {
        assign(m.targets[k], eval(*m.defaults[k]));
      } else {
        assign(m.targets[k], Value::undefined("parameter '" + m.targets[k] + "' was not provided"));
      }
    }
    Str out = capture(m.bodies[0]);
    --call_depth_;
    frames_.pop_back();
    floor_ = saved_floor;
    return Value::string(std::move(out));
  }

  const Variables& vars_;
  const RenderLimits& limits_;
  const std::optional<std::time_t> now_;
  BuiltinLimits builtin_limits_;
  std::vector<std::vector<std::pair<std::string, Value>>> frames_;  // [0]: the template's top level
  size_t floor_ = 0;  // the innermost macro's frame: frames below it (but [0]) are hidden
  std::vector<Str*> out_;
  uint64_t steps_ = 0;
  int nesting_ = 0;
  int call_depth_ = 0;
  Clock::time_point deadline_;

 public:
  uint32_t pos_ = 0;  // the statement or expression evaluated last, for errors thrown without one
};

}  // namespace

std::vector<std::string> Template::names() const {
  std::vector<std::string> out;
  if (body_) collect_names(*body_, out);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

StatusOr<Template> Template::compile(std::string_view source) {
  if (source.size() > kMaxTemplateBytes) {
    return invalid_argument("chat template: " + std::to_string(source.size()) + " bytes; at most " +
                            std::to_string(kMaxTemplateBytes) + " are accepted");
  }
  auto lexed = lex(source);
  if (!lexed.ok()) return lexed.status();
  auto body = parse(*lexed);
  if (!body.ok()) return body.status();
  Template t;
  t.lexed_ = std::make_shared<const Lexed>(std::move(*lexed));
  t.body_ = std::make_shared<const Body>(std::move(*body));
  return t;
}

StatusOr<Str> Template::render(const Variables& vars, const RenderLimits& limits,
                               std::optional<std::time_t> now) const {
  Renderer r(vars, limits, now);
  try {
    return r.run(*body_);
  } catch (const RenderError& e) {
    const uint32_t pos = e.pos == kUnknownPos ? r.pos_ : e.pos;
    return invalid_argument("chat template: " + position_text(lexed_->source, pos) + ": " + e.what);
  } catch (const TemplateRaised& e) {
    return invalid_argument("chat template: " + position_text(lexed_->source, e.pos) +
                            ": raise_exception: " + e.message);
  }
}

}  // namespace nanoserve::jinja
