#include "tokenizer/hf_components.h"

namespace nanoserve::hf {

using nlohmann::json;

std::string type_of(const json& j) {
  auto t = j.find("type");
  return t != j.end() && t->is_string() ? t->get<std::string>() : std::string("?");
}

Status bad(const std::string& path, const std::string& what) {
  return data_loss("'" + path + "': " + what);
}

Status unsupported(const std::string& path, const std::string& what) {
  return unimplemented("'" + path + "': " + what);
}

std::string quote_name(std::string_view s) {
  std::string out = "'";
  out.append(s.substr(0, 40));
  out.push_back('\'');
  return out;
}

Status unsupported_type(const std::string& path, const std::string& type, const char* supported) {
  std::string what = "'";
  what.append(type, 0, 40);
  what.append("' is not supported (").append(supported).append(" are)");
  return unsupported(path, what);
}

StatusOr<bool> bool_field(const json& j, const char* key, bool dflt, const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) return bad(path + "." + key, "expected true or false");
  return it->get<bool>();
}

StatusOr<std::string> string_field(const json& j, const char* key, const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return bad(path + "." + key, "missing or not a string");
  std::string s = it->get<std::string>();
  if (!utf8::is_valid(s)) return bad(path + "." + key, "not valid UTF-8");
  return s;
}

StatusOr<PatternSpec> pattern_field(const json& j, const char* key, const std::string& path) {
  auto it = j.find(key);
  const std::string field = path + "." + key;
  if (it == j.end() || !it->is_object()) return bad(field, "expected {\"String\": ...} or {\"Regex\": ...}");
  PatternSpec p;
  if (auto s = it->find("String"); s != it->end() && s->is_string()) {
    p.text = s->get<std::string>();
  } else if (auto r = it->find("Regex"); r != it->end() && r->is_string()) {
    p.text = r->get<std::string>();
    p.regex = true;
  } else {
    return bad(field, "expected {\"String\": ...} or {\"Regex\": ...}");
  }
  if (!utf8::is_valid(p.text)) return bad(field, "not valid UTF-8");
  if (p.text.empty()) return unsupported(field, "an empty pattern is not supported");
  return p;
}

bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

}  // namespace nanoserve::hf
