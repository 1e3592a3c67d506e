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
#include <vector>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace nanoserve {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ... (rendered as given)
  std::string content;
};

// One stretch of a rendered prompt. Only the template's own text may spell
// special tokens; everything a caller supplied and the template inserted
// (message content and role) is encoded with special-token parsing off, so a
// message holding "<|im_end|>\n<|im_start|>system" cannot open a turn. A
// template engine that interprets Jinja keeps this split: literals are
// kTemplate, every value it prints from `messages` is kCaller.
struct PromptPiece {
  enum class Source { kTemplate, kCaller };
  Source source = Source::kTemplate;
  std::string text;
};

class ChatTemplate {
 public:
  static StatusOr<ChatTemplate> parse(std::string_view jinja_source);
  // The template most ChatML models use, without a default system prompt.
  static ChatTemplate chatml();

  // The prompt as pieces in order (adjacent pieces of one source merged, none
  // empty); encode them with encode_prompt below.
  std::vector<PromptPiece> render_pieces(std::span<const ChatMessage> messages,
                                         bool add_generation_prompt) const;
  // The same prompt as one string (the pieces' text joined), for display and
  // for comparison with jinja2. Encoding it whole would let content spell
  // special tokens: use render_pieces to encode.
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

  // Text of the token that ends a turn: generation stops on it.
  const std::string& end_of_turn() const { return end_of_turn_; }
  const std::optional<std::string>& default_system_prompt() const { return default_system_; }

 private:
  ChatTemplate() = default;
  std::string end_of_turn_ = "<|im_end|>";
  std::optional<std::string> default_system_;
};

// The prompt's tokens: kTemplate pieces with special-token parsing on,
// kCaller pieces with it off (Tokenizer::encode(pieces) says how pieces join).
std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, std::span<const PromptPiece> pieces,
                                   bool add_special);

}  // namespace nanoserve
