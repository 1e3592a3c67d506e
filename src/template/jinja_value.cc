#include "template/jinja_value.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace nanoserve::jinja {

Str Str::sub(size_t pos, size_t len) const {
  Str out;
  if (pos >= text.size()) return out;
  len = std::min(len, text.size() - pos);
  out.text = text.substr(pos, len);
  const size_t end = pos + len;
  for (auto [b, e] : caller) {
    if (e <= pos || b >= end) continue;
    out.caller.push_back({static_cast<uint32_t>(std::max<size_t>(b, pos) - pos),
                          static_cast<uint32_t>(std::min<size_t>(e, end) - pos)});
  }
  return out;
}

void Str::append(const Str& s) {
  const uint32_t base = static_cast<uint32_t>(text.size());
  text += s.text;
  for (auto [b, e] : s.caller) {
    if (!caller.empty() && caller.back().second == base + b) {
      caller.back().second = base + e;
    } else {
      caller.push_back({base + b, base + e});
    }
  }
}

void Str::append_caller(std::string_view s) {
  if (s.empty()) return;
  Str c{std::string(s), {{0u, static_cast<uint32_t>(s.size())}}};
  append(c);
}

Value Value::caller_string(std::string x) {
  Str s;
  s.append_caller(x);
  return string(std::move(s));
}

const Value* Dict::find(const Value& key) const {
  for (const auto& kv : items) {
    if (equal(kv.first, key)) return &kv.second;
  }
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& kv : items) {
    if (kv.first.is_string() && kv.first.text() == key) return &kv.second;
  }
  return nullptr;
}

void Dict::set(Value key, Value value) {
  for (auto& kv : items) {
    if (equal(kv.first, key)) {
      kv.second = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return v.b;
    case Kind::kInt: return v.i != 0;
    case Kind::kFloat: return v.f != 0;
    case Kind::kString: return !v.text().empty();
    case Kind::kList: return v.is_iterator() || !v.list->empty();  // an iterator object is true
    case Kind::kDict: return !v.dict->items.empty();
    default: return true;
  }
}

namespace {

double as_double(const Value& v) {
  return v.kind == Kind::kFloat ? v.f : v.kind == Kind::kBool ? (v.b ? 1.0 : 0.0) : static_cast<double>(v.i);
}

}  // namespace

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind != Kind::kFloat && b.kind != Kind::kFloat) {
      int64_t x = a.kind == Kind::kBool ? a.b : a.i, y = b.kind == Kind::kBool ? b.b : b.i;
      return x == y;
    }
    return as_double(a) == as_double(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return a.text() == b.text();
    case Kind::kList:
      // A list never equals a tuple; iterators and dict values equal only themselves; dict items and
      // keys compare as sets.
      if (a.is_sequence() != b.is_sequence() || (!a.is_sequence() && a.form != b.form)) return false;
      if (a.is_iterator() || a.form == ListForm::kDictValues)
        return a.list == b.list && a.consumed == b.consumed;
      if (a.form != b.form) return false;
      if (a.list->size() != b.list->size()) return false;
      if (a.form == ListForm::kDictItems || a.form == ListForm::kDictKeys) {
        for (const Value& x : *a.list) {
          if (std::none_of(b.list->begin(), b.list->end(), [&](const Value& y) { return equal(x, y); }))
            return false;
        }
        return true;
      }
      for (size_t k = 0; k < a.list->size(); ++k) {
        if (!equal((*a.list)[k], (*b.list)[k])) return false;
      }
      return true;
    case Kind::kDict:
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, v] : a.dict->items) {
        const Value* o = b.dict->find(k);
        if (o == nullptr || !equal(v, *o)) return false;
      }
      return true;
    case Kind::kNamespace: return a.dict == b.dict;
    case Kind::kCallable: return a.fn == b.fn;
    case Kind::kLoop: return a.loop == b.loop;
    default: return false;
  }
}

const char* type_name(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList:
      switch (v.form) {
        case ListForm::kList: return "list";
        case ListForm::kTuple: return "tuple";
        case ListForm::kGenerator: return "generator";
        case ListForm::kReversed: return "list_reverseiterator";
        case ListForm::kDictItems: return "dict_items";
        case ListForm::kDictKeys: return "dict_keys";
        case ListForm::kDictValues: return "dict_values";
      }
      return "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    case Kind::kCallable: return "function";
    case Kind::kLoop: return "LoopContext";
  }
  return "object";
}

std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (x == 0) return std::signbit(x) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then Python's layout: positional for exponents in [-4, 16).
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), x, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e = sci.find('e');
  int exp = std::atoi(sci.c_str() + e + 1);
  std::string digits;
  for (size_t k = 0; k < e; ++k) {
    if (sci[k] != '.') digits += sci[k];
  }
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out += digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out +=
          digits.substr(0, static_cast<size_t>(exp) + 1) + "." + digits.substr(static_cast<size_t>(exp) + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return out + ebuf;
}

namespace {

// The code point at s[pos] and its byte length (a stray byte decodes as itself, length 1).
std::pair<uint32_t, size_t> decode_at(std::string_view s, size_t pos) {
  unsigned char c = static_cast<unsigned char>(s[pos]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || pos + n > s.size()) return {c, 1};
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < n; ++k) {
    unsigned char d = static_cast<unsigned char>(s[pos + k]);
    if ((d & 0xC0) != 0x80) return {c, 1};
    cp = (cp << 6) | (d & 0x3F);
  }
  return {cp, n};
}

// Code points Python's str.isprintable() rejects beyond the C0/C1 controls (the common ones).
bool unprintable(uint32_t cp) {
  return cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) || (cp >= 0x205F && cp <= 0x2064) ||
         cp == 0x3000 || cp == 0xFEFF;
}

std::string string_repr(std::string_view s) {
  const bool dq = s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (size_t k = 0; k < s.size();) {
    auto [cp, n] = decode_at(s, k);
    if (cp == '\\' || cp == static_cast<uint32_t>(q)) {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (unprintable(cp)) {
      char buf[16];
      std::snprintf(buf, sizeof(buf), cp < 0x100 ? "\\x%02x" : "\\u%04x", cp);
      out += buf;
    } else {
      out.append(s.substr(k, n));
    }
    k += n;
  }
  return out + q;
}

bool any_caller(const Value& v) {
  switch (v.kind) {
    case Kind::kString: return v.s->any_caller();
    case Kind::kList:
      for (const Value& x : *v.list) {
        if (any_caller(x)) return true;
      }
      return false;
    case Kind::kDict:
      for (const auto& [k, x] : v.dict->items) {
        if (any_caller(k) || any_caller(x)) return true;
      }
      return false;
    default: return false;
  }
}

Str made(std::string text, bool caller) {
  Str s;
  if (caller) {
    s.append_caller(text);
  } else {
    s.text = std::move(text);
  }
  return s;
}

}  // namespace

std::string repr(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kString: return string_repr(v.text());
    case Kind::kList: {
      if (v.is_iterator()) {
        throw RenderError{kUnknownPos, std::string("printing a ") + type_name(v) +
                                           " (Python shows its address) is not supported; apply |list first"};
      }
      const bool tuple = v.form == ListForm::kTuple;
      std::string out = tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->size(); ++k) out += (k ? ", " : "") + repr((*v.list)[k]);
      if (tuple && v.list->size() == 1) out += ",";
      out += tuple ? ")" : "]";
      return v.is_sequence() ? out : std::string(type_name(v)) + "(" + out + ")";
    }
    case Kind::kDict: {
      std::string out = "{";
      for (size_t k = 0; k < v.dict->items.size(); ++k) {
        out += (k ? ", " : "") + repr(v.dict->items[k].first) + ": " + repr(v.dict->items[k].second);
      }
      return out + "}";
    }
    case Kind::kNamespace: return "<Namespace>";  // not its items: a namespace may hold itself
    default: return to_str(v).text;
  }
}

Str to_str(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return {};
    case Kind::kNone: return {"None", {}};
    case Kind::kBool: return {v.b ? "True" : "False", {}};
    case Kind::kInt: return {std::to_string(v.i), {}};
    case Kind::kFloat: return {float_repr(v.f), {}};
    case Kind::kString: return *v.s;
    case Kind::kCallable: return {"<function>", {}};
    case Kind::kLoop: return {"<LoopContext>", {}};
    default: return made(repr(v), any_caller(v));
  }
}

Value html_escape(const Value& v) {
  if (v.is_string() && v.markup) return v;
  Str s = to_str(v), out;
  for (size_t k = 0; k < s.text.size(); ++k) {
    const char* rep = nullptr;
    switch (s.text[k]) {
      case '&': rep = "&amp;"; break;
      case '<': rep = "&lt;"; break;
      case '>': rep = "&gt;"; break;
      case '"': rep = "&#34;"; break;
      case '\'': rep = "&#39;"; break;
      default: break;
    }
    if (rep == nullptr) {
      out.append(s.sub(k, 1));
    } else {
      Str r = s.sub(k, 1);
      r.text = rep;
      if (!r.caller.empty()) r.caller = {{0u, static_cast<uint32_t>(r.text.size())}};
      out.append(r);
    }
  }
  Value r = Value::string(std::move(out));
  r.markup = true;
  return r;
}

namespace {

void json_string(std::string_view s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (size_t k = 0; k < s.size(); ++k) {
    const unsigned char c = static_cast<unsigned char>(s[k]);
    if (ensure_ascii && c >= 0x7F) {  // json.dumps escapes all but ' '..'~' then
      auto [cp, n] = decode_at(s, k);
      k += n - 1;
      char buf[16];
      if (cp >= 0x10000) {  // a surrogate pair, as json.dumps writes it
        cp -= 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      }
      out += buf;
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

bool json_key(const Value& k, bool ascii, std::string& out, std::string& error) {
  switch (k.kind) {
    case Kind::kString: json_string(k.text(), ascii, out); return true;
    case Kind::kInt: json_string(std::to_string(k.i), ascii, out); return true;
    case Kind::kBool: json_string(k.b ? "true" : "false", ascii, out); return true;
    case Kind::kNone: json_string("null", ascii, out); return true;
    case Kind::kFloat: json_string(float_repr(k.f), ascii, out); return true;
    default:
      error = std::string("keys must be str, int, float, bool or None, not ") + type_name(k);
      return false;
  }
}

bool json_value(const Value& v, const JsonOptions& o, int depth, std::string& out, std::string& error) {
  const int indent = o.indent;
  if (depth > 512) {
    error = "nesting deeper than 512";
    return false;
  }
  auto newline = [&](int level) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent) * static_cast<size_t>(level), ' ');
  };
  const std::string item_sep = o.separators ? o.separators->first : indent < 0 ? ", " : ",";
  const std::string key_sep = o.separators ? o.separators->second : ": ";
  switch (v.kind) {
    case Kind::kNone: out += "null"; return true;
    case Kind::kBool: out += v.b ? "true" : "false"; return true;
    case Kind::kInt: out += std::to_string(v.i); return true;
    case Kind::kFloat:
      out += std::isnan(v.f)   ? "NaN"
             : std::isinf(v.f) ? (v.f > 0 ? "Infinity" : "-Infinity")
                               : float_repr(v.f);
      return true;
    case Kind::kString: json_string(v.text(), o.ensure_ascii, out); return true;
    case Kind::kList:
      if (!v.is_sequence()) {
        error = std::string("Object of type ") + type_name(v) + " is not JSON serializable";
        return false;
      }
      if (v.list->empty()) {
        out += "[]";
        return true;
      }
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += item_sep;
        newline(depth + 1);
        if (!json_value((*v.list)[k], o, depth + 1, out, error)) return false;
      }
      newline(depth);
      out += ']';
      return true;
    case Kind::kDict: {
      if (v.dict->items.empty()) {
        out += "{}";
        return true;
      }
      std::vector<const std::pair<Value, Value>*> items;
      for (const auto& kv : v.dict->items) items.push_back(&kv);
      if (o.sort_keys) {
        // Python sorts the keys themselves: strings among strings, numbers among numbers.
        for (const auto* kv : items) {
          const Value& k0 = items[0]->first;
          const bool ok =
              (k0.is_string() && kv->first.is_string()) || (k0.is_number() && kv->first.is_number());
          if (!ok) {
            error = std::string("'<' not supported between instances of '") + type_name(kv->first) +
                    "' and '" + type_name(k0) + "'";
            return false;
          }
        }
        std::stable_sort(items.begin(), items.end(), [](const auto* a, const auto* b) {
          if (a->first.is_string()) return a->first.text() < b->first.text();
          return as_double(a->first) < as_double(b->first);
        });
      }
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += item_sep;
        newline(depth + 1);
        if (!json_key(items[k]->first, o.ensure_ascii, out, error)) return false;
        out += key_sep;
        if (!json_value(items[k]->second, o, depth + 1, out, error)) return false;
      }
      newline(depth);
      out += '}';
      return true;
    }
    default:
      error = std::string("Object of type ") + (v.is_undefined() ? "Undefined" : type_name(v)) +
              " is not JSON serializable";
      return false;
  }
}

}  // namespace

bool to_json(const Value& v, const JsonOptions& options, std::string& out, std::string& error) {
  return json_value(v, options, 0, out, error);
}

bool from_json(const nlohmann::ordered_json& j, bool caller, Value& out) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: out = Value::none(); return true;
    case nlohmann::ordered_json::value_t::boolean: out = Value::boolean(j.get<bool>()); return true;
    case nlohmann::ordered_json::value_t::number_integer: out = Value::integer(j.get<int64_t>()); return true;
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      out = u <= static_cast<uint64_t>(INT64_MAX) ? Value::integer(static_cast<int64_t>(u))
                                                  : Value::number(static_cast<double>(u));
      return true;
    }
    case nlohmann::ordered_json::value_t::number_float: out = Value::number(j.get<double>()); return true;
    case nlohmann::ordered_json::value_t::string:
      out =
          caller ? Value::caller_string(j.get<std::string>()) : Value::template_string(j.get<std::string>());
      return true;
    case nlohmann::ordered_json::value_t::array: {
      List l(j.size());
      for (size_t k = 0; k < j.size(); ++k) {
        if (!from_json(j[k], caller, l[k])) return false;
      }
      out = Value::make_list(std::move(l));
      return out.depth <= kMaxValueDepth;
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      d.items.reserve(j.size());
      for (const auto& [k, x] : j.items()) {
        Value v;
        if (!from_json(x, caller, v)) return false;
        d.items.emplace_back(caller ? Value::caller_string(k) : Value::template_string(k), std::move(v));
      }
      out = Value::make_dict(std::move(d));
      return out.depth <= kMaxValueDepth;
    }
    default: out = Value::none(); return true;
  }
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (size_t k = 0; k < s.size(); k += decode_at(s, k).second) ++n;
  return n;
}

size_t utf8_offset(std::string_view s, size_t n) {
  size_t k = 0;
  while (n > 0 && k < s.size()) {
    k += decode_at(s, k).second;
    --n;
  }
  return k;
}

size_t space_at(std::string_view s, size_t pos) {
  auto [cp, n] = decode_at(s, pos);
  bool space = (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
               cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
               cp == 0x202F || cp == 0x205F || cp == 0x3000;
  return space ? n : 0;
}

}  // namespace nanoserve::jinja
