#pragma once
// What the server needs from the tokenizer: encode text and chats, decode ids,
// and spell single tokens for logprobs. Called concurrently from HTTP threads,
// so implementations must be safe for concurrent const use.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "server/protocol.h"

namespace nanoserve::server {

class ModelCodec {
 public:
  virtual ~ModelCodec() = default;
  virtual StatusOr<std::vector<int32_t>> encode(std::string_view text, bool add_special_tokens) const = 0;
  // Renders the chat template (the request's own when it gives one), then encodes: special tokens
  // come only from the template's own text, never from message content. A template that cannot
  // be compiled or rendered (or a model without one) is an error for the caller.
  virtual StatusOr<std::vector<int32_t>> encode_chat(const std::vector<ChatMessage>& messages,
                                                     const ChatTemplateRequest& options) const = 0;
  StatusOr<std::vector<int32_t>> encode_chat(const std::vector<ChatMessage>& messages,
                                             bool add_generation_prompt) const {
    ChatTemplateRequest options;
    options.add_generation_prompt = add_generation_prompt;
    return encode_chat(messages, options);
  }
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // The bytes of one token as text (may be a partial UTF-8 sequence).
  virtual std::string token_text(int32_t id) const = 0;
  virtual int64_t vocab_size() const = 0;
  // Structured output: control tokens are never allowed as text; end tokens close the output.
  virtual bool is_special(int32_t) const { return false; }
  virtual std::vector<int32_t> eos_ids() const { return {}; }
  // The end-of-turn token of the template a chat renders with (the request's own when it gives
  // one), when the template ends turns with one the vocabulary holds: the reply ends on it, also
  // where it is not among the model's eos ids (an overriding template's).
  virtual std::optional<int32_t> chat_end_of_turn_id(const ChatTemplateRequest&) const { return std::nullopt; }
  // The model's chat template source (empty when it has none): tool calls take its format.
  virtual std::string chat_template_source() const { return {}; }
};

}  // namespace nanoserve::server
