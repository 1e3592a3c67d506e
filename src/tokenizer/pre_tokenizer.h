#pragma once
// Pre-tokenizer: splits text into the pieces that BPE merges within, with
// PCRE2 (UTF + UCP, JIT when available). A `pre` name (tokenizer.ggml.pre)
// selects a sequence of regexes; each stage splits every piece of the stage
// before it, keeping both the matches and the unmatched gaps between them
// (Hugging Face's Split with behaviour "Isolated"). Lookaheads therefore see
// only the piece they run on, as in Hugging Face tokenizers.
//
//   gpt2            's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   smollm          \p{N}  (every digit alone), then gpt2. Same for starcoder,
//                   refact, command-r, codeshell, exaone, minerva.
//   llama-bpe       (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
//   (llama3)        | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+   (+ ignore_merges)
//   qwen2           as llama-bpe with \p{N} instead of \p{N}{1,3}
//
// \s is spelled out as Unicode White_Space (what Oniguruma, and so Hugging Face,
// uses); PCRE2's own \s also takes U+180E.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace nanoserve {

class PreTokenizer {
 public:
  // UNIMPLEMENTED for an unknown name. `reference` builds the stages exactly as
  // listed above; the default may fuse stages into one equivalent regex
  // (smollm), which tests check against the reference.
  static StatusOr<PreTokenizer> create(std::string_view pre_name, bool reference = false);

  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  // Appends the pieces of `text` (PRECOND: valid UTF-8) to `out`, in order;
  // they concatenate back to `text`. Views point into `text`.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

  // True when a piece that is itself a vocab token is emitted whole, without
  // BPE (Hugging Face's ignore_merges; llama-3).
  bool ignore_merges() const { return ignore_merges_; }
  const std::string& name() const { return name_; }

 private:
  struct Stage;
  PreTokenizer() = default;

  std::string name_;
  bool ignore_merges_ = false;
  std::vector<std::unique_ptr<Stage>> stages_;
};

}  // namespace nanoserve
