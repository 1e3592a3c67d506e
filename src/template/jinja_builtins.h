#pragma once
// The interpreter's built-in filters, tests and methods (of str, dict and
// list), shared by jinja_render.cc and the files that define them:
// jinja_filters.cc (filters, tests) and jinja_methods.cc (methods, string helpers).

#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "template/jinja_value.h"

namespace nanoserve::jinja {

struct Stmt;

// What `name(...)` can call: a macro, a global function (range, namespace, dict, raise_exception,
// strftime_now), or a method bound to its object (`self.name`).
struct Callable {
  enum class Type { kMacro, kGlobal, kMethod };
  Type type = Type::kGlobal;
  std::string name;
  const Stmt* macro = nullptr;  // kMacro
  Value self;                   // kMethod
};

// The state of the innermost loop, as `loop.*` shows it.
struct LoopState {
  int64_t index0 = 0;
  int64_t length = 0;
  Value previtem, nextitem;  // undefined at the ends
};

Value bound_method(const Value& self, const std::string& name);

struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // Argument `k` by position, else by keyword `name`, else null.
  const Value* get(size_t k, std::string_view name) const;
};

// Bounds the builtins keep to: a string or list they make is at most this big.
struct BuiltinLimits {
  size_t max_string_bytes = size_t{16} << 20;
  size_t max_list_items = size_t{1} << 20;
};

// raise_exception(msg) from the template: reported as the template's own message.
struct TemplateRaised {
  uint32_t pos;
  std::string message;
};

// jinja_operators.cc: Python's + - * / // % ** and Jinja's ~ (strings and lists bounded by
// `limits`); obj[start:stop:step] (a null bound is omitted); the global functions range,
// namespace, dict, raise_exception (throws TemplateRaised) and strftime_now (`now` in UTC when
// given, else the clock in local time); and the nesting bound on the lists and dicts a template builds.
Value binary_op(const std::string& op, const Value& l, const Value& r, uint32_t pos,
                const BuiltinLimits& limits);
Value slice_of(const Value& obj, const Value* const bounds[3], uint32_t pos);
Value call_global(const std::string& name, const Args& args, uint32_t pos, std::optional<std::time_t> now);
Value checked_depth(Value v, uint32_t pos);

// Whether jinja2 has a filter or test of this name (whether or not we implement it): jinja2
// refuses an unknown one when it compiles the template, unless it sits in an if or a
// conditional expression, where it fails only when reached.
bool jinja2_has_filter(std::string_view name);
bool jinja2_has_test(std::string_view name);

Value call_filter(const std::string& name, const Value& input, const Args& args, uint32_t pos,
                  const BuiltinLimits& limits);
bool call_test(const std::string& name, const Value& v, const Args& args, uint32_t pos);
bool is_method(const Value& self, std::string_view name);
Value call_method(const Value& self, const std::string& name, const Args& args, uint32_t pos,
                  const BuiltinLimits& limits);

// Helpers over Values that both the renderer and the builtins use.
[[noreturn]] void fail(uint32_t pos, std::string what);
// The items a `for` visits: a list's items, a dict's keys, a string's characters; undefined: none.
List iterate(const Value& v, uint32_t pos);
// Python's <, for sorting and comparisons (numbers, strings, lists); other pairs fail.
bool less(const Value& a, const Value& b, uint32_t pos);
// Python's len(); fails for values without one.
int64_t length(const Value& v, uint32_t pos);
// x[key] as Jinja's getitem does it (item first, then attribute), and x.name (attribute first).
Value get_item(const Value& obj, const Value& key, uint32_t pos);
Value get_attr(const Value& obj, const std::string& name, uint32_t pos);
// Python's getattr alone (the attr filter): a dict's keys are not its attributes.
Value getattr_only(const Value& obj, const std::string& name, uint32_t pos);
// Python's str.strip family on a Str: which = 'l', 'r' or 'b'; chars null: whitespace.
Str strip(const Str& s, const Value* chars, char which);
// Case mappings (jinja_case.cc) that keep the string's byte origins.
Str upper(const Str& s);
Str lower(const Str& s);
Str capitalize(const Str& s);
// Python's str.split(sep, maxsplit); sep null: runs of whitespace.
List split(const Str& s, const Value* sep, int64_t maxsplit, uint32_t pos);
Str replace(const Str& s, const Str& from, const Str& to, int64_t count, const BuiltinLimits& limits,
            uint32_t pos);
// Python's str.title() (`python_title`) or Jinja's title filter (word starts after blanks and brackets).
Str title(const Str& s, bool python_title);

}  // namespace nanoserve::jinja
