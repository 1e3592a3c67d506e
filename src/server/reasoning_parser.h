#pragma once
// Splits a thinking model's output into reasoning and content (--reasoning-parser):
// what lies between <think> and </think> is reasoning_content, the rest content.
// A template that opens the thought itself (the prompt ends in "<think>", as
// DeepSeek-R1's and Qwen3's do) leaves the output starting inside it. Without
// a closing </think>, the whole output is reasoning when it started inside a
// thought. The tags never reach either part; blanks right after </think> are
// dropped. Incremental, so streaming and not give the same split.

#include <optional>
#include <string>
#include <string_view>

namespace nanoserve::server {

enum class ReasoningFormat { kNone, kThink };

// "deepseek_r1" | "qwen3" | "think" -> kThink.
std::optional<ReasoningFormat> reasoning_format_named(std::string_view name);

class ReasoningParser {
 public:
  // `prompt_tail`: the end of the rendered prompt (decides whether the output starts inside a thought).
  explicit ReasoningParser(std::string_view prompt_tail);

  // Appends to `reasoning` and `content` what the new text can be told to be now.
  void feed(std::string_view text, std::string* reasoning, std::string* content);
  void finish(std::string* reasoning, std::string* content);

 private:
  enum class Mode { kStart, kReasoning, kAfterEnd, kContent };
  void run(bool final, std::string* reasoning, std::string* content);
  Mode mode_ = Mode::kStart;
  std::string buf_;
};

}  // namespace nanoserve::server
