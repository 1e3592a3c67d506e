#include "server/tokenizer_codec.h"

namespace nanoserve::server {

StatusOr<std::vector<int32_t>> TokenizerCodec::encode(std::string_view text, bool add_special_tokens) const {
  return tokenizer_.encode(text, add_special_tokens, /*parse_special=*/true);
}

StatusOr<std::vector<int32_t>> TokenizerCodec::encode_chat(const std::vector<ChatMessage>& messages,
                                                           bool add_generation_prompt) const {
  // Content and roles never become special tokens: only the template's text does.
  return encode_prompt(tokenizer_, template_.render_pieces(messages, add_generation_prompt),
                       /*add_special=*/false);
}

}  // namespace nanoserve::server
