#include "engine/tokenizer_text.h"

#include "tokenizer/incremental_detokenizer.h"

namespace nanoserve {

namespace {

class DetokenizerStream final : public TextStream {
 public:
  DetokenizerStream(const Tokenizer& tok, bool skip_special) : detok_(tok, skip_special) {}
  void push(int32_t token, std::string& out) override { out += detok_.push(token); }
  void finish(std::string& out) override { out += detok_.flush(); }

 private:
  IncrementalDetokenizer detok_;
};

}  // namespace

std::unique_ptr<TextStream> TokenizerText::open(std::span<const int32_t> /*prompt*/) const {
  // Byte-level BPE text of the output does not depend on the prompt.
  return std::make_unique<DetokenizerStream>(tokenizer_, /*skip_special=*/true);
}

std::unique_ptr<TextStream> TokenizerText::open_keeping_special(std::span<const int32_t> /*prompt*/) const {
  return std::make_unique<DetokenizerStream>(tokenizer_, /*skip_special=*/false);
}

}  // namespace nanoserve
