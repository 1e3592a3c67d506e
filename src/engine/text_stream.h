#pragma once
// What the engine needs of a tokenizer: the model's end tokens, and for each
// request a stream that turns generated tokens into new text (incremental
// detokenization: holds back incomplete UTF-8 and merges as needed).
// The engine runs without one (benchmarks on token ids): then no text is
// produced and stop strings are refused at add_request.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace nanoserve {

class TextStream {
 public:
  virtual ~TextStream() = default;
  // Appends to `out` the text that `token` adds after everything pushed before.
  virtual void push(int32_t token, std::string& out) = 0;
  // The request ended: appends whatever is still held (an incomplete UTF-8
  // tail, as U+FFFD). Not called when a stop string cut the text.
  virtual void finish(std::string& /*out*/) {}
};

class TextStreamFactory {
 public:
  virtual ~TextStreamFactory() = default;
  // The model's end-of-generation ids (eos, <|im_end|>, ...).
  virtual std::vector<int32_t> eos_ids() const = 0;
  // A fresh stream for one request; the prompt is the context its text follows.
  virtual std::unique_ptr<TextStream> open(std::span<const int32_t> prompt) const = 0;
  // The same, keeping special tokens' text (SamplingParams::skip_special_tokens false).
  virtual std::unique_ptr<TextStream> open_keeping_special(std::span<const int32_t> prompt) const {
    return open(prompt);
  }
};

}  // namespace nanoserve
