#include "tokenizer/jinja_render.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>

#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_parser.h"

namespace nanoserve::jinja {

namespace {

// raise_exception(msg) from the template: reported as the template's own message.
struct TemplateRaised {
  uint32_t pos;
  std::string message;
};

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
        Value v = checked(Value::make_list(std::move(l)), e.pos);
        if (e.kind == ExprKind::kTuple) v.form = ListForm::kTuple;
        return v;
      }
      case ExprKind::kDict: {
        Dict d;
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) d.set(eval(*e.args[k]), eval(*e.args[k + 1]));
        return checked(Value::make_dict(std::move(d)), e.pos);
      }
      case ExprKind::kAttr: return get_attr(eval(*e.args[0]), e.name, e.pos);
      case ExprKind::kItem: return get_item(eval(*e.args[0]), eval(*e.args[1]), e.pos);
      case ExprKind::kSlice: return slice(e);
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
      case ExprKind::kBinary: return binary(e.name, eval(*e.args[0]), eval(*e.args[1]), e.pos);
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

  Value checked(Value v, uint32_t pos) {
    if (v.depth > kMaxValueDepth)
      fail(pos, "a list or dict nests deeper than " + std::to_string(kMaxValueDepth));
    return v;
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

  static double dbl(const Value& v) {
    return v.kind == Kind::kFloat ? v.f : static_cast<double>(v.kind == Kind::kBool ? v.b : v.i);
  }
  static int64_t whole(const Value& v) { return v.kind == Kind::kBool ? v.b : v.i; }

  Value repeat(const Value& seq, int64_t times, uint32_t pos) {
    if (times <= 0) return seq.is_string() ? Value::template_string("") : Value::make_seq({}, seq.form);
    size_t unit = seq.is_string() ? seq.text().size() : seq.list->size() * 16;
    if (unit != 0 && static_cast<uint64_t>(times) > limits_.max_output_bytes / unit)
      fail(pos, "the repeated value would be larger than max_output_bytes");
    if (seq.is_string()) {
      Str out;
      for (int64_t k = 0; k < times; ++k) out.append(*seq.s);
      Value r = Value::string(std::move(out));
      r.markup = seq.markup;
      return r;
    }
    List out;
    for (int64_t k = 0; k < times; ++k) out.insert(out.end(), seq.list->begin(), seq.list->end());
    return Value::make_seq(std::move(out), seq.form);
  }

  Value binary(const std::string& op, const Value& l, const Value& r, uint32_t pos) {
    if (op == "~") {
      Str s = to_str(l);
      s.append(to_str(r));
      if (s.text.size() > limits_.max_output_bytes) fail(pos, "a string is larger than max_output_bytes");
      return Value::string(std::move(s));
    }
    if (l.is_undefined()) fail(pos, l.undefined_hint);
    if (r.is_undefined()) fail(pos, r.undefined_hint);
    const bool nums = l.is_number() && r.is_number();
    const bool ints = nums && l.kind != Kind::kFloat && r.kind != Kind::kFloat;
    auto unsupported = [&]() {
      fail(pos,
           "unsupported operand type(s) for " + op + ": '" + type_name(l) + "' and '" + type_name(r) + "'");
    };
    int64_t out = 0;
    if (op == "+") {
      if (ints) {
        if (__builtin_add_overflow(whole(l), whole(r), &out)) fail(pos, "integer overflow");
        return Value::integer(out);
      }
      if (nums) return Value::number(dbl(l) + dbl(r));
      if (l.is_string() && r.is_string()) {
        if (l.markup != r.markup) {  // Markup + str escapes the str (either side)
          Value sum = binary(op, html_escape(l), html_escape(r), pos);
          sum.markup = true;
          return sum;
        }
        if (l.text().size() + r.text().size() > limits_.max_output_bytes)
          fail(pos, "a string is larger than max_output_bytes");
        Str s = *l.s;
        s.append(*r.s);
        Value sum = Value::string(std::move(s));
        sum.markup = l.markup;
        return sum;
      }
      if (l.is_sequence() && r.is_sequence() && l.form == r.form) {
        if (l.list->size() + r.list->size() > builtin_limits_.max_list_items) fail(pos, "a list is too long");
        List x = *l.list;
        x.insert(x.end(), r.list->begin(), r.list->end());
        return Value::make_seq(std::move(x), l.form);
      }
      unsupported();
    }
    if (op == "*") {
      if (ints) {
        if (__builtin_mul_overflow(whole(l), whole(r), &out)) fail(pos, "integer overflow");
        return Value::integer(out);
      }
      if (nums) return Value::number(dbl(l) * dbl(r));
      if ((l.is_string() || l.is_sequence()) && (r.kind == Kind::kInt || r.kind == Kind::kBool))
        return repeat(l, whole(r), pos);
      if ((r.is_string() || r.is_sequence()) && (l.kind == Kind::kInt || l.kind == Kind::kBool))
        return repeat(r, whole(l), pos);
      unsupported();
    }
    if (!nums) {
      if (op == "%" && l.is_string()) fail(pos, "'%' string formatting is not supported");
      unsupported();
    }
    if (op == "-") {
      if (ints) {
        if (__builtin_sub_overflow(whole(l), whole(r), &out)) fail(pos, "integer overflow");
        return Value::integer(out);
      }
      return Value::number(dbl(l) - dbl(r));
    }
    if ((op == "/" || op == "//" || op == "%") && dbl(r) == 0) {
      fail(pos, ints ? (op == "/" ? "division by zero" : "integer division or modulo by zero")
                     : "float division by zero");
    }
    if (op == "/") return Value::number(dbl(l) / dbl(r));
    if (op == "//" || op == "%") {
      if (ints) {
        int64_t a = whole(l), b = whole(r);
        if (a == INT64_MIN && b == -1) fail(pos, "integer overflow");
        int64_t q = a / b, m = a % b;
        if (m != 0 && ((m < 0) != (b < 0))) {
          --q;
          m += b;
        }
        return Value::integer(op == "//" ? q : m);
      }
      double a = dbl(l), b = dbl(r);
      if (op == "//") return Value::number(std::floor(a / b));
      double m = std::fmod(a, b);
      if (m != 0 && ((m < 0) != (b < 0))) m += b;
      return Value::number(m);
    }
    if (op == "**") {
      if (ints && whole(r) >= 0) {
        int64_t base = whole(l), result = 1;
        for (int64_t k = 0; k < whole(r); ++k) {
          if (__builtin_mul_overflow(result, base, &result)) fail(pos, "integer overflow");
          if (result == 0 || result == 1) break;
        }
        if (result == 1 && base == -1 && (whole(r) & 1)) result = -1;
        return Value::integer(result);
      }
      return Value::number(std::pow(dbl(l), dbl(r)));
    }
    unsupported();
    return Value::undefined();
  }

  Value slice(const Expr& e) {
    Value obj = eval(*e.args[0]);
    if (obj.is_undefined()) fail(e.pos, obj.undefined_hint);
    int64_t bound[3] = {0, 0, 1};
    bool given[3] = {false, false, false};
    for (int k = 0; k < 3; ++k) {
      if (!e.args[k + 1]) continue;
      Value v = eval(*e.args[k + 1]);
      if (v.kind == Kind::kNone) continue;
      if (v.kind != Kind::kInt && v.kind != Kind::kBool)
        fail(e.pos, "slice indices must be integers or None");
      bound[k] = whole(v);
      given[k] = true;
    }
    const int64_t step = bound[2];
    if (step == 0) fail(e.pos, "slice step cannot be zero");
    if (!obj.is_sequence() && !obj.is_string())
      fail(e.pos, std::string("'") + type_name(obj) + "' object is not subscriptable");
    List items = obj.is_string() ? iterate(obj, e.pos) : *obj.list;
    const int64_t n = static_cast<int64_t>(items.size());
    // Python's slice.indices().
    auto clamp = [&](int64_t v, bool is_given, int64_t dflt) {
      if (!is_given) return dflt;
      if (v < 0) v += n;
      if (step > 0) return std::clamp<int64_t>(v, 0, n);
      return std::clamp<int64_t>(v, -1, n - 1);
    };
    int64_t start = clamp(bound[0], given[0], step > 0 ? 0 : n - 1);
    int64_t stop = clamp(bound[1], given[1], step > 0 ? n : -1);
    List out;
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step)
      out.push_back(items[static_cast<size_t>(k)]);
    if (!obj.is_string()) return Value::make_seq(std::move(out), obj.form);
    Str s;
    for (const Value& c : out) s.append(*c.s);
    Value r = Value::string(std::move(s));
    r.markup = obj.markup;
    return r;
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
      case Callable::Type::kGlobal: return call_global(c.name, a, e.pos);
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

  Value call_global(const std::string& name, const Args& a, uint32_t pos) {
    if (name == "raise_exception") {
      const Value* msg = a.get(0, "message");
      throw TemplateRaised{pos, msg ? to_str(*msg).text : std::string()};
    }
    if (name == "range") {
      int64_t b[3] = {0, 0, 1};
      const size_t n = a.positional.size();
      if (n < 1 || n > 3 || !a.keyword.empty()) fail(pos, "range expected 1 to 3 integer arguments");
      for (size_t k = 0; k < n; ++k) {
        const Value& v = a.positional[k];
        if (v.kind != Kind::kInt && v.kind != Kind::kBool) fail(pos, "range: arguments must be integers");
      }
      if (n == 1) {
        b[1] = whole(a.positional[0]);
      } else {
        b[0] = whole(a.positional[0]);
        b[1] = whole(a.positional[1]);
        if (n == 3) b[2] = whole(a.positional[2]);
      }
      if (b[2] == 0) fail(pos, "range() arg 3 must not be zero");
      const double count =
          std::ceil((static_cast<double>(b[1]) - static_cast<double>(b[0])) / static_cast<double>(b[2]));
      if (count > 100000) fail(pos, "range too big, maximum size for range is 100000");
      List out;
      for (int64_t k = b[0]; b[2] > 0 ? k < b[1] : k > b[1]; k += b[2]) out.push_back(Value::integer(k));
      return Value::make_list(std::move(out));
    }
    if (name == "namespace" || name == "dict") {
      Dict d;
      if (!a.positional.empty()) {
        if (a.positional.size() > 1 || a.positional[0].kind != Kind::kDict)
          fail(pos, name + "() takes a dict and keyword arguments");
        d = *a.positional[0].dict;
      }
      for (const auto& [k, v] : a.keyword) d.set(Value::template_string(k), v);
      Value v = checked(Value::make_dict(std::move(d)), pos);
      if (name == "namespace") v.kind = Kind::kNamespace;
      return v;
    }
    if (name == "strftime_now") {
      const Value* f = a.get(0, "format");
      if (f == nullptr || !f->is_string()) fail(pos, "strftime_now expects a format string");
      std::tm tm{};
      if (now_) {
        gmtime_r(&*now_, &tm);
      } else {
        std::time_t now = std::time(nullptr);
        localtime_r(&now, &tm);
      }
      char buf[512];
      size_t len = std::strftime(buf, sizeof(buf), f->text().c_str(), &tm);
      return Value::template_string(std::string(buf, len));
    }
    fail(pos, "unknown function '" + name + "'");
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

void collect_names(const Expr& e, std::vector<std::string>& out) {
  if (e.kind == ExprKind::kName) out.push_back(e.name);
  for (const ExprPtr& x : e.args) {
    if (x) collect_names(*x, out);
  }
  for (const auto& kv : e.kwargs) collect_names(*kv.second, out);
}

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
