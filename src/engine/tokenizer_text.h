#pragma once
// The tokenizer as the engine's text source: eos ids, and one incremental
// detokenizer per request (special tokens skipped, as OpenAI servers do).

#include <memory>
#include <span>
#include <vector>

#include "engine/text_stream.h"
#include "tokenizer/tokenizer.h"

namespace nanoserve {

class TokenizerText final : public TextStreamFactory {
 public:
  // `tokenizer` must outlive this object and every stream it opens.
  explicit TokenizerText(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  std::vector<int32_t> eos_ids() const override { return tokenizer_.eos_ids(); }
  std::unique_ptr<TextStream> open(std::span<const int32_t> prompt) const override;
  std::unique_ptr<TextStream> open_keeping_special(std::span<const int32_t> prompt) const override;

 private:
  const Tokenizer& tokenizer_;
};

}  // namespace nanoserve
