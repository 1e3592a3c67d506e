// Jinja's operators (Python's + - * / // % ** on numbers, strings and lists,
// `~`, slicing) and its global functions (range, namespace, dict,
// raise_exception, strftime_now), for the renderer (jinja_render.cc).

#include <algorithm>
#include <cmath>
#include <ctime>

#include "template/jinja_builtins.h"

namespace nanoserve::jinja {

namespace {

double dbl(const Value& v) {
  return v.kind == Kind::kFloat ? v.f : static_cast<double>(v.kind == Kind::kBool ? v.b : v.i);
}
int64_t whole(const Value& v) {
  return v.kind == Kind::kBool ? v.b : v.i;
}

Value repeat(const Value& seq, int64_t times, uint32_t pos, const BuiltinLimits& limits) {
  if (times <= 0) return seq.is_string() ? Value::template_string("") : Value::make_seq({}, seq.form);
  size_t unit = seq.is_string() ? seq.text().size() : seq.list->size() * 16;
  if (unit != 0 && static_cast<uint64_t>(times) > limits.max_string_bytes / unit)
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

}  // namespace

Value binary_op(const std::string& op, const Value& l, const Value& r, uint32_t pos,
                const BuiltinLimits& limits) {
  if (op == "~") {
    Str s = to_str(l);
    s.append(to_str(r));
    if (s.text.size() > limits.max_string_bytes) fail(pos, "a string is larger than max_output_bytes");
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
        Value sum = binary_op(op, html_escape(l), html_escape(r), pos, limits);
        sum.markup = true;
        return sum;
      }
      if (l.text().size() + r.text().size() > limits.max_string_bytes)
        fail(pos, "a string is larger than max_output_bytes");
      Str s = *l.s;
      s.append(*r.s);
      Value sum = Value::string(std::move(s));
      sum.markup = l.markup;
      return sum;
    }
    if (l.is_sequence() && r.is_sequence() && l.form == r.form) {
      if (l.list->size() + r.list->size() > limits.max_list_items) fail(pos, "a list is too long");
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
      return repeat(l, whole(r), pos, limits);
    if ((r.is_string() || r.is_sequence()) && (l.kind == Kind::kInt || l.kind == Kind::kBool))
      return repeat(r, whole(l), pos, limits);
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

Value slice_of(const Value& obj, const Value* const bounds[3], uint32_t pos) {
  int64_t bound[3] = {0, 0, 1};
  bool given[3] = {false, false, false};
  for (int k = 0; k < 3; ++k) {
    const Value* v = bounds[k];
    if (v == nullptr || v->kind == Kind::kNone) continue;
    if (v->kind != Kind::kInt && v->kind != Kind::kBool) fail(pos, "slice indices must be integers or None");
    bound[k] = whole(*v);
    given[k] = true;
  }
  const int64_t step = bound[2];
  if (step == 0) fail(pos, "slice step cannot be zero");
  if (!obj.is_sequence() && !obj.is_string())
    fail(pos, std::string("'") + type_name(obj) + "' object is not subscriptable");
  List items = obj.is_string() ? iterate(obj, pos) : *obj.list;
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

Value checked_depth(Value v, uint32_t pos) {
  if (v.depth > kMaxValueDepth)
    fail(pos, "a list or dict nests deeper than " + std::to_string(kMaxValueDepth));
  return v;
}

Value call_global(const std::string& name, const Args& a, uint32_t pos, std::optional<std::time_t> now) {
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
    Value v = checked_depth(Value::make_dict(std::move(d)), pos);
    if (name == "namespace") v.kind = Kind::kNamespace;
    return v;
  }
  if (name == "strftime_now") {
    const Value* f = a.get(0, "format");
    if (f == nullptr || !f->is_string()) fail(pos, "strftime_now expects a format string");
    std::tm tm{};
    if (now) {
      gmtime_r(&*now, &tm);
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

}  // namespace nanoserve::jinja
