#pragma once
// The tokenizer built from GGUF metadata or a VocabData, of one of two kinds:
//   gpt2   byte-level BPE after a regex pre-tokenizer (SmolLM2, Llama-3, Qwen2)
//   llama  SentencePiece-style BPE over characters (Llama-2, Mistral, TinyLlama,
//          Phi-3): spaces become "▁", a "▁" is put before a run of text where
//          VocabData::space_prefix says, characters without a token fall back
//          to <0xXX> byte tokens. Merged by piece score (SpmModel: GGUF, as
//          sentencepiece) or by merge rank (BpeModel::create_chars: HF
//          tokenizer.json, as HF tokenizers).
//
// encode(text, add_special, parse_special):
//   1. Invalid UTF-8 in `text` is first replaced, each maximal ill-formed
//      subpart by one U+FFFD, exactly as Python's bytes.decode("utf-8",
//      "replace") does; so the result equals Hugging Face's on the text a
//      Python server would have decoded. It never fails.
//   2. Added tokens are cut out whole, leftmost-longest: USER_DEFINED tokens
//      always, CONTROL tokens (<|im_start|>, <|endoftext|>, ...) only when
//      parse_special is true. With parse_special false they are plain text.
//   3. The rest is pre-tokenized (PreTokenizer) and each piece BPE-merged
//      (gpt2), or each run of text between special tokens escaped, given its
//      space prefix and merged whole (llama).
//   4. add_special adds BOS / EOS where the vocab asks for them
//      (tokenizer.ggml.add_bos_token / add_eos_token).
// encode(pieces, add_special) encodes text assembled from pieces (a rendered
// chat prompt: template text and message content), each with its own
// parse_special. A special token is matched only inside one piece, CONTROL
// tokens only in pieces with parse_special; so "<|im_end|>" in a piece without
// it is ordinary text. The text between two special tokens is pre-tokenized as
// one run across piece boundaries, so pieces that hold no special text encode
// exactly as their concatenation would.
// A tokenizer.json without a fast path (VocabData::hf_pipeline) runs its own
// components instead: each run of step 3 is normalized and pre-tokenized as
// the file says, each piece BPE-merged over its characters; decode runs the
// file's decoders.
// decode(ids): byte-level (gpt2) or "▁" and <0xXX> (llama) back to bytes,
// CONTROL / USER_DEFINED / UNKNOWN tokens as their text (or skipped), invalid
// UTF-8 in the result replaced as in step 1. A llama vocab with
// decode_strip_space drops the text's one leading space (the dummy prefix),
// as sentencepiece and HF's Strip decoder do; token_to_piece and the
// IncrementalDetokenizer keep it, since generated text continues a prompt.
// Thread-safe: all const methods may be called concurrently.

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/spm.h"
#include "tokenizer/vocab.h"

namespace nanoserve {

class GgufFile;

// The end-of-turn token a chat template spells (<|im_end|>, <|eot_id|>,
// <|end|>, <|eot|>, <end_of_turn>, the first found), or empty. It ends
// generation (Tokenizer::eos_ids); template/chat_template.h reports the same.
std::string_view chat_end_of_turn(std::string_view chat_template);

// One stretch of text for encode(pieces): whether CONTROL-token text in it may
// become CONTROL tokens.
struct TextPiece {
  std::string_view text;
  bool parse_special = false;
};

class Tokenizer {
 public:
  static StatusOr<std::unique_ptr<Tokenizer>> from_vocab(VocabData vocab);
  static StatusOr<std::unique_ptr<Tokenizer>> from_gguf(const GgufFile& gguf);

  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;
  std::vector<int32_t> encode(std::span<const TextPiece> pieces, bool add_special) const;
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // The raw bytes of one token (may be a partial UTF-8 sequence); special
  // tokens give their text. Empty for an id out of range.
  const std::string& token_to_piece(int32_t id) const;
  // The vocab text of a token (byte alphabet), e.g. "Ġworld".
  const std::string& token_text(int32_t id) const;
  std::optional<int32_t> token_id(std::string_view vocab_text) const;
  bool is_special(int32_t id) const;  // CONTROL or USER_DEFINED
  TokenType token_type(int32_t id) const;

  int32_t n_vocab() const { return static_cast<int32_t>(vocab_.tokens.size()); }
  int32_t bos_id() const { return vocab_.bos_id; }
  int32_t eos_id() const { return vocab_.eos_id; }
  int32_t pad_id() const { return vocab_.pad_id; }
  int32_t unk_id() const { return vocab_.unk_id; }
  bool add_bos() const { return vocab_.add_bos; }
  // Tokens that end generation: eos, eot, and the chat template's end of turn
  // (<|im_end|> for ChatML). Sorted, no duplicates.
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  bool is_eos(int32_t id) const;
  const std::string& chat_template() const { return vocab_.chat_template; }
  const VocabData& vocab() const { return vocab_; }
  const PreTokenizer& pre_tokenizer() const { return pre_; }

  // Encodes `text` with no special-token handling (PRECOND: valid UTF-8):
  // pre-tokenized and BPE-merged (gpt2), or as one run that starts the text
  // (llama). Exposed for tests and benchmarks.
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;
  bool is_spm() const { return vocab_.model == "llama"; }

 private:
  Tokenizer(VocabData vocab, PreTokenizer pre, BpeModel bpe, std::optional<SpmModel> spm);
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  // BPE of one piece (raw bytes, or characters with a tokenizer.json pipeline), through the cache.
  void encode_cached(std::string_view piece, std::vector<int32_t>& out) const;
  // One run of text between special tokens; `at_start`: it begins the text.
  void encode_run(std::string_view text, bool at_start, std::vector<int32_t>& out) const;
  void encode_spm_run(std::string_view text, bool at_start, std::vector<int32_t>& out) const;

  VocabData vocab_;
  PreTokenizer pre_;
  BpeModel bpe_;                                        // gpt2, and llama with merges
  std::optional<SpmModel> spm_;                         // llama with scores
  std::unordered_map<std::string, int32_t> token_ids_;  // vocab text -> id (first wins)
  std::vector<std::string> pieces_;                     // [n_vocab] raw bytes of each token
  struct Special {
    std::string text;
    int32_t id;
    bool control;                         // false: USER_DEFINED, matched even without parse_special
    bool lstrip = false, rstrip = false;  // takes the whitespace before / after it
  };
  std::vector<Special> specials_;  // longest first
  bool special_first_byte_[256] = {};
  std::vector<int32_t> eos_ids_;

  // Bounded cache of BPE results per pre-token: pieces repeat a lot in text.
  static constexpr size_t kCacheMaxEntries = 1 << 16;
  static constexpr size_t kCacheMaxWordBytes = 64;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace nanoserve
