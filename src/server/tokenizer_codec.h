#pragma once
// The model's Tokenizer and chat template as the server's ModelCodec.

#include "server/model_codec.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace nanoserve::server {

class TokenizerCodec final : public ModelCodec {
 public:
  // `tokenizer` must outlive the codec.
  // `chat_template`: the template chats render with, or why there is none (given to each chat
  // request that brings no template of its own).
  TokenizerCodec(const Tokenizer& tokenizer, StatusOr<ChatTemplate> chat_template)
      : tokenizer_(tokenizer), template_(std::move(chat_template)) {}

  // Completions prompts: special-token text is recognised, as Hugging Face tokenizers do
  // (the raw prompt is the caller's own text, special tokens included).
  StatusOr<std::vector<int32_t>> encode(std::string_view text, bool add_special_tokens) const override;
  // The template's own text carries the special tokens; message content and
  // roles are encoded with special-token parsing off. No BOS/EOS is added.
  using ModelCodec::encode_chat;
  StatusOr<std::vector<int32_t>> encode_chat(const std::vector<ChatMessage>& messages,
                                             const ChatTemplateRequest& options) const override;
  std::string decode(std::span<const int32_t> ids) const override { return tokenizer_.decode(ids); }
  std::string token_text(int32_t id) const override { return tokenizer_.token_to_piece(id); }
  int64_t vocab_size() const override { return tokenizer_.n_vocab(); }
  bool is_special(int32_t id) const override { return tokenizer_.is_special(id); }
  std::vector<int32_t> eos_ids() const override { return tokenizer_.eos_ids(); }
  std::optional<int32_t> chat_end_of_turn_id(const ChatTemplateRequest& options) const override {
    const std::string_view eot = chat_end_of_turn(options.chat_template ? std::string_view(*options.chat_template)
                                                  : template_.ok()       ? std::string_view(template_->source())
                                                                         : std::string_view());
    return eot.empty() ? std::nullopt : tokenizer_.token_id(eot);
  }
  std::string chat_template_source() const override {
    return template_.ok() ? template_->source() : std::string();
  }

 private:
  const Tokenizer& tokenizer_;
  StatusOr<ChatTemplate> template_;
};

}  // namespace nanoserve::server
