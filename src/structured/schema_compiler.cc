#include "structured/schema_compiler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

namespace nanoserve::structured {

// Ordered: properties are generated in the order the schema lists them.
using json = nlohmann::ordered_json;

namespace {

// Keywords that only describe (they never constrain a value).
const std::set<std::string>& annotations() {
  static const std::set<std::string> k = {"title",    "description", "$schema", "$id",
                                          "$comment", "examples",    "default", "deprecated",
                                          "readOnly", "writeOnly",   "$defs",   "definitions"};
  return k;
}

const std::set<std::string>& supported() {
  static const std::set<std::string> k = {"type",
                                          "properties",
                                          "required",
                                          "additionalProperties",
                                          "items",
                                          "minItems",
                                          "maxItems",
                                          "enum",
                                          "const",
                                          "anyOf",
                                          "$ref",
                                          "minimum",
                                          "maximum",
                                          "exclusiveMinimum",
                                          "exclusiveMaximum",
                                          "minLength",
                                          "maxLength",
                                          "pattern",
                                          "format"};
  return k;
}

// The JSON pointer token of a key: ~ and / escaped.
std::string pointer_token(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

bool type_matches(const json& v, const std::string& type) {
  if (type == "null") return v.is_null();
  if (type == "boolean") return v.is_boolean();
  if (type == "integer")
    return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  if (type == "number") return v.is_number();
  if (type == "string") return v.is_string();
  if (type == "array") return v.is_array();
  if (type == "object") return v.is_object();
  return false;
}

class Compiler {
 public:
  explicit Compiler(const json& root) : root_(root), g_(base_grammar()) {}

  StatusOr<Grammar> run() {
    const int32_t root = compile(root_, "#", 0);
    if (!error_.ok()) return error_;
    g_.root = root;
    compute_min_depth(g_);
    if (g_.nodes[root].min_depth == kUnsatisfiable)
      return invalid_argument("no JSON value satisfies the schema within " + std::to_string(kMaxDepth) +
                              " levels of nesting");
    return std::move(g_);
  }

 private:
  static constexpr int kMaxSchemaDepth = 64;
  static constexpr size_t kMaxNodes = 4096;
  static constexpr size_t kMaxAlternatives = 16;

  int32_t fail(std::string message) {
    if (error_.ok()) error_ = invalid_argument(std::move(message));
    return kAnyNode;
  }

  int32_t add(Node n) {
    if (g_.nodes.size() >= kMaxNodes) return fail("the schema is too large (more than 4096 nodes)");
    g_.nodes.push_back(std::move(n));
    return static_cast<int32_t>(g_.nodes.size()) - 1;
  }

  const json* resolve(const std::string& ref) {
    if (ref == "#") return &root_;
    if (ref.rfind("#/", 0) != 0) return nullptr;
    const json* cur = &root_;
    size_t pos = 2;
    while (pos <= ref.size()) {
      size_t end = ref.find('/', pos);
      if (end == std::string::npos) end = ref.size();
      std::string tok;
      for (size_t i = pos; i < end; ++i) {
        if (ref[i] == '~' && i + 1 < end && (ref[i + 1] == '0' || ref[i + 1] == '1')) {
          tok += ref[i + 1] == '0' ? '~' : '/';
          ++i;
        } else {
          tok += ref[i];
        }
      }
      if (!cur->is_object()) return nullptr;
      auto it = cur->find(tok);
      if (it == cur->end()) return nullptr;
      cur = &*it;
      pos = end + 1;
    }
    return cur;
  }

  int32_t compile_ref(const json& s, const std::string& path, int depth) {
    for (const auto& [k, v] : s.items()) {
      if (k != "$ref" && !annotations().count(k))
        return fail("'$ref' cannot be combined with '" + k + "' at " + path);
    }
    if (!s["$ref"].is_string()) return fail("'$ref' at " + path + " must be a string");
    const std::string ref = s["$ref"].get<std::string>();
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    const json* target = resolve(ref);
    if (target == nullptr)
      return fail("'$ref' at " + path + ": only local references (#/$defs/...) are supported, and '" + ref +
                  "' was not found");
    const int32_t id = add(Node{});
    refs_[ref] = id;
    pending_.insert(id);
    const int32_t t = compile(*target, ref, depth + 1);
    pending_.erase(id);
    if (pending_.count(t) || t == id) return fail("circular '$ref' at " + path);
    Node copy = g_.nodes[t];
    g_.nodes[id] = std::move(copy);
    return id;
  }

  int32_t compile(const json& s, const std::string& path, int depth) {
    if (!error_.ok()) return kAnyNode;
    if (depth > kMaxSchemaDepth) return fail("the schema nests deeper than 64 levels at " + path);
    if (s.is_boolean()) {
      if (s.get<bool>()) return kAnyNode;
      return fail("the schema 'false' at " + path + " admits no value");
    }
    if (!s.is_object()) return fail("the schema at " + path + " must be an object or a boolean");
    for (const auto& [k, v] : s.items()) {
      if (!supported().count(k) && !annotations().count(k))
        return fail("unsupported keyword '" + k + "' at " + path);
    }
    if (s.contains("$ref")) return compile_ref(s, path, depth);
    if (s.contains("anyOf")) return compile_any_of(s, path, depth);
    if (s.contains("enum") || s.contains("const")) return compile_literals(s, path);

    std::vector<std::string> types;
    if (auto it = s.find("type"); it != s.end()) {
      if (it->is_string()) {
        types.push_back(it->get<std::string>());
      } else if (it->is_array() && !it->empty()) {
        for (const json& t : *it) {
          if (!t.is_string()) return fail("'type' at " + path + " must be a string or a list of strings");
          types.push_back(t.get<std::string>());
        }
      } else {
        return fail("'type' at " + path + " must be a string or a non-empty list of strings");
      }
    } else {
      // No type: the keywords imply one (a valid subset of "any value"), or none is any value.
      std::set<std::string> implied;
      for (const auto& [k, v] : s.items()) {
        if (k == "properties" || k == "required" || k == "additionalProperties") implied.insert("object");
        if (k == "items" || k == "minItems" || k == "maxItems") implied.insert("array");
        if (k == "minLength" || k == "maxLength" || k == "pattern" || k == "format") implied.insert("string");
        if (k == "minimum" || k == "maximum" || k == "exclusiveMinimum" || k == "exclusiveMaximum")
          implied.insert("number");
      }
      if (implied.empty()) return kAnyNode;
      if (implied.size() > 1)
        return fail("the schema at " + path + " needs a 'type' (its keywords suit several)");
      types.push_back(*implied.begin());
    }
    if (types.size() == 1) return compile_typed(s, types[0], path, depth);
    Node any_of;
    any_of.kind = Kind::kAnyOf;
    for (const std::string& t : types) any_of.alts.push_back(compile_typed(s, t, path, depth));
    return add(std::move(any_of));
  }

  int32_t compile_any_of(const json& s, const std::string& path, int depth) {
    for (const auto& [k, v] : s.items()) {
      if (k != "anyOf" && !annotations().count(k))
        return fail("'anyOf' cannot be combined with '" + k + "' at " + path);
    }
    const json& alts = s["anyOf"];
    if (!alts.is_array() || alts.empty() || alts.size() > kMaxAlternatives)
      return fail("'anyOf' at " + path + " must be a list of 1 to 16 schemas");
    Node n;
    n.kind = Kind::kAnyOf;
    for (size_t i = 0; i < alts.size(); ++i)
      n.alts.push_back(compile(alts[i], path + "/anyOf/" + std::to_string(i), depth + 1));
    return add(std::move(n));
  }

  int32_t compile_literals(const json& s, const std::string& path) {
    std::vector<std::string> types;
    for (const auto& [k, v] : s.items()) {
      if (k == "enum" || k == "const" || annotations().count(k)) continue;
      if (k == "type") {
        if (v.is_string()) types.push_back(v.get<std::string>());
        if (v.is_array())
          for (const json& t : v)
            if (t.is_string()) types.push_back(t.get<std::string>());
        continue;
      }
      std::string message = s.contains("enum") ? "'enum'" : "'const'";
      message += " cannot be combined with '" + k + "' at " + path;
      return fail(std::move(message));
    }
    std::vector<json> values;
    if (s.contains("enum")) {
      const json& e = s["enum"];
      if (!e.is_array() || e.empty() || e.size() > kMaxLiterals)
        return fail("'enum' at " + path + " must be a list of 1 to 64 values");
      for (const json& v : e) values.push_back(v);
    }
    if (s.contains("const")) {
      const json& c = s["const"];
      if (s.contains("enum")) {
        if (std::find(values.begin(), values.end(), c) == values.end())
          return fail("'const' at " + path + " is not among its 'enum'");
        values = {c};
      } else {
        values.push_back(c);
      }
    }
    Node n;
    n.kind = Kind::kLiterals;
    for (const json& v : values) {
      bool typed = types.empty();
      for (const std::string& t : types) typed |= type_matches(v, t);
      if (!typed) continue;
      std::string text = v.dump();
      if (std::find(n.literals.begin(), n.literals.end(), text) == n.literals.end())
        n.literals.push_back(text);
    }
    if (n.literals.empty()) return fail("no value of 'enum' / 'const' at " + path + " matches its 'type'");
    return add(std::move(n));
  }

  std::optional<double> bound(const json& s, const char* key, const std::string& path) {
    auto it = s.find(key);
    if (it == s.end()) return std::nullopt;
    if (!it->is_number()) {
      fail(std::string("'") + key + "' at " + path + " must be a number");
      return std::nullopt;
    }
    return it->get<double>();
  }

  std::optional<int32_t> count(const json& s, const char* key, const std::string& path) {
    auto it = s.find(key);
    if (it == s.end()) return std::nullopt;
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > kMaxCount) {
      fail(std::string("'") + key + "' at " + path + " must be an integer in [0, " +
           std::to_string(kMaxCount) + "]");
      return std::nullopt;
    }
    return static_cast<int32_t>(it->get<int64_t>());
  }

  int32_t compile_number(const json& s, bool integer, const std::string& path) {
    Node n;
    n.kind = integer ? Kind::kInteger : Kind::kNumber;
    const auto mn = bound(s, "minimum", path), mx = bound(s, "maximum", path);
    const auto xmn = bound(s, "exclusiveMinimum", path), xmx = bound(s, "exclusiveMaximum", path);
    if (!error_.ok()) return kAnyNode;
    n.bounded = mn || mx || xmn || xmx;
    double ilo = -static_cast<double>(kIntLimit), ihi = static_cast<double>(kIntLimit);
    if (mn) ilo = std::max(ilo, std::ceil(*mn)), n.lo = std::max(n.lo, *mn);
    if (xmn) ilo = std::max(ilo, std::floor(*xmn) + 1), n.lo = std::max(n.lo, *xmn);
    if (mx) ihi = std::min(ihi, std::floor(*mx)), n.hi = std::min(n.hi, *mx);
    if (xmx) ihi = std::min(ihi, std::ceil(*xmx) - 1), n.hi = std::min(n.hi, *xmx);
    if (ilo > ihi)
      return fail(
          "minimum / maximum at " + path +
          ": no integer lies in the range (number ranges narrower than one integer are not supported)");
    n.int_min = static_cast<int64_t>(ilo);
    n.int_max = static_cast<int64_t>(ihi);
    return add(std::move(n));
  }

  // `pattern` (the regex subset of structured/regex.h) or `format` (a pattern of its own) into n.pattern.
  bool compile_pattern(const json& s, const std::string& path, Node& n) {
    const auto p = s.find("pattern"), f = s.find("format");
    if (p == s.end() && f == s.end()) return true;
    if (p != s.end() && f != s.end()) {
      fail("'pattern' and 'format' together at " + path + " are not supported");
      return false;
    }
    const char* word = p != s.end() ? "pattern" : "format";
    const json& v = p != s.end() ? *p : *f;
    if (!v.is_string()) {
      fail(std::string("'") + word + "' at " + path + " must be a string");
      return false;
    }
    if (s.contains("minLength") || s.contains("maxLength")) {
      fail(std::string("'") + word + "' with 'minLength' or 'maxLength' at " + path + " is not supported");
      return false;
    }
    std::string regex = v.get<std::string>();
    if (f != s.end()) {
      StatusOr<std::string> fp = format_pattern(regex);
      if (!fp.ok()) {
        fail("unsupported format '" + regex + "' at " + path +
             " (supported: date, date-time, time, email, uuid, ipv4)");
        return false;
      }
      regex = *fp;
    }
    RegexOptions options;
    options.json_string = true;
    auto dfa = compile_regex(regex, options);
    if (!dfa.ok()) {
      fail(std::string("'") + word + "' at " + path + ": " + dfa.status().message());
      return false;
    }
    n.pattern = std::move(*dfa);
    return true;
  }

  int32_t compile_typed(const json& s, const std::string& type, const std::string& path, int depth) {
    if (type == "null") return kNullNode;
    if (type == "boolean") return kBoolNode;
    if (type == "integer" || type == "number") return compile_number(s, type == "integer", path);
    if (type == "string") {
      Node n;
      n.kind = Kind::kString;
      n.min_len = count(s, "minLength", path).value_or(0);
      n.max_len = count(s, "maxLength", path).value_or(-1);
      if (n.max_len >= 0 && n.min_len > n.max_len) return fail("minLength > maxLength at " + path);
      if (!compile_pattern(s, path, n)) return kAnyNode;
      return error_.ok() ? add(std::move(n)) : kAnyNode;
    }
    if (type == "array") {
      Node n;
      n.kind = Kind::kArray;
      n.min_len = count(s, "minItems", path).value_or(0);
      n.max_len = count(s, "maxItems", path).value_or(-1);
      if (n.max_len >= 0 && n.min_len > n.max_len) return fail("minItems > maxItems at " + path);
      n.items = kAnyNode;
      if (auto it = s.find("items"); it != s.end()) {
        if (it->is_array())
          return fail("'items' at " + path + " must be one schema (tuples are not supported)");
        n.items = compile(*it, path + "/items", depth + 1);
      }
      return error_.ok() ? add(std::move(n)) : kAnyNode;
    }
    if (type == "object") return compile_object(s, path, depth);
    return fail("unknown type '" + type + "' at " + path);
  }

  int32_t compile_object(const json& s, const std::string& path, int depth) {
    Node n;
    n.kind = Kind::kObject;
    if (auto it = s.find("properties"); it != s.end()) {
      if (!it->is_object()) return fail("'properties' at " + path + " must be an object");
      if (it->size() > kMaxProperties) return fail("more than 64 properties at " + path);
      for (const auto& [name, sub] : it->items()) {
        Property p;
        p.key = json(name).dump();
        p.node = compile(sub, path + "/properties/" + pointer_token(name), depth + 1);
        n.props.push_back(std::move(p));
      }
    }
    if (auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) return fail("'required' at " + path + " must be a list of strings");
      for (const json& r : *it) {
        if (!r.is_string()) return fail("'required' at " + path + " must be a list of strings");
        const std::string key = json(r.get<std::string>()).dump();
        auto p =
            std::find_if(n.props.begin(), n.props.end(), [&](const Property& q) { return q.key == key; });
        if (p == n.props.end())
          return fail("required property " + key + " at " + path + " is not among its 'properties'");
        p->required = true;
      }
    }
    // Unset additionalProperties generates no other keys: a subset of what the schema allows.
    if (auto it = s.find("additionalProperties"); it != s.end()) {
      if (it->is_boolean()) {
        n.additional = it->get<bool>() ? kAnyNode : kNoNode;
      } else {
        n.additional = compile(*it, path + "/additionalProperties", depth + 1);
      }
    }
    // props are in the schema's order (ordered_json keeps it), and that is the order the
    // automaton generates them in: reason-then-answer schemas stay so.
    return error_.ok() ? add(std::move(n)) : kAnyNode;
  }

  const json& root_;
  Grammar g_;
  Status error_;
  std::map<std::string, int32_t> refs_;
  std::set<int32_t> pending_;
};

}  // namespace

Grammar base_grammar() {
  Grammar g;
  g.nodes.resize(kNumFixedNodes);
  g.nodes[kAnyNode].kind = Kind::kAny;
  g.nodes[kBoolNode].kind = Kind::kLiterals;
  g.nodes[kBoolNode].literals = {"true", "false"};
  g.nodes[kNullNode].kind = Kind::kLiterals;
  g.nodes[kNullNode].literals = {"null"};
  g.nodes[kAnyStringNode].kind = Kind::kString;
  g.nodes[kAnyNumberNode].kind = Kind::kNumber;
  g.nodes[kAnyArrayNode].kind = Kind::kArray;
  g.nodes[kAnyArrayNode].items = kAnyNode;
  g.nodes[kAnyObjectNode].kind = Kind::kObject;
  g.nodes[kAnyObjectNode].additional = kAnyNode;
  return g;
}

void compute_min_depth(Grammar& g) {
  for (Node& n : g.nodes) n.min_depth = kUnsatisfiable;
  auto md = [&](int32_t id) { return g.nodes[id].min_depth; };
  bool changed = true;
  while (changed) {
    changed = false;
    for (Node& n : g.nodes) {
      int32_t d = kUnsatisfiable;
      switch (n.kind) {
        case Kind::kAny: d = 0; break;
        case Kind::kInteger:
        case Kind::kNumber: d = n.int_min <= n.int_max ? 0 : kUnsatisfiable; break;
        case Kind::kString: d = (n.max_len < 0 || n.min_len <= n.max_len) ? 0 : kUnsatisfiable; break;
        case Kind::kLiterals: d = n.literals.empty() ? kUnsatisfiable : 0; break;
        case Kind::kArray:
          if (n.min_len == 0)
            d = 1;
          else if (md(n.items) != kUnsatisfiable)
            d = 1 + md(n.items);
          break;
        case Kind::kObject: {
          d = 1;
          for (const Property& p : n.props) {
            if (!p.required) continue;
            d = md(p.node) == kUnsatisfiable ? kUnsatisfiable : std::max(d, 1 + md(p.node));
            if (d == kUnsatisfiable) break;
          }
          break;
        }
        case Kind::kAnyOf:
          for (int32_t a : n.alts) d = std::min(d, md(a));
          break;
      }
      if (d > kMaxDepth) d = kUnsatisfiable;
      if (d < n.min_depth) {
        n.min_depth = d;
        changed = true;
      }
    }
  }
}

StatusOr<Grammar> compile_schema(const json& schema) {
  return Compiler(schema).run();
}

Grammar json_object_grammar() {
  Grammar g = base_grammar();
  g.root = kAnyObjectNode;
  compute_min_depth(g);
  return g;
}

}  // namespace nanoserve::structured
