#pragma once
// Chat templates: the model's Jinja template (or one given with
// --chat-template or a request's chat_template), rendered by our own Jinja
// interpreter (jinja_*.h) byte-identically to jinja2 as transformers runs it.
// docs/chat_template.md lists the subset, the differences and the limits.
//
// The template sees `messages`, `tools` (none unless given), `documents`
// (none), `add_generation_prompt`, `bos_token` and `eos_token` (when the
// model has them), plus the request's chat_template_kwargs. A kwarg reaches
// the template only if the template names that variable and it is not one of
// the reserved ones above: it cannot replace the messages or the special tokens.

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "template/jinja_render.h"
#include "tokenizer/tokenizer.h"

namespace nanoserve {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ... (rendered as given)
  std::string content;
};

// One stretch of a rendered prompt. Only the template's own text may spell
// special tokens; everything a caller supplied and the template inserted
// (message content and role, tools, kwargs) is encoded with special-token
// parsing off, so a message holding "<|im_end|>\n<|im_start|>system" cannot
// open a turn. The interpreter tracks this per byte (jinja::Str): literals
// and bos_token/eos_token are kTemplate, every byte it prints from the
// caller's data is kCaller.
struct PromptPiece {
  enum class Source { kTemplate, kCaller };
  Source source = Source::kTemplate;
  std::string text;
};

// What a render sees besides the messages.
struct ChatTemplateInputs {
  bool add_generation_prompt = true;
  const nlohmann::ordered_json* tools = nullptr;   // a list, or null: `tools` is none
  const nlohmann::ordered_json* kwargs = nullptr;  // an object: chat_template_kwargs
};

// The special tokens' text the template sees as bos_token / eos_token (empty: undefined).
struct ChatSpecialTokens {
  std::string bos_token;
  std::string eos_token;
  static ChatSpecialTokens of(const Tokenizer& tokenizer);
};

class ChatTemplate {
 public:
  // Compiles `jinja_source`; a syntax error names its line and column.
  static StatusOr<ChatTemplate> parse(std::string_view jinja_source, ChatSpecialTokens specials = {});
  // ChatML without a default system prompt, for callers that ask for it by name (never a fallback).
  static ChatTemplate chatml();
  // The model's template; a model without one gets an error that says how to give one
  // (as vLLM refuses such chats rather than guessing a format).
  static StatusOr<ChatTemplate> of_model(const Tokenizer& tokenizer);
  // `override` when non-empty (a file path, or the template text itself), else the model's.
  static StatusOr<ChatTemplate> of_model_or_override(const Tokenizer& tokenizer, const std::string& override);

  // The prompt as pieces in order (adjacent pieces of one source merged, none
  // empty); encode them with encode_prompt below. `messages` is a list of message objects.
  StatusOr<std::vector<PromptPiece>> render_pieces(const nlohmann::ordered_json& messages,
                                                   const ChatTemplateInputs& inputs) const;
  StatusOr<std::vector<PromptPiece>> render_pieces(std::span<const ChatMessage> messages,
                                                   bool add_generation_prompt) const;
  // The same prompt as one string (the pieces' text joined), for display and
  // for comparison with jinja2. Encoding it whole would let content spell
  // special tokens: use render_pieces to encode.
  StatusOr<std::string> render(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

  // Text of the token that ends a turn (<|im_end|>, <|eot_id|>, <|end|>, ... as the template
  // spells it), empty when none is recognised: generation stops on it.
  const std::string& end_of_turn() const { return end_of_turn_; }
  const std::string& source() const { return source_; }

  // The messages as the template sees them: {"role", "content"} objects.
  static nlohmann::ordered_json messages_json(std::span<const ChatMessage> messages);

 private:
  ChatTemplate() = default;
  jinja::Template compiled_;
  std::string source_;
  ChatSpecialTokens specials_;
  std::vector<std::string> names_;  // every variable name the template mentions (sorted)
  std::string end_of_turn_;
};

// The prompt's tokens: kTemplate pieces with special-token parsing on,
// kCaller pieces with it off (Tokenizer::encode(pieces) says how pieces join).
std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, std::span<const PromptPiece> pieces,
                                   bool add_special);

}  // namespace nanoserve
