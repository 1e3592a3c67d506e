#pragma once
// Chat templates. Rather than a Jinja interpreter, this recognises the
// template shapes in use and renders them natively, byte-identical to what
// jinja2 (as transformers runs it: trim_blocks, lstrip_blocks) produces.
//
// Recognised: ChatML,
//   {% for message in messages %}
//   [{% if loop.first and messages[0]['role'] != 'system' %}
//      {{ '<|im_start|>system\n<DEFAULT SYSTEM PROMPT><|im_end|>\n' }}{% endif %}]
//   {{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}
//   {% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}
// with or without the default-system-prompt block (SmolLM2 has it: "You are a
// helpful AI assistant named SmolLM, trained by Hugging Face"). Whitespace
// between tags, quote style and '\n' written as an escape or a real newline
// do not matter. Anything else is UNIMPLEMENTED.

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"

namespace nanoserve {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ... (rendered as given)
  std::string content;
};

class ChatTemplate {
 public:
  static StatusOr<ChatTemplate> parse(std::string_view jinja_source);
  // The template most ChatML models use, without a default system prompt.
  static ChatTemplate chatml();

  // The prompt text; encode it with parse_special = true.
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

  // Text of the token that ends a turn: generation stops on it.
  const std::string& end_of_turn() const { return end_of_turn_; }
  const std::optional<std::string>& default_system_prompt() const { return default_system_; }

 private:
  ChatTemplate() = default;
  std::string end_of_turn_ = "<|im_end|>";
  std::optional<std::string> default_system_;
};

}  // namespace nanoserve
