#pragma once
// Values of the Jinja interpreter (docs/chat_template.md), with Python's
// semantics where a chat template can see them: truthiness, equality, str(),
// repr() and json.dumps as transformers configures its tojson filter.
//
// A string remembers which of its bytes came from the caller (message content,
// roles, tools, extra variables) rather than from the template's own literals,
// so that the prompt can be encoded with special tokens parsed only in the
// template's text (PromptPiece). Operations that keep bytes (concatenation,
// slicing, strip, split, join, replace) keep their origin; an operation that
// makes new text (upper, title, tojson, str of a number) marks its result as
// the caller's when any input byte was.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace nanoserve::jinja {

// A render failure at a byte offset of the source; thrown inside the renderer (and by to_str) and
// turned into a Status (with line and column) at its boundary.
struct RenderError {
  uint32_t pos;
  std::string what;
};
inline constexpr uint32_t kUnknownPos = UINT32_MAX;  // the renderer's current position

// Text plus the byte ranges [begin, end) that the caller supplied (sorted, disjoint, non-adjacent).
struct Str {
  std::string text;
  std::vector<std::pair<uint32_t, uint32_t>> caller;

  bool any_caller() const { return !caller.empty(); }
  // Bytes [pos, pos + len) with their origin.
  Str sub(size_t pos, size_t len) const;
  void append(const Str& s);
  void append_template(std::string_view s) { text.append(s); }
  void append_caller(std::string_view s);
};

struct Value;
using List = std::vector<Value>;
// Python dicts keep insertion order; keys are compared with Python equality.
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);
};
struct Callable;  // macros and built-in functions (jinja_render.cc)
struct LoopState;

// What Python object a kList stands for, where the difference shows.
enum class ListForm : uint8_t {
  kList,
  kTuple,  // dict items, tuple literals: repr shows (a, b)
  // A one-pass iterator: what map, select, reject, selectattr, rejectattr, unique and the items
  // filter return (a generator), and reverse of a list (a list_reverseiterator). Always true, no
  // len(), not subscriptable (an item is undefined), not JSON, and printing it (Python shows an
  // address) is refused. Iterating it consumes it (Value::consumed).
  kGenerator,
  kReversed,
  // dict.items(), .keys(), .values(): len() and iteration again and again, not subscriptable, not
  // JSON; printed as dict_items([...]).
  kDictItems,
  kDictKeys,
  kDictValues
};

enum class Kind {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,
  kDict,
  kNamespace,
  kCallable,
  kLoop
};

struct Value {
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::shared_ptr<const Str> s;
  std::shared_ptr<const List> list;
  std::shared_ptr<Dict> dict;  // kDict (never mutated once shared) and kNamespace (mutable)
  std::shared_ptr<const Callable> fn;
  std::shared_ptr<const LoopState> loop;
  std::string undefined_hint;       // kUndefined: what was looked up, for error messages
  uint32_t depth = 0;               // kList, kDict: nesting (1 + the deepest item's), bounded by the renderer
  ListForm form = ListForm::kList;  // kList
  // kString: a markupsafe Markup (from |safe, |escape): `+` with a plain string escapes that
  // string's HTML, and the string filters that return Markup keep the mark.
  bool markup = false;
  // kGenerator, kReversed: how many items have been taken, shared by every copy of the value.
  std::shared_ptr<size_t> consumed;

  static Value undefined(std::string hint = {}) {
    Value v;
    v.undefined_hint = std::move(hint);
    return v;
  }
  static Value none() { return with_kind(Kind::kNone); }
  static Value boolean(bool x) {
    Value v = with_kind(Kind::kBool);
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v = with_kind(Kind::kInt);
    v.i = x;
    return v;
  }
  static Value number(double x) {
    Value v = with_kind(Kind::kFloat);
    v.f = x;
    return v;
  }
  static Value string(Str x) {
    Value v = with_kind(Kind::kString);
    v.s = std::make_shared<const Str>(std::move(x));
    return v;
  }
  static Value template_string(std::string x) { return string(Str{std::move(x), {}}); }
  static Value caller_string(std::string x);
  static Value make_list(List x) {
    Value v = with_kind(Kind::kList);
    for (const Value& item : x) v.depth = std::max(v.depth, item.depth + 1);
    v.list = std::make_shared<const List>(std::move(x));
    return v;
  }
  static Value make_tuple(List x) {
    Value v = make_list(std::move(x));
    v.form = ListForm::kTuple;
    return v;
  }
  // A list of another form (a generator: its items are the ones it would yield).
  static Value make_seq(List x, ListForm form) {
    Value v = make_list(std::move(x));
    v.form = form;
    if (form == ListForm::kGenerator || form == ListForm::kReversed) v.consumed = std::make_shared<size_t>(0);
    return v;
  }
  static Value make_dict(Dict x) {
    Value v = with_kind(Kind::kDict);
    for (const auto& kv : x.items) v.depth = std::max({v.depth, kv.first.depth + 1, kv.second.depth + 1});
    v.dict = std::make_shared<Dict>(std::move(x));
    return v;
  }

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool; }
  bool is_mapping() const { return kind == Kind::kDict || kind == Kind::kNamespace; }
  // A list or tuple proper (indexable, JSON, printable), not an iterator or a dict view.
  bool is_sequence() const {
    return kind == Kind::kList && (form == ListForm::kList || form == ListForm::kTuple);
  }
  bool is_iterator() const {
    return kind == Kind::kList && (form == ListForm::kGenerator || form == ListForm::kReversed);
  }
  const std::string& text() const { return s->text; }

 private:
  static Value with_kind(Kind k) {
    Value v;
    v.kind = k;
    return v;
  }
};

// markupsafe.escape(x): & < > ' " as HTML entities; a Markup is returned as it is.
Value html_escape(const Value& v);

// Python's bool(x).
bool truthy(const Value& v);
// Python's ==, with 1 == 1.0 == True.
bool equal(const Value& a, const Value& b);
// The type name Python would report ("str", "int", "dict", "undefined", ...).
const char* type_name(const Value& v);

// Python's str(x) (undefined prints as ""), keeping the string's origin. A generator (or a
// container holding one) has no text Jinja could reproduce: to_str throws RenderError (at
// kUnknownPos, which the renderer replaces with the current position).
Str to_str(const Value& v);
// Python's repr(x), as str() shows the items of a list or dict.
std::string repr(const Value& v);
// Python's repr of a float ("1.0", "0.1", "1e-05", "inf").
std::string float_repr(double x);
// json.dumps(v, ensure_ascii=..., indent=indent, sort_keys=...), transformers' tojson (its
// defaults: ensure_ascii and sort_keys false). Returns false, with `error` set, for a value JSON
// cannot hold (undefined, a macro, a generator) and for sort_keys over keys that do not compare.
struct JsonOptions {
  int indent = -1;  // none
  bool ensure_ascii = false;
  bool sort_keys = false;
  // separators=(item, key); unset: ", " (or "," with an indent) and ": ".
  std::optional<std::pair<std::string, std::string>> separators;
};
bool to_json(const Value& v, const JsonOptions& options, std::string& out, std::string& error);

// Nesting a list or dict may have (JSON in and out, and values the template builds).
inline constexpr uint32_t kMaxValueDepth = 256;

// Values from JSON (the request's messages, tools and extra variables): strings are the caller's
// when `caller`, else the template's. False when `j` nests deeper than kMaxValueDepth.
bool from_json(const nlohmann::ordered_json& j, bool caller, Value& out);

// Code points of UTF-8 text (bytes that do not decode count as one each), and the byte offset of
// code point `n` (n may equal the count).
size_t utf8_length(std::string_view s);
size_t utf8_offset(std::string_view s, size_t n);
// The byte length of the whitespace code point (Python's str.isspace) at s[pos], or 0.
size_t space_at(std::string_view s, size_t pos);

}  // namespace nanoserve::jinja
