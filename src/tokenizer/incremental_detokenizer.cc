#include "tokenizer/incremental_detokenizer.h"

#include "tokenizer/utf8.h"

namespace nanoserve {

std::string IncrementalDetokenizer::push(int32_t id) {
  if (skip_special_ && tok_->is_special(id)) return {};
  pending_ += tok_->token_to_piece(id);
  size_t hold = utf8::incomplete_tail(pending_);
  std::string_view ready(pending_.data(), pending_.size() - hold);
  std::string out = utf8::is_valid(ready) ? std::string(ready) : utf8::sanitize(ready);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string IncrementalDetokenizer::flush() {
  std::string out = utf8::sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace nanoserve
