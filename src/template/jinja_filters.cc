// Jinja's built-in filters and tests that chat templates use, with jinja2's
// semantics (and transformers' tojson: json.dumps with ensure_ascii=False).

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "template/jinja_builtins.h"

namespace nanoserve::jinja {

namespace {

bool flag(const Value* v, bool dflt) {
  return v == nullptr ? dflt : truthy(*v);
}

// Jinja's attribute getter: "a.b.0" looks up each part as an item (digits as an index).
Value attribute_path(const Value& obj, const Value& path, uint32_t pos) {
  if (path.kind == Kind::kInt) return get_item(obj, path, pos);
  if (!path.is_string()) fail(pos, "attribute: expected a string");
  Value v = obj;
  std::string_view p = path.text();
  while (true) {
    size_t dot = p.find('.');
    std::string part(p.substr(0, dot));
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c));
    });
    v = digits ? get_item(v, Value::integer(std::atoll(part.c_str())), pos)
               : get_item(v, Value::template_string(part), pos);
    if (dot == std::string_view::npos) return v;
    p.remove_prefix(dot + 1);
  }
}

// The key Jinja sorts and dedups by: strings lowercased unless case_sensitive.
Value fold(const Value& v, bool case_sensitive) {
  if (case_sensitive || !v.is_string()) return v;
  return Value::string(lower(*v.s));
}

// Python's int(str): optional blanks and sign, digits with '_' between them.
bool parse_int(std::string_view s, int64_t& out) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  std::string digits;
  size_t k = 0;
  if (k < s.size() && (s[k] == '+' || s[k] == '-')) digits += s[k++];
  if (k >= s.size()) return false;
  for (; k < s.size(); ++k) {
    if (s[k] == '_' && k > 0 && std::isdigit(static_cast<unsigned char>(s[k - 1])) && k + 1 < s.size())
      continue;
    if (!std::isdigit(static_cast<unsigned char>(s[k]))) return false;
    digits += s[k];
  }
  errno = 0;
  long long v = std::strtoll(digits.c_str(), nullptr, 10);
  if (errno != 0) return false;
  out = v;
  return true;
}

bool parse_float(std::string_view s, double& out) {
  std::string t(s);
  char* end = nullptr;
  const char* b = t.c_str();
  while (*b && std::isspace(static_cast<unsigned char>(*b))) ++b;
  if (*b == 0) return false;
  std::string lower(b);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.find("0x") != std::string::npos) return false;  // strtod reads hex; Python's float() does not
  out = std::strtod(b, &end);
  while (*end && std::isspace(static_cast<unsigned char>(*end))) ++end;
  return *end == 0;
}

double python_round(double x, int64_t digits) {
  if (!std::isfinite(x) || digits > 300) return x;
  if (digits == 0) return std::nearbyint(x);
  if (digits < 0) {
    double p = std::pow(10.0, static_cast<double>(-digits));
    return std::nearbyint(x / p) * p;
  }
  char buf[512];
  std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(digits), x);  // correctly rounded, as Python does
  return std::strtod(buf, nullptr);
}

Str indent(const Str& s, const Value* width, bool first, bool blank, uint32_t pos) {
  std::string ind;
  if (width != nullptr && width->is_string()) {
    ind = width->text();
  } else {
    int64_t w = width == nullptr ? 4 : width->kind == Kind::kInt ? width->i : -1;
    if (w < 0 || w > 4096) fail(pos, "indent: width must be an integer in [0, 4096] or a string");
    ind.assign(static_cast<size_t>(w), ' ');
  }
  Str src = s;
  src.append_template("\n");
  List lines = *call_method(Value::string(src), "splitlines", {}, pos, {}).list;
  Str out;
  for (size_t k = 0; k < lines.size(); ++k) {
    const Str& line = *lines[k].s;
    if (k > 0) out.append_template("\n");
    if (k == 0 ? first : (blank || !line.text.empty())) out.append_template(ind);
    out.append(line);
  }
  if (first && lines.empty()) out.append_template(ind);
  return out;
}

Value sort_list(List items, bool reverse, bool case_sensitive, const Value* attribute, uint32_t pos) {
  auto key = [&](const Value& v) {
    return fold(attribute ? attribute_path(v, *attribute, pos) : v, case_sensitive);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    return reverse ? less(key(b), key(a), pos) : less(key(a), key(b), pos);
  });
  return Value::make_list(std::move(items));
}

// jinja2 3.1's built-in filters and tests, with transformers' tojson.
constexpr std::string_view kJinja2Filters[] = {
    "abs",    "attr",       "batch",       "capitalize", "center",   "count",
    "d",      "default",    "dictsort",    "e",          "escape",   "filesizeformat",
    "first",  "float",      "forceescape", "format",     "groupby",  "indent",
    "int",    "items",      "join",        "last",       "length",   "list",
    "lower",  "map",        "max",         "min",        "pprint",   "random",
    "reject", "rejectattr", "replace",     "reverse",    "round",    "safe",
    "select", "selectattr", "slice",       "sort",       "string",   "striptags",
    "sum",    "title",      "tojson",      "trim",       "truncate", "unique",
    "upper",  "urlencode",  "urlize",      "wordcount",  "wordwrap", "xmlattr"};
constexpr std::string_view kJinja2Tests[] = {
    "!=",       "<",           "<=",          "==",      ">",       ">=",        "boolean",  "callable",
    "defined",  "divisibleby", "eq",          "equalto", "escaped", "even",      "false",    "filter",
    "float",    "ge",          "greaterthan", "gt",      "in",      "integer",   "iterable", "le",
    "lessthan", "lower",       "lt",          "mapping", "ne",      "none",      "number",   "odd",
    "sameas",   "sequence",    "string",      "test",    "true",    "undefined", "upper"};

}  // namespace

bool jinja2_has_filter(std::string_view name) {
  return std::find(std::begin(kJinja2Filters), std::end(kJinja2Filters), name) != std::end(kJinja2Filters);
}

bool jinja2_has_test(std::string_view name) {
  return std::find(std::begin(kJinja2Tests), std::end(kJinja2Tests), name) != std::end(kJinja2Tests);
}

Value call_filter(const std::string& name, const Value& v, const Args& a, uint32_t pos,
                  const BuiltinLimits& limits) {
  const Value* a0 = a.get(0, "");
  // The string filters take str(value), so an undefined value is "" (indent, which adds to its
  // input, and int/float, which convert it, fail on it as jinja2 does).
  auto need_string = [&]() -> Str { return to_str(v); };
  auto fail_undefined = [&]() {
    fail(pos, name + ": " + (v.undefined_hint.empty() ? "the value is undefined" : v.undefined_hint));
  };
  // map, select, reject, selectattr, rejectattr: jinja2 iterates only a true value (none: nothing).
  auto items_if_true = [&]() { return truthy(v) ? iterate(v, pos) : List{}; };
  // The filters that return a Markup for a Markup (markupsafe's own str methods).
  auto keep_markup = [&](Str s) {
    Value r = Value::string(std::move(s));
    r.markup = v.is_string() && v.markup;
    return r;
  };
  if (name == "safe") {
    Value r = Value::string(to_str(v));
    r.markup = true;
    return r;
  }
  if (name == "trim") return keep_markup(strip(need_string(), a.get(0, "chars"), 'b'));
  if (name == "upper") return keep_markup(upper(need_string()));
  if (name == "lower") return keep_markup(lower(need_string()));
  if (name == "title") return Value::string(title(need_string(), false));
  if (name == "capitalize") return keep_markup(capitalize(need_string()));
  if (name == "string") return keep_markup(to_str(v));
  if (name == "length" || name == "count") return Value::integer(length(v, pos));
  if (name == "e" || name == "escape") return html_escape(v);
  if (name == "forceescape") return html_escape(Value::string(to_str(v)));
  if (name == "default" || name == "d") {
    bool use = v.is_undefined() || (flag(a.get(1, "boolean"), false) && !truthy(v));
    if (!use) return v;
    const Value* d = a.get(0, "default_value");
    return d ? *d : Value::template_string("");
  }
  if (name == "tojson") {
    // transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
    static constexpr const char* kParams[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
    for (const auto& [k, x] : a.keyword) {
      if (std::find(std::begin(kParams), std::end(kParams), k) == std::end(kParams))
        fail(pos, "tojson: unexpected keyword argument '" + k + "'");
    }
    if (a.positional.size() > 4) fail(pos, "tojson: too many arguments");
    JsonOptions o;
    o.ensure_ascii = flag(a.get(0, "ensure_ascii"), false);
    const Value* ind = a.get(1, "indent");
    if (ind != nullptr && ind->kind != Kind::kNone) {
      if (ind->kind != Kind::kInt || ind->i < 0 || ind->i > 64)
        fail(pos, "tojson: indent must be an integer in [0, 64]");
      o.indent = static_cast<int>(ind->i);
    }
    const Value* seps = a.get(2, "separators");
    if (seps != nullptr && seps->kind != Kind::kNone) {
      if (!seps->is_sequence() || seps->list->size() != 2 || !(*seps->list)[0].is_string() ||
          !(*seps->list)[1].is_string())
        fail(pos, "tojson: separators must be a pair of strings");
      o.separators.emplace((*seps->list)[0].text(), (*seps->list)[1].text());
    }
    o.sort_keys = flag(a.get(3, "sort_keys"), false);
    std::string out, error;
    if (!to_json(v, o, out, error)) fail(pos, "tojson: " + error);
    Str s;  // JSON of the caller's data is the caller's text
    if (to_str(v).any_caller()) {
      s.append_caller(out);
    } else {
      s.text = std::move(out);
    }
    return Value::string(std::move(s));
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::make_seq({}, ListForm::kGenerator);
    if (v.kind != Kind::kDict) fail(pos, "items: Can only get item pairs from a mapping.");
    List out;
    for (const auto& [k, x] : v.dict->items) out.push_back(Value::make_tuple({k, x}));
    return Value::make_seq(std::move(out), ListForm::kGenerator);
  }
  if (name == "list") return Value::make_list(iterate(v, pos));
  if (name == "first") {
    if (v.is_iterator()) {  // next(): takes one item
      if (*v.consumed >= v.list->size()) return Value::undefined("No first item, sequence was empty.");
      return (*v.list)[(*v.consumed)++];
    }
    List items = iterate(v, pos);
    if (items.empty()) return Value::undefined("No first item, sequence was empty.");
    return items.front();
  }
  if (name == "last") {
    if (v.is_iterator()) fail(pos, std::string("'") + type_name(v) + "' object is not reversible");
    List items = iterate(v, pos);
    if (items.empty()) return Value::undefined("No last item, sequence was empty.");
    return items.back();
  }
  if (name == "reverse") {
    if (v.is_string()) {
      List chars = iterate(v, pos);
      Str out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) out.append(*it->s);
      return keep_markup(std::move(out));
    }
    // reversed(x) where Python has it (an iterator), else list(x) reversed.
    const bool reversible =
        v.kind == Kind::kDict || v.is_undefined() || (v.kind == Kind::kList && !v.is_iterator());
    List items = iterate(v, pos);
    std::reverse(items.begin(), items.end());
    return reversible ? Value::make_seq(std::move(items), ListForm::kReversed)
                      : Value::make_list(std::move(items));
  }
  if (name == "join") {
    List items = iterate(v, pos);
    const Value* attr = a.get(1, "attribute");
    const Value* sep = a.get(0, "d");
    Str d = sep ? to_str(*sep) : Str{};
    Str out;
    for (size_t k = 0; k < items.size(); ++k) {
      if (k) out.append(d);
      out.append(to_str(attr ? attribute_path(items[k], *attr, pos) : items[k]));
      if (out.text.size() > limits.max_string_bytes) fail(pos, "join: the result is too large");
    }
    return Value::string(std::move(out));
  }
  if (name == "map") {
    List items = items_if_true(), out;
    const Value* attr = a.get(99, "attribute");
    if (attr != nullptr) {
      const Value* dflt = a.get(99, "default");
      for (const Value& x : items) {
        Value y = attribute_path(x, *attr, pos);
        out.push_back(y.is_undefined() && dflt ? *dflt : y);
      }
    } else {
      if (a0 == nullptr || !a0->is_string()) fail(pos, "map: expected a filter name or attribute=");
      Args rest{{a.positional.begin() + 1, a.positional.end()}, a.keyword};
      for (const Value& x : items) out.push_back(call_filter(a0->text(), x, rest, pos, limits));
    }
    return Value::make_seq(std::move(out), ListForm::kGenerator);
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    const bool attr_form = name.size() > 6;
    const bool keep = name[0] == 's';
    List items = items_if_true(), out;
    size_t first = attr_form ? 1 : 0;
    if (attr_form && a0 == nullptr) fail(pos, name + ": expected an attribute name");
    const Value* test = a.get(first, "");
    Args rest{{a.positional.begin() + std::min(a.positional.size(), first + 1), a.positional.end()},
              a.keyword};
    for (const Value& x : items) {
      Value y = attr_form ? attribute_path(x, *a0, pos) : x;
      bool ok = test == nullptr
                    ? truthy(y)
                    : call_test(test->is_string() ? test->text() : std::string("?"), y, rest, pos);
      if (ok == keep) out.push_back(x);
    }
    return Value::make_seq(std::move(out), ListForm::kGenerator);
  }
  if (name == "unique") {
    const bool cs = flag(a.get(0, "case_sensitive"), false);
    const Value* attr = a.get(1, "attribute");
    List out, seen, items = iterate(v, pos);
    if (items.size() > 10000) fail(pos, "unique: more than 10000 items");  // the scan below is quadratic
    for (const Value& x : items) {
      Value k = fold(attr ? attribute_path(x, *attr, pos) : x, cs);
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, k); })) {
        seen.push_back(k);
        out.push_back(x);
      }
    }
    return Value::make_seq(std::move(out), ListForm::kGenerator);
  }
  if (name == "dictsort") {
    if (!v.is_mapping()) fail(pos, "dictsort: expected a mapping");
    const bool cs = flag(a.get(0, "case_sensitive"), false);
    const Value* by = a.get(1, "by");
    const bool by_value = by && by->is_string() && by->text() == "value";
    if (by && !by_value && !(by->is_string() && by->text() == "key"))
      fail(pos, "dictsort: 'by' must be 'key' or 'value'");
    List items;
    for (const auto& [k, x] : v.dict->items) items.push_back(Value::make_tuple({k, x}));
    Value index = Value::integer(by_value ? 1 : 0);
    return sort_list(std::move(items), flag(a.get(2, "reverse"), false), cs, &index, pos);
  }
  if (name == "sort") {
    return sort_list(iterate(v, pos), flag(a.get(0, "reverse"), false),
                     flag(a.get(1, "case_sensitive"), false), a.get(2, "attribute"), pos);
  }
  if (name == "min" || name == "max") {
    List items = iterate(v, pos);
    if (items.empty())
      return Value::undefined("No " + std::string(name == "min" ? "smallest" : "largest") +
                              " item, sequence was empty.");
    const bool cs = flag(a.get(0, "case_sensitive"), false);
    const Value* attr = a.get(1, "attribute");
    auto key = [&](const Value& x) { return fold(attr ? attribute_path(x, *attr, pos) : x, cs); };
    Value best = items[0];
    for (size_t k = 1; k < items.size(); ++k) {
      if (name == "min" ? less(key(items[k]), key(best), pos) : less(key(best), key(items[k]), pos))
        best = items[k];
    }
    return best;
  }
  if (name == "sum") {
    const Value* attr = a.get(0, "attribute");
    const Value* start = a.get(1, "start");
    Value total = start ? *start : Value::integer(0);
    for (const Value& x : iterate(v, pos)) {
      Value y = attr ? attribute_path(x, *attr, pos) : x;
      if (!y.is_number() || !total.is_number()) fail(pos, "sum: expected numbers");
      if (y.kind == Kind::kFloat || total.kind == Kind::kFloat) {
        auto d = [](const Value& z) {
          return z.kind == Kind::kFloat ? z.f : static_cast<double>(z.kind == Kind::kBool ? z.b : z.i);
        };
        total = Value::number(d(total) + d(y));
      } else {
        int64_t r;
        if (__builtin_add_overflow(total.kind == Kind::kBool ? total.b : total.i,
                                   y.kind == Kind::kBool ? y.b : y.i, &r))
          fail(pos, "sum: integer overflow");
        total = Value::integer(r);
      }
    }
    return total;
  }
  if ((name == "int" || name == "float") && v.is_undefined()) fail_undefined();
  if (name == "int") {
    const Value* d = a.get(0, "default");
    Value dflt = d ? *d : Value::integer(0);
    if (a.get(1, "base") != nullptr) fail(pos, "int: 'base' is not supported");
    int64_t i;
    double f;
    switch (v.kind) {
      case Kind::kInt: return v;
      case Kind::kBool: return Value::integer(v.b);
      case Kind::kFloat:
        if (!std::isfinite(v.f) || std::fabs(v.f) >= 9.2e18) return dflt;
        return Value::integer(static_cast<int64_t>(v.f));
      case Kind::kString:
        if (parse_int(v.text(), i)) return Value::integer(i);
        if (parse_float(v.text(), f) && std::isfinite(f) && std::fabs(f) < 9.2e18)
          return Value::integer(static_cast<int64_t>(f));
        return dflt;
      default: return dflt;
    }
  }
  if (name == "float") {
    const Value* d = a.get(0, "default");
    Value dflt = d ? *d : Value::number(0.0);
    double f;
    switch (v.kind) {
      case Kind::kFloat: return v;
      case Kind::kInt: return Value::number(static_cast<double>(v.i));
      case Kind::kBool: return Value::number(v.b ? 1.0 : 0.0);
      case Kind::kString: return parse_float(v.text(), f) ? Value::number(f) : dflt;
      default: return dflt;
    }
  }
  if (name == "abs") {
    if (v.kind == Kind::kInt) {
      if (v.i == INT64_MIN) fail(pos, "abs: integer overflow");
      return Value::integer(std::llabs(v.i));
    }
    if (v.kind == Kind::kBool) return Value::integer(v.b);
    if (v.kind == Kind::kFloat) return Value::number(std::fabs(v.f));
    fail(pos, std::string("bad operand type for abs(): '") + type_name(v) + "'");
  }
  if (name == "round") {
    const Value* p = a.get(0, "precision");
    int64_t digits = p == nullptr            ? 0
                     : p->kind == Kind::kInt ? p->i
                                             : (fail(pos, "round: precision must be an integer"), 0);
    const Value* m = a.get(1, "method");
    std::string method = m && m->is_string() ? m->text() : "common";
    if (method != "common" && method != "ceil" && method != "floor")
      fail(pos, "round: method must be common, ceil or floor");
    if (!v.is_number()) fail(pos, std::string("round: expected a number, got ") + type_name(v));
    double x = v.kind == Kind::kFloat ? v.f : static_cast<double>(v.kind == Kind::kBool ? v.b : v.i);
    if (method == "common") {
      if (v.kind != Kind::kFloat && digits >= 0) return Value::integer(v.kind == Kind::kBool ? v.b : v.i);
      return Value::number(python_round(x, digits));
    }
    double scale = std::pow(10.0, static_cast<double>(digits));
    return Value::number((method == "ceil" ? std::ceil(x * scale) : std::floor(x * scale)) / scale);
  }
  if (name == "replace") {
    const Value* from = a.get(0, "old");
    const Value* to = a.get(1, "new");
    if (from == nullptr || to == nullptr) fail(pos, "replace: expected old and new");
    const Value* count = a.get(2, "count");
    int64_t n = count == nullptr || count->kind == Kind::kNone ? -1
                : count->kind == Kind::kInt                    ? count->i
                                                               : -1;
    return Value::string(replace(need_string(), to_str(*from), to_str(*to), n, limits, pos));
  }
  if (name == "indent") {
    if (v.is_undefined()) fail_undefined();
    return keep_markup(indent(need_string(), a.get(0, "width"), flag(a.get(1, "first"), false),
                              flag(a.get(2, "blank"), false), pos));
  }
  if (name == "center") {
    Str s = need_string();
    const Value* w = a.get(0, "width");
    int64_t width = w == nullptr ? 80 : w->kind == Kind::kInt ? w->i : 80;
    int64_t n = static_cast<int64_t>(utf8_length(s.text));
    if (width > 4096) fail(pos, "center: width above 4096");
    if (width <= n) return keep_markup(std::move(s));
    int64_t left = (width - n) / 2 + ((width - n) & width & 1);
    Str out{std::string(static_cast<size_t>(left), ' '), {}};
    out.append(s);
    out.append_template(std::string(static_cast<size_t>(width - n - left), ' '));
    return keep_markup(std::move(out));
  }
  if (name == "attr") {
    if (a0 == nullptr || !a0->is_string()) fail(pos, "attr: expected an attribute name");
    return getattr_only(v, a0->text(), pos);
  }
  if (name == "wordcount") {
    int64_t n = 0;
    bool in_word = false;
    for (unsigned char c : need_string().text) {
      bool w = std::isalnum(c) || c == '_' || c >= 0x80;
      if (w && !in_word) ++n;
      in_word = w;
    }
    return Value::integer(n);
  }
  if (jinja2_has_filter(name)) fail(pos, "the filter '" + name + "' is not supported");
  fail(pos, "no filter named '" + name + "'");
}

bool call_test(const std::string& name, const Value& v, const Args& a, uint32_t pos) {
  const Value* a0 = a.get(0, "");
  auto need_arg = [&]() -> const Value& {
    if (a0 == nullptr) fail(pos, "the test '" + name + "' needs an argument");
    return *a0;
  };
  auto need_int = [&]() -> int64_t {
    if (v.kind != Kind::kInt && v.kind != Kind::kBool) {
      if (v.kind == Kind::kFloat) return static_cast<int64_t>(v.f);
      fail(pos, "the test '" + name + "' needs a number, got " + type_name(v));
    }
    return v.kind == Kind::kBool ? v.b : v.i;
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.kind == Kind::kNone;
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.kind == Kind::kDict;
  if (name == "iterable")
    return v.kind == Kind::kList || v.kind == Kind::kDict || v.is_string() || v.is_undefined();
  if (name == "sequence") return v.is_sequence() || v.kind == Kind::kDict || v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind == Kind::kInt;
  if (name == "float") return v.kind == Kind::kFloat;
  if (name == "boolean") return v.kind == Kind::kBool;
  if (name == "true") return v.kind == Kind::kBool && v.b;
  if (name == "false") return v.kind == Kind::kBool && !v.b;
  if (name == "callable") return v.kind == Kind::kCallable;
  if (name == "equalto" || name == "eq" || name == "==") return equal(v, need_arg());
  if (name == "ne" || name == "!=") return !equal(v, need_arg());
  if (name == "lt" || name == "lessthan" || name == "<") return less(v, need_arg(), pos);
  if (name == "gt" || name == "greaterthan" || name == ">") return less(need_arg(), v, pos);
  if (name == "le" || name == "<=") return !less(need_arg(), v, pos);
  if (name == "ge" || name == ">=") return !less(v, need_arg(), pos);
  if (name == "odd") return need_int() % 2 != 0;
  if (name == "even") return need_int() % 2 == 0;
  if (name == "divisibleby") {
    const Value& d = need_arg();
    if (d.kind != Kind::kInt || d.i == 0) fail(pos, "divisibleby: the divisor must be a non-zero integer");
    return need_int() % d.i == 0;
  }
  if (name == "in") {
    const Value& c = need_arg();
    if (c.is_string()) {
      if (!v.is_string()) fail(pos, "'in <string>' requires string as left operand");
      return c.text().find(v.text()) != std::string::npos;
    }
    if (c.kind == Kind::kDict) return c.dict->find(v) != nullptr;
    if (c.is_iterator()) {  // consumed up to the match
      while (*c.consumed < c.list->size()) {
        if (equal((*c.list)[(*c.consumed)++], v)) return true;
      }
      return false;
    }
    for (const Value& x : iterate(c, pos)) {
      if (equal(x, v)) return true;
    }
    return false;
  }
  if (name == "sameas") {
    const Value& o = need_arg();
    if (v.kind != o.kind) return false;
    switch (v.kind) {
      case Kind::kNone:
      case Kind::kUndefined: return true;
      case Kind::kBool: return v.b == o.b;
      case Kind::kInt: return v.i == o.i;
      case Kind::kString: return v.s == o.s;
      case Kind::kList: return v.list == o.list;
      default: return equal(v, o);
    }
  }
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    bool any = false;
    for (unsigned char c : v.text()) {
      if (std::isalpha(c)) {
        any = true;
        if (name == "lower" ? std::isupper(c) : std::islower(c)) return false;
      }
    }
    return any;
  }
  if (name == "escaped") return v.is_string() && v.markup;  // has __html__: a Markup
  if (jinja2_has_test(name)) fail(pos, "the test '" + name + "' is not supported");
  fail(pos, "no test named '" + name + "'");
}

}  // namespace nanoserve::jinja
