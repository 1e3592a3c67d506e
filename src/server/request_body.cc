#include "server/request_body.h"

#include <string>

namespace nanoserve::server {

using nlohmann::json;

namespace {

constexpr int kMaxJsonDepth = 64;

// nlohmann parses iteratively, but later copies recurse: refuse absurd nesting up front.
bool nesting_within(std::string_view body, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

// Reads a body only to learn where and why it is not JSON; keeps no values.
class FirstJsonError final : public nlohmann::json_sax<json> {
 public:
  size_t position = 0;
  int id = 0;  // nlohmann's exception id: 101 syntax error, 406 number out of range, ...

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::json::exception& ex) override {
    position = pos;
    id = ex.id;
    return false;
  }
};

// Says where the body stops being JSON, without quoting it (the token may be megabytes long).
ApiError invalid_json(std::string_view body) {
  FirstJsonError e;
  json::sax_parse(body, &e);
  std::string where = " (at byte " + std::to_string(e.position) + ").";
  if (e.id == 406) return bad_request("Request body holds a number beyond the range of a double" + where);
  return bad_request("Request body is not valid JSON" + where);
}

}  // namespace

std::variant<json, ApiError> parse_object(std::string_view body) {
  if (!nesting_within(body, kMaxJsonDepth)) {
    return bad_request("JSON nesting is deeper than " + std::to_string(kMaxJsonDepth) + " levels.");
  }
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_json(body);
  if (!j.is_object()) return bad_request("Request body must be a JSON object.");
  return j;
}

// Reads optional fields of one JSON object; the first failure sticks.

}  // namespace nanoserve::server
