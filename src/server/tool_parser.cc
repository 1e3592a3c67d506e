#include "server/tool_parser.h"

#include <nlohmann/json.hpp>

namespace nanoserve::server {

namespace {

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralOpen = "[TOOL_CALLS]";

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

size_t skip_ws(std::string_view s, size_t pos) {
  while (pos < s.size() && is_ws(s[pos])) ++pos;
  return pos;
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// The top-level keys of a (partial) call object: where "name" and the arguments are.
struct CallScan {
  bool invalid = false;
  size_t begin = std::string::npos;  // the '{'
  size_t end = std::string::npos;    // one past the '}', once complete
  std::optional<std::string> name;
  size_t args_begin = std::string::npos, args_end = std::string::npos;
  bool args_is_string = false;
};

CallScan scan_call(std::string_view s) {
  CallScan cs;
  size_t p = skip_ws(s, 0);
  if (p >= s.size()) return cs;
  if (s[p] != '{') {
    cs.invalid = true;
    return cs;
  }
  cs.begin = p++;
  while (true) {
    p = skip_ws(s, p);
    if (p >= s.size()) return cs;
    if (s[p] == '}') {
      cs.end = p + 1;
      return cs;
    }
    if (s[p] != '"') {
      cs.invalid = true;
      return cs;
    }
    const size_t key_end = scan_json_value(s, p);
    if (key_end == kInvalidJson) {
      cs.invalid = true;
      return cs;
    }
    if (key_end == std::string::npos) return cs;
    auto key = nlohmann::json::parse(s.substr(p, key_end - p), nullptr, false);
    if (!key.is_string()) {
      cs.invalid = true;
      return cs;
    }
    p = skip_ws(s, key_end);
    if (p >= s.size()) return cs;
    if (s[p] != ':') {
      cs.invalid = true;
      return cs;
    }
    p = skip_ws(s, p + 1);
    if (p >= s.size()) return cs;
    const size_t v_end = scan_json_value(s, p);
    if (v_end == kInvalidJson) {
      cs.invalid = true;
      return cs;
    }
    const std::string& k = key.get_ref<const std::string&>();
    const bool is_args = k == "arguments" || k == "parameters";
    if (is_args) {
      cs.args_begin = p;
      cs.args_is_string = s[p] == '"';
    }
    if (v_end == std::string::npos) return cs;
    if (is_args) cs.args_end = v_end;
    if (k == "name") {
      auto name = nlohmann::json::parse(s.substr(p, v_end - p), nullptr, false);
      if (!name.is_string()) {
        cs.invalid = true;
        return cs;
      }
      cs.name = name.get<std::string>();
    }
    p = skip_ws(s, v_end);
    if (p >= s.size()) return cs;
    if (s[p] == ',') {
      ++p;
    } else if (s[p] != '}') {
      cs.invalid = true;
      return cs;
    }
  }
}

}  // namespace

size_t scan_json_value(std::string_view s, size_t pos) {
  pos = skip_ws(s, pos);
  if (pos >= s.size()) return std::string::npos;
  const char c = s[pos];
  if (c == '{' || c == '[') {
    int depth = 0;
    bool in_string = false;
    for (size_t i = pos; i < s.size(); ++i) {
      const char b = s[i];
      if (in_string) {
        if (b == '\\')
          ++i;
        else if (b == '"')
          in_string = false;
      } else if (b == '"') {
        in_string = true;
      } else if (b == '{' || b == '[') {
        ++depth;
      } else if (b == '}' || b == ']') {
        if (--depth == 0) return i + 1;
      }
    }
    return std::string::npos;
  }
  if (c == '"') {
    for (size_t i = pos + 1; i < s.size(); ++i) {
      if (s[i] == '\\')
        ++i;
      else if (s[i] == '"')
        return i + 1;
    }
    return std::string::npos;
  }
  if (c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n') {
    for (size_t i = pos; i < s.size(); ++i) {
      const char b = s[i];
      if (b == ',' || b == '}' || b == ']' || is_ws(b)) return i;
    }
    return std::string::npos;  // a number may still grow
  }
  return kInvalidJson;
}

std::optional<ToolFormat> tool_format_named(std::string_view name) {
  if (name == "hermes" || name == "qwen" || name == "qwen25" || name == "qwen3") return ToolFormat::kHermes;
  if (name == "llama3_json" || name == "llama3" || name == "llama") return ToolFormat::kLlama3Json;
  if (name == "mistral") return ToolFormat::kMistral;
  return std::nullopt;
}

const char* tool_format_name(ToolFormat f) {
  switch (f) {
    case ToolFormat::kHermes: return "hermes";
    case ToolFormat::kLlama3Json: return "llama3_json";
    case ToolFormat::kMistral: return "mistral";
    case ToolFormat::kNone: break;
  }
  return "none";
}

ToolFormat tool_format_of_template(std::string_view src) {
  if (src.find(kMistralOpen) != std::string_view::npos) return ToolFormat::kMistral;
  if (src.find(kHermesOpen) != std::string_view::npos) return ToolFormat::kHermes;
  if (src.find(kPythonTag) != std::string_view::npos ||
      src.find("\"parameters\": ") != std::string_view::npos)
    return ToolFormat::kLlama3Json;
  return ToolFormat::kNone;
}

std::string_view tool_call_marker(ToolFormat format) {
  switch (format) {
    case ToolFormat::kHermes: return kHermesOpen;
    case ToolFormat::kLlama3Json: return kPythonTag;
    case ToolFormat::kMistral: return kMistralOpen;
    case ToolFormat::kNone: break;
  }
  return {};
}

void ToolCallParser::feed(std::string_view text, ParsedText* out) {
  buf_.append(text);
  run(out, /*final=*/false);
}

void ToolCallParser::finish(ParsedText* out) {
  run(out, /*final=*/true);
  if (!buf_.empty()) emit_content(buf_, out);
  buf_.clear();
}

void ToolCallParser::run(ParsedText* out, bool final) {
  while (true) {
    switch (mode_) {
      case Mode::kStart: {
        if (format_ != ToolFormat::kLlama3Json) {
          mode_ = Mode::kText;
          break;
        }
        // Llama 3: a call is the whole output, from its first non-blank byte.
        const size_t p = skip_ws(buf_, 0);
        if (p >= buf_.size()) {
          if (final) return;
          return;  // only blanks so far: held
        }
        std::string_view rest = std::string_view(buf_).substr(p);
        if (starts_with(rest, kPythonTag)) {
          open_ = Open{};
          open_->content_if_invalid = buf_.substr(0, p + kPythonTag.size());
          buf_.erase(0, p + kPythonTag.size());
          mode_ = Mode::kCall;
          break;
        }
        if (!final && starts_with(kPythonTag, rest)) return;
        if (rest[0] == '{') {
          open_ = Open{};
          open_->content_if_invalid = buf_.substr(0, p);
          buf_.erase(0, p);
          mode_ = Mode::kCall;
          break;
        }
        mode_ = Mode::kPlain;
        break;
      }
      case Mode::kPlain:
        emit_content(buf_, out);
        buf_.clear();
        return;
      case Mode::kText: {
        const std::string_view m = tool_call_marker(format_);
        if (format_ == ToolFormat::kNone || format_ == ToolFormat::kLlama3Json) {
          mode_ = Mode::kPlain;
          break;
        }
        const size_t at = buf_.find(m);
        if (at != std::string::npos) {
          emit_content(std::string_view(buf_).substr(0, at), out);
          buf_.erase(0, at + m.size());
          open_ = Open{};
          open_->content_if_invalid = std::string(m);
          in_array_ = false;
          mode_ = Mode::kCall;
          break;
        }
        // Hold back the longest tail that may still become the marker.
        size_t keep = 0;
        if (!final) {
          for (size_t k = std::min(m.size() - 1, buf_.size()); k > 0; --k) {
            if (std::string_view(buf_).substr(buf_.size() - k) == m.substr(0, k)) {
              keep = k;
              break;
            }
          }
        }
        emit_content(std::string_view(buf_).substr(0, buf_.size() - keep), out);
        buf_.erase(0, buf_.size() - keep);
        return;
      }
      case Mode::kCall:
        if (!step_call(out, final)) return;
        break;
      case Mode::kAfterClose: {
        // Blanks between calls (or after the last) are not content.
        const size_t p = skip_ws(buf_, 0);
        if (p >= buf_.size()) {
          if (final) buf_.clear();
          return;
        }
        buf_.erase(0, p);
        mode_ = Mode::kText;
        break;
      }
      case Mode::kAfterCall: {
        const size_t p = skip_ws(buf_, 0);
        if (p >= buf_.size()) {
          if (final) buf_.clear();
          return;
        }
        std::string_view rest = std::string_view(buf_).substr(p);
        if (format_ == ToolFormat::kHermes) {
          if (starts_with(rest, kHermesClose)) {
            buf_.erase(0, p + kHermesClose.size());
            mode_ = Mode::kAfterClose;
          } else if (!final && starts_with(kHermesClose, rest)) {
            return;
          } else {
            buf_.erase(0, p);
            mode_ = Mode::kText;
          }
        } else if (format_ == ToolFormat::kLlama3Json) {
          if (rest[0] == ';') {
            buf_.erase(0, p + 1);
            open_ = Open{};
            mode_ = Mode::kCall;
          } else if (starts_with(rest, kPythonTag)) {
            buf_.erase(0, p + kPythonTag.size());
            open_ = Open{};
            mode_ = Mode::kCall;
          } else if (!final && starts_with(kPythonTag, rest)) {
            return;
          } else {
            buf_.erase(0, p);
            mode_ = Mode::kPlain;
          }
        } else {  // mistral: the array goes on or ends
          if (rest[0] == ',') {
            buf_.erase(0, p + 1);
            open_ = Open{};
            mode_ = Mode::kCall;
          } else {
            buf_.erase(0, p + (rest[0] == ']' ? 1 : 0));
            in_array_ = false;
            mode_ = Mode::kText;
          }
        }
        break;
      }
    }
  }
}

bool ToolCallParser::step_call(ParsedText* out, bool final) {
  Open& o = *open_;
  auto give_up = [&] {
    // Not a call after all: the marker and the text are content (nothing of it went out as a call).
    if (!o.name_sent) emit_content(o.content_if_invalid, out);
    open_.reset();
    mode_ = format_ == ToolFormat::kLlama3Json ? Mode::kPlain : Mode::kText;
    return true;
  };
  if (format_ == ToolFormat::kMistral && !in_array_) {
    const size_t p = skip_ws(buf_, 0);
    if (p >= buf_.size()) {
      if (final) return give_up();
      return false;
    }
    if (buf_[p] != '[') return give_up();
    buf_.erase(0, p + 1);
    in_array_ = true;
  }
  CallScan cs = scan_call(buf_);
  if (cs.invalid) return give_up();
  if (cs.name && !o.name_sent) {
    o.id = new_id_();
    ToolCallDelta d;
    d.index = static_cast<int>(done_.size());
    d.id = o.id;
    d.name = *cs.name;
    d.first = true;
    out->calls.push_back(std::move(d));
    o.name_sent = true;
  }
  auto push_args = [&](std::string text) {
    if (text.empty()) return;
    if (!out->calls.empty() && out->calls.back().index == static_cast<int>(done_.size())) {
      out->calls.back().arguments += text;
    } else {
      ToolCallDelta d;
      d.index = static_cast<int>(done_.size());
      d.arguments = std::move(text);
      out->calls.push_back(std::move(d));
    }
  };
  if (o.name_sent && cs.args_begin != std::string::npos && !cs.args_is_string) {
    const size_t end = cs.args_end != std::string::npos ? cs.args_end : buf_.size();
    const size_t from = cs.args_begin + o.args_sent;
    if (end > from) {
      push_args(buf_.substr(from, end - from));
      o.args_sent = end - cs.args_begin;
    }
  }
  if (cs.end == std::string::npos) {
    if (!final) return false;
    // Cut off inside the call (max_tokens): what went out stays; an unnamed call is content.
    if (!o.name_sent) emit_content(o.content_if_invalid + buf_, out);
    buf_.clear();
    open_.reset();
    mode_ = Mode::kPlain;
    return true;
  }
  // Complete: it must parse as a whole.
  auto whole =
      nlohmann::json::parse(std::string_view(buf_).substr(cs.begin, cs.end - cs.begin), nullptr, false);
  if (whole.is_discarded() || !cs.name) return give_up();
  ToolCall call{o.id, *cs.name, "{}"};
  if (cs.args_begin != std::string::npos) {
    if (cs.args_is_string) {
      auto s =
          nlohmann::json::parse(std::string_view(buf_).substr(cs.args_begin, cs.args_end - cs.args_begin));
      call.arguments = s.get<std::string>();
      push_args(call.arguments);
    } else {
      call.arguments = buf_.substr(cs.args_begin, cs.args_end - cs.args_begin);
    }
  } else {
    push_args(call.arguments);
  }
  done_.push_back(std::move(call));
  buf_.erase(0, cs.end);
  open_.reset();
  mode_ = Mode::kAfterCall;
  return true;
}

}  // namespace nanoserve::server
