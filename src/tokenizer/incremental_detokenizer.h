#pragma once
// Streaming detokenizer: turns generated ids into text chunks that are always
// valid UTF-8. Bytes that start a UTF-8 sequence not yet complete are held
// back until the token that completes them arrives; flush() ends the stream,
// turning a still-incomplete tail into U+FFFD. Bytes that can never become
// valid are replaced at once, exactly as Tokenizer::decode does, so the
// concatenation of all chunks equals decode() of all ids; for a
// SentencePiece-style vocab, except the one leading space that decode drops
// (the stream continues a prompt, so a first "▁Hello" is " Hello").

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace nanoserve {

class IncrementalDetokenizer {
 public:
  // `tok` must outlive this object.
  explicit IncrementalDetokenizer(const Tokenizer& tok, bool skip_special = false)
      : tok_(&tok), skip_special_(skip_special) {}

  // The text completed by this token (possibly empty).
  std::string push(int32_t id);
  // The held-back bytes, an incomplete tail as U+FFFD; then the state is empty.
  std::string flush();
  // Bytes held back now (0..3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace nanoserve
