#include "server/tokenizer_codec.h"

namespace nanoserve::server {

StatusOr<std::vector<int32_t>> TokenizerCodec::encode(std::string_view text, bool add_special_tokens) const {
  return tokenizer_.encode(text, add_special_tokens, /*parse_special=*/true);
}

StatusOr<std::vector<int32_t>> TokenizerCodec::encode_chat(const std::vector<ChatMessage>& messages,
                                                           bool add_generation_prompt) const {
  std::string prompt = template_.render(messages, add_generation_prompt);
  return tokenizer_.encode(prompt, /*add_special=*/false, /*parse_special=*/true);
}

}  // namespace nanoserve::server
