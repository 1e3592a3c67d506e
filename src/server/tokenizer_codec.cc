#include "server/tokenizer_codec.h"

namespace nanoserve::server {

StatusOr<std::vector<int32_t>> TokenizerCodec::encode(std::string_view text, bool add_special_tokens) const {
  return tokenizer_.encode(text, add_special_tokens, /*parse_special=*/true);
}

StatusOr<std::vector<int32_t>> TokenizerCodec::encode_chat(const std::vector<ChatMessage>& messages,
                                                           const ChatTemplateRequest& options) const {
  std::optional<StatusOr<ChatTemplate>> own;
  if (options.chat_template)
    own = ChatTemplate::parse(*options.chat_template, ChatSpecialTokens::of(tokenizer_));
  const StatusOr<ChatTemplate>& t = own ? *own : template_;
  if (!t.ok()) return t.status();
  ChatTemplateInputs in;
  in.add_generation_prompt = options.add_generation_prompt;
  in.kwargs = options.kwargs ? &*options.kwargs : nullptr;
  in.tools = options.tools ? &*options.tools : nullptr;
  auto pieces = options.messages ? t->render_pieces(*options.messages, in)
                                 : t->render_pieces(ChatTemplate::messages_json(messages), in);
  if (!pieces.ok()) return pieces.status();
  // Content and roles never become special tokens: only the template's text does.
  return encode_prompt(tokenizer_, *pieces, /*add_special=*/false);
}

}  // namespace nanoserve::server
