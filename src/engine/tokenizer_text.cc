#include "engine/tokenizer_text.h"

#include "tokenizer/incremental_detokenizer.h"

namespace nanoserve {

namespace {

class DetokenizerStream final : public TextStream {
 public:
  explicit DetokenizerStream(const Tokenizer& tok) : detok_(tok, /*skip_special=*/true) {}
  void push(int32_t token, std::string& out) override { out += detok_.push(token); }
  void finish(std::string& out) override { out += detok_.flush(); }

 private:
  IncrementalDetokenizer detok_;
};

}  // namespace

std::unique_ptr<TextStream> TokenizerText::open(std::span<const int32_t> /*prompt*/) const {
  // Byte-level BPE text of the output does not depend on the prompt.
  return std::make_unique<DetokenizerStream>(tokenizer_);
}

}  // namespace nanoserve
