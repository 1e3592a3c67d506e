// Attribute and item lookup, iteration, ordering, and the methods of str, dict
// and list that chat templates call (Python's semantics, ASCII case mapping).

#include <algorithm>
#include <cctype>

#include "template/jinja_builtins.h"

namespace nanoserve::jinja {

void fail(uint32_t pos, std::string what) {
  throw RenderError{pos, std::move(what)};
}

const Value* Args::get(size_t k, std::string_view name) const {
  if (k < positional.size()) return &positional[k];
  for (const auto& [n, v] : keyword) {
    if (n == name) return &v;
  }
  return nullptr;
}

Value bound_method(const Value& self, const std::string& name) {
  auto c = std::make_shared<Callable>();
  c->type = Callable::Type::kMethod;
  c->name = name;
  c->self = self;
  Value v;
  v.kind = Kind::kCallable;
  v.fn = std::move(c);
  return v;
}

namespace {

// Code point boundaries of s: offsets[k] is where code point k starts; offsets.back() == s.size().
std::vector<size_t> boundaries(std::string_view s) {
  std::vector<size_t> out;
  out.reserve(s.size() + 1);
  for (size_t k = 0; k < s.size(); k = utf8_offset(s.substr(k), 1) + k) out.push_back(k);
  out.push_back(s.size());
  return out;
}

std::string kind_object(const Value& v) {
  return std::string("'") + type_name(v) + " object'";
}

[[noreturn]] void fail_undefined(const Value& v, uint32_t pos) {
  fail(pos, v.undefined_hint.empty() ? "a value is undefined" : v.undefined_hint);
}

int64_t as_index(const Value& key) {
  return key.kind == Kind::kBool ? (key.b ? 1 : 0) : key.i;
}

}  // namespace

bool is_method(const Value& self, std::string_view name) {
  static constexpr std::string_view kStr[] = {"strip",      "lstrip",  "rstrip",  "split",   "startswith",
                                              "endswith",   "upper",   "lower",   "replace", "title",
                                              "capitalize", "format",  "join",    "find",    "count",
                                              "splitlines", "isdigit", "isalpha", "isspace", "rsplit"};
  static constexpr std::string_view kDict[] = {"get", "items", "keys", "values"};
  static constexpr std::string_view kList[] = {"index", "count"};
  auto in = [&](auto& set) { return std::find(std::begin(set), std::end(set), name) != std::end(set); };
  switch (self.kind) {
    case Kind::kString: return in(kStr);
    case Kind::kDict: return in(kDict);
    case Kind::kList: return self.is_sequence() && in(kList);
    case Kind::kLoop: return name == "cycle";
    default: return false;
  }
}

Value get_attr(const Value& obj, const std::string& name, uint32_t pos) {
  if (obj.is_undefined()) fail_undefined(obj, pos);
  if (obj.kind == Kind::kNamespace || obj.kind == Kind::kDict) {
    if (obj.kind == Kind::kDict && is_method(obj, name)) return bound_method(obj, name);
    if (const Value* v = obj.dict->find(name)) return *v;
    return Value::undefined(kind_object(obj) + " has no attribute '" + name + "'");
  }
  if (obj.kind == Kind::kLoop) {
    const LoopState& l = *obj.loop;
    if (name == "index") return Value::integer(l.index0 + 1);
    if (name == "index0") return Value::integer(l.index0);
    if (name == "revindex") return Value::integer(l.length - l.index0);
    if (name == "revindex0") return Value::integer(l.length - l.index0 - 1);
    if (name == "first") return Value::boolean(l.index0 == 0);
    if (name == "last") return Value::boolean(l.index0 + 1 == l.length);
    if (name == "length") return Value::integer(l.length);
    if (name == "previtem") return l.previtem;
    if (name == "nextitem") return l.nextitem;
    if (name == "depth") return Value::integer(1);
    if (name == "depth0") return Value::integer(0);
  }
  if (is_method(obj, name)) return bound_method(obj, name);
  return Value::undefined(kind_object(obj) + " has no attribute '" + name + "'");
}

Value getattr_only(const Value& obj, const std::string& name, uint32_t pos) {
  if (obj.kind == Kind::kDict) {
    if (is_method(obj, name)) return bound_method(obj, name);
    return Value::undefined(kind_object(obj) + " has no attribute '" + name + "'");
  }
  return get_attr(obj, name, pos);
}

Value get_item(const Value& obj, const Value& key, uint32_t pos) {
  if (obj.is_undefined()) fail_undefined(obj, pos);
  if (obj.kind == Kind::kDict || obj.kind == Kind::kNamespace) {
    if (const Value* v = obj.dict->find(key)) return *v;
  } else if (obj.kind == Kind::kList && !obj.is_sequence()) {
    // An iterator or a dict view: Python's subscript fails, and Jinja makes that undefined.
    return Value::undefined(std::string("'") + type_name(obj) + "' object is not subscriptable");
  } else if ((obj.kind == Kind::kList || obj.kind == Kind::kString) &&
             (key.kind == Kind::kInt || key.kind == Kind::kBool)) {
    int64_t i = as_index(key);
    if (obj.kind == Kind::kList) {
      int64_t n = static_cast<int64_t>(obj.list->size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return (*obj.list)[static_cast<size_t>(i)];
      return Value::undefined(kind_object(obj) + " has no element " + std::to_string(as_index(key)));
    }
    std::vector<size_t> b = boundaries(obj.text());
    int64_t n = static_cast<int64_t>(b.size()) - 1;
    if (i < 0) i += n;
    if (i >= 0 && i < n) {
      Value c = Value::string(obj.s->sub(b[i], b[i + 1] - b[i]));
      c.markup = obj.markup;
      return c;
    }
    return Value::undefined(kind_object(obj) + " has no element " + std::to_string(as_index(key)));
  }
  if (key.is_string()) return get_attr(obj, key.text(), pos);
  return Value::undefined(kind_object(obj) + " has no element " + repr(key));
}

List iterate(const Value& v, uint32_t pos) {
  switch (v.kind) {
    case Kind::kUndefined: return {};
    case Kind::kList: {
      if (!v.consumed) return *v.list;
      List rest(v.list->begin() + static_cast<ptrdiff_t>(*v.consumed), v.list->end());  // what is left
      *v.consumed = v.list->size();
      return rest;
    }
    case Kind::kDict: {
      List keys;
      for (const auto& kv : v.dict->items) keys.push_back(kv.first);
      return keys;
    }
    case Kind::kString: {
      List chars;
      std::vector<size_t> b = boundaries(v.text());
      for (size_t k = 0; k + 1 < b.size(); ++k)
        chars.push_back(Value::string(v.s->sub(b[k], b[k + 1] - b[k])));
      return chars;
    }
    default: fail(pos, std::string("'") + type_name(v) + "' object is not iterable");
  }
}

bool less(const Value& a, const Value& b, uint32_t pos) {
  if (a.is_number() && b.is_number()) {
    auto d = [](const Value& v) {
      return v.kind == Kind::kFloat ? v.f : static_cast<double>(v.kind == Kind::kBool ? v.b : v.i);
    };
    if (a.kind != Kind::kFloat && b.kind != Kind::kFloat) return as_index(a) < as_index(b);
    return d(a) < d(b);
  }
  if (a.is_string() && b.is_string()) return a.text() < b.text();
  if (a.is_sequence() && b.is_sequence() && a.form == b.form) {
    const List &x = *a.list, &y = *b.list;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (!equal(x[k], y[k])) return less(x[k], y[k], pos);
    }
    return x.size() < y.size();
  }
  fail(pos, std::string("'<' not supported between instances of '") + type_name(a) + "' and '" +
                type_name(b) + "'");
}

int64_t length(const Value& v, uint32_t pos) {
  switch (v.kind) {
    case Kind::kUndefined: return 0;
    case Kind::kString: return static_cast<int64_t>(utf8_length(v.text()));
    case Kind::kList:
      if (v.is_iterator()) break;
      return static_cast<int64_t>(v.list->size());
    case Kind::kDict: return static_cast<int64_t>(v.dict->items.size());
    default: break;
  }
  fail(pos, std::string("object of type '") + type_name(v) + "' has no len()");
}

Str strip(const Str& s, const Value* chars, char which) {
  const std::string& t = s.text;
  std::vector<size_t> b = boundaries(t);
  std::vector<std::string_view> set;
  if (chars != nullptr && chars->is_string()) {
    std::vector<size_t> cb = boundaries(chars->text());
    for (size_t k = 0; k + 1 < cb.size(); ++k)
      set.push_back(std::string_view(chars->text()).substr(cb[k], cb[k + 1] - cb[k]));
  }
  const bool ws = chars == nullptr || !chars->is_string();
  auto strippable = [&](size_t k) {
    std::string_view c = std::string_view(t).substr(b[k], b[k + 1] - b[k]);
    if (ws) return space_at(t, b[k]) == c.size();
    return std::find(set.begin(), set.end(), c) != set.end();
  };
  size_t lo = 0, hi = b.size() - 1;  // code point range [lo, hi)
  if (which != 'r') {
    while (lo < hi && strippable(lo)) ++lo;
  }
  if (which != 'l') {
    while (hi > lo && strippable(hi - 1)) --hi;
  }
  return s.sub(b[lo], b[hi] - b[lo]);
}

List split(const Str& s, const Value* sep, int64_t maxsplit, uint32_t pos) {
  const std::string& t = s.text;
  List out;
  if (sep == nullptr || sep->kind == Kind::kNone) {
    size_t k = 0;
    while (true) {
      while (k < t.size() && space_at(t, k)) k += space_at(t, k);
      if (k >= t.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(Value::string(strip(s.sub(k, t.size() - k), nullptr, 'r')));
        break;
      }
      size_t j = k;
      while (j < t.size() && !space_at(t, j)) j += utf8_offset(std::string_view(t).substr(j), 1);
      out.push_back(Value::string(s.sub(k, j - k)));
      k = j;
    }
    return out;
  }
  if (!sep->is_string()) fail(pos, std::string("must be str or None, not ") + type_name(*sep));
  const std::string& d = sep->text();
  if (d.empty()) fail(pos, "empty separator");
  size_t k = 0;
  while (true) {
    size_t at = t.find(d, k);
    if (at == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit)) {
      out.push_back(Value::string(s.sub(k, t.size() - k)));
      return out;
    }
    out.push_back(Value::string(s.sub(k, at - k)));
    k = at + d.size();
  }
}

Str replace(const Str& s, const Str& from, const Str& to, int64_t count, const BuiltinLimits& limits,
            uint32_t pos) {
  Str out;
  const std::string& t = s.text;
  if (from.text.empty()) {
    // Python inserts `to` before every code point and at the end.
    std::vector<size_t> b = boundaries(t);
    for (size_t k = 0; k + 1 < b.size(); ++k) {
      if (count < 0 || static_cast<int64_t>(k) < count) out.append(to);
      out.append(s.sub(b[k], b[k + 1] - b[k]));
      if (out.text.size() > limits.max_string_bytes) fail(pos, "replace: the result is too large");
    }
    if (count < 0 || static_cast<int64_t>(b.size()) - 1 < count) out.append(to);
    return out;
  }
  size_t k = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t at = t.find(from.text, k);
    if (at == std::string::npos) break;
    out.append(s.sub(k, at - k));
    out.append(to);
    if (out.text.size() > limits.max_string_bytes) fail(pos, "replace: the result is too large");
    k = at + from.text.size();
    ++done;
  }
  out.append(s.sub(k, t.size() - k));
  return out;
}

namespace {

bool starts_or_ends(const Value& self, const Value& arg, bool ends, uint32_t pos) {
  auto one = [&](const Value& p) {
    if (!p.is_string()) fail(pos, std::string("startswith/endswith: expected a string, got ") + type_name(p));
    const std::string &t = self.text(), &x = p.text();
    return ends ? t.size() >= x.size() && t.compare(t.size() - x.size(), x.size(), x) == 0
                : t.rfind(x, 0) == 0;
  };
  if (arg.kind == Kind::kList && arg.form == ListForm::kTuple) {  // Python takes a tuple, not a list
    for (const Value& p : *arg.list) {
      if (one(p)) return true;
    }
    return false;
  }
  return one(arg);
}

// str.format with {}, {0} and {name} fields (no conversions or format specs).
Str format(const Value& self, const Args& args, uint32_t pos) {
  const std::string& t = self.text();
  Str out;
  size_t auto_index = 0;
  for (size_t k = 0; k < t.size(); ++k) {
    char c = t[k];
    if ((c == '{' || c == '}') && k + 1 < t.size() && t[k + 1] == c) {
      out.append(self.s->sub(k, 1));
      ++k;
      continue;
    }
    if (c == '}') fail(pos, "format: single '}' encountered in format string");
    if (c != '{') {
      out.append(self.s->sub(k, 1));
      continue;
    }
    size_t close = t.find('}', k);
    if (close == std::string::npos) fail(pos, "format: single '{' encountered in format string");
    std::string field = t.substr(k + 1, close - k - 1);
    if (field.find_first_of(":!.[") != std::string::npos)
      fail(pos, "format: conversions and format specs are not supported");
    const Value* v = nullptr;
    if (field.empty()) {
      v = auto_index < args.positional.size() ? &args.positional[auto_index] : nullptr;
      ++auto_index;
    } else if (std::all_of(field.begin(), field.end(),
                           [](char d) { return std::isdigit(static_cast<unsigned char>(d)); })) {
      size_t n = std::stoul(field.substr(0, 9));
      v = n < args.positional.size() ? &args.positional[n] : nullptr;
    } else {
      for (const auto& [name, x] : args.keyword) {
        if (name == field) v = &x;
      }
    }
    if (v == nullptr) fail(pos, "format: no argument for '{" + field + "}'");
    out.append(to_str(*v));
    k = close;
  }
  return out;
}

int64_t int_arg(const Value* v, int64_t dflt, uint32_t pos, const char* what) {
  if (v == nullptr || v->kind == Kind::kNone) return dflt;
  if (v->kind != Kind::kInt && v->kind != Kind::kBool) fail(pos, std::string(what) + ": expected an integer");
  return as_index(*v);
}

}  // namespace

Value call_method(const Value& self, const std::string& name, const Args& a, uint32_t pos,
                  const BuiltinLimits& limits) {
  const Value* a0 = a.get(0, "");
  if (self.kind == Kind::kString && self.markup) {
    // Markup's methods escape their arguments and return Markup; none of the templates we know
    // calls one, so they are refused rather than approximated.
    fail(pos, "the method '" + name + "' of a markup string (from |safe or |escape) is not supported");
  }
  if (self.kind == Kind::kString) {
    const Str& s = *self.s;
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      return Value::string(strip(s, a0, name[0] == 's' ? 'b' : name[0]));
    }
    if (name == "split")
      return Value::make_list(
          split(s, a.get(0, "sep"), int_arg(a.get(1, "maxsplit"), -1, pos, "split"), pos));
    if (name == "rsplit") {
      if (a.get(1, "maxsplit") != nullptr && int_arg(a.get(1, "maxsplit"), -1, pos, "rsplit") >= 0)
        fail(pos, "rsplit with maxsplit is not supported");
      return Value::make_list(split(s, a.get(0, "sep"), -1, pos));
    }
    if (name == "startswith" || name == "endswith") {
      if (a0 == nullptr) fail(pos, name + "() takes at least 1 argument");
      return Value::boolean(starts_or_ends(self, *a0, name == "endswith", pos));
    }
    if (name == "upper") return Value::string(upper(s));
    if (name == "lower") return Value::string(lower(s));
    if (name == "title") return Value::string(title(s, true));
    if (name == "capitalize") return Value::string(capitalize(s));
    if (name == "replace") {
      const Value* from = a.get(0, "old");
      const Value* to = a.get(1, "new");
      if (from == nullptr || to == nullptr || !from->is_string() || !to->is_string())
        fail(pos, "replace() takes two strings");
      return Value::string(
          replace(s, *from->s, *to->s, int_arg(a.get(2, "count"), -1, pos, "replace"), limits, pos));
    }
    if (name == "format") return Value::string(format(self, a, pos));
    if (name == "join") {
      if (a0 == nullptr) fail(pos, "join() takes exactly one argument");
      Str out;
      List items = iterate(*a0, pos);
      for (size_t k = 0; k < items.size(); ++k) {
        if (!items[k].is_string())
          fail(pos, std::string("join: sequence item ") + std::to_string(k) + ": expected str instance, " +
                        type_name(items[k]) + " found");
        if (k) out.append(s);
        out.append(*items[k].s);
        if (out.text.size() > limits.max_string_bytes) fail(pos, "join: the result is too large");
      }
      return Value::string(std::move(out));
    }
    if (name == "find" || name == "count") {
      if (a0 == nullptr || !a0->is_string()) fail(pos, name + "() takes a string");
      if (name == "find") {
        size_t at = s.text.find(a0->text());
        return Value::integer(at == std::string::npos ? -1
                                                      : static_cast<int64_t>(utf8_length(
                                                            std::string_view(s.text).substr(0, at))));
      }
      if (a0->text().empty()) return Value::integer(static_cast<int64_t>(utf8_length(s.text)) + 1);
      int64_t n = 0;
      for (size_t at = s.text.find(a0->text()); at != std::string::npos;
           at = s.text.find(a0->text(), at + a0->text().size()))
        ++n;
      return Value::integer(n);
    }
    if (name == "splitlines") {
      List out;
      size_t start = 0;
      const std::string& t = s.text;
      for (size_t k = 0; k < t.size();) {
        size_t n = t[k] == '\r' && k + 1 < t.size() && t[k + 1] == '\n' ? 2 : 0;
        if (n == 0 &&
            (t[k] == '\n' || t[k] == '\r' || t[k] == '\v' || t[k] == '\f' || (t[k] >= 0x1c && t[k] <= 0x1e)))
          n = 1;
        if (n == 0 && t.compare(k, 2, "\xc2\x85") == 0) n = 2;
        if (n == 0 && (t.compare(k, 3, "\xe2\x80\xa8") == 0 || t.compare(k, 3, "\xe2\x80\xa9") == 0)) n = 3;
        if (n == 0) {
          ++k;
          continue;
        }
        out.push_back(Value::string(s.sub(start, k - start)));
        k += n;
        start = k;
      }
      if (start < t.size()) out.push_back(Value::string(s.sub(start, t.size() - start)));
      return Value::make_list(std::move(out));
    }
    auto all = [&](auto pred) {
      return !s.text.empty() && std::all_of(s.text.begin(), s.text.end(),
                                            [&](char c) { return pred(static_cast<unsigned char>(c)); });
    };
    if (name == "isdigit") return Value::boolean(all([](unsigned char c) { return std::isdigit(c) != 0; }));
    if (name == "isalpha") return Value::boolean(all([](unsigned char c) { return std::isalpha(c) != 0; }));
    if (name == "isspace") return Value::boolean(all([](unsigned char c) { return std::isspace(c) != 0; }));
  }
  if (self.kind == Kind::kDict) {
    if (name == "get") {
      if (a0 == nullptr) fail(pos, "get() takes at least 1 argument");
      const Value* v = self.dict->find(*a0);
      const Value* d = a.get(1, "default");
      return v ? *v : d ? *d : Value::none();
    }
    List out;
    for (const auto& [k, v] : self.dict->items) {
      if (name == "items") {
        out.push_back(Value::make_tuple({k, v}));
      } else {
        out.push_back(name == "keys" ? k : v);
      }
    }
    return Value::make_seq(std::move(out), name == "items"  ? ListForm::kDictItems
                                           : name == "keys" ? ListForm::kDictKeys
                                                            : ListForm::kDictValues);
  }
  if (self.kind == Kind::kList) {
    if (a0 == nullptr) fail(pos, name + "() takes exactly one argument");
    int64_t n = 0;
    for (size_t k = 0; k < self.list->size(); ++k) {
      if (equal((*self.list)[k], *a0)) {
        if (name == "index") return Value::integer(static_cast<int64_t>(k));
        ++n;
      }
    }
    if (name == "index") fail(pos, repr(*a0) + " is not in list");
    return Value::integer(n);
  }
  if (self.kind == Kind::kLoop && name == "cycle") {
    if (a.positional.empty()) fail(pos, "no items for cycling given");
    return a.positional[static_cast<size_t>(self.loop->index0) % a.positional.size()];
  }
  fail(pos, kind_object(self) + " has no method '" + name + "'");
}

}  // namespace nanoserve::jinja
