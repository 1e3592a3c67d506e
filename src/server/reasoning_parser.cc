#include "server/reasoning_parser.h"

#include <algorithm>

namespace nanoserve::server {

namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

size_t first_non_blank(std::string_view s) {
  const size_t p = s.find_first_not_of(" \t\r\n");
  return p == std::string_view::npos ? s.size() : p;
}

// The longest tail of `s` that is a proper prefix of `tag`.
size_t partial_tag(std::string_view s, std::string_view tag) {
  for (size_t k = std::min(tag.size() - 1, s.size()); k > 0; --k) {
    if (s.substr(s.size() - k) == tag.substr(0, k)) return k;
  }
  return 0;
}

}  // namespace

std::optional<ReasoningFormat> reasoning_format_named(std::string_view name) {
  if (name == "deepseek_r1" || name == "qwen3" || name == "think") return ReasoningFormat::kThink;
  return std::nullopt;
}

ReasoningParser::ReasoningParser(std::string_view prompt_tail) {
  const size_t end = prompt_tail.find_last_not_of(" \t\r\n");
  const std::string_view t =
      end == std::string_view::npos ? std::string_view() : prompt_tail.substr(0, end + 1);
  if (t.size() >= kOpen.size() && t.substr(t.size() - kOpen.size()) == kOpen) mode_ = Mode::kReasoning;
}

void ReasoningParser::feed(std::string_view text, std::string* reasoning, std::string* content) {
  buf_.append(text);
  run(false, reasoning, content);
}

void ReasoningParser::finish(std::string* reasoning, std::string* content) {
  run(true, reasoning, content);
  // What is left: a partial tag at the end is text of the part it was in.
  if (mode_ == Mode::kReasoning)
    reasoning->append(buf_);
  else
    content->append(buf_);
  buf_.clear();
}

void ReasoningParser::run(bool final, std::string* reasoning, std::string* content) {
  while (true) {
    switch (mode_) {
      case Mode::kStart: {
        const size_t p = first_non_blank(buf_);
        std::string_view rest = std::string_view(buf_).substr(p);
        if (rest.substr(0, kOpen.size()) == kOpen) {
          buf_.erase(0, p + kOpen.size());
          mode_ = Mode::kReasoning;
          break;
        }
        if (!final && kOpen.substr(0, rest.size()) == rest) return;  // may still be <think>
        mode_ = Mode::kContent;
        break;
      }
      case Mode::kReasoning: {
        const size_t at = buf_.find(kClose);
        if (at != std::string::npos) {
          reasoning->append(buf_, 0, at);
          buf_.erase(0, at + kClose.size());
          mode_ = Mode::kAfterEnd;
          break;
        }
        const size_t keep = final ? 0 : partial_tag(buf_, kClose);
        reasoning->append(buf_, 0, buf_.size() - keep);
        buf_.erase(0, buf_.size() - keep);
        return;
      }
      case Mode::kAfterEnd: {
        const size_t p = first_non_blank(buf_);
        buf_.erase(0, p);
        if (buf_.empty()) return;
        mode_ = Mode::kContent;
        break;
      }
      case Mode::kContent:
        content->append(buf_);
        buf_.clear();
        return;
    }
  }
}

}  // namespace nanoserve::server
