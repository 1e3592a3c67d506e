#pragma once
// The tokenizer's data, independent of where it came from: GGUF metadata
// (vocab_from_gguf), a Hugging Face tokenizer.json (tokenizer/hf_tokenizer.h),
// or anything a test builds by hand.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace nanoserve {

class GgufFile;
class HfPipeline;

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // <|im_start|>, <|endoftext|>: matched in text only with parse_special
  kUserDefined = 4,  // added tokens: always matched whole in text
  kUnused = 5,
  kByte = 6,
};

// Where a SentencePiece-style tokenizer puts the "▁" that stands for a space
// before a run of text (the text between two special tokens).
enum class SpacePrefix : int32_t {
  kNone,             // never (add_space_prefix false, Metaspace prepend_scheme "never")
  kAlways,           // before every non-empty run: sentencepiece's add_dummy_prefix, llama.cpp's
                     // add_space_prefix (after BOS and after every special token), HF's Prepend("▁")
                     // normalizer (which runs on each stretch between added tokens)
  kMetaspaceAlways,  // HF Metaspace "always": every run that does not already start with a space
  kMetaspaceFirst,   // HF Metaspace "first": only the run at the start of the text, same condition
};

struct VocabData {
  // tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama" (SentencePiece-style BPE over
  // characters: "▁" for spaces, <0xXX> byte fallback). A "llama" vocab merges by `scores` when
  // `merges` is empty (sentencepiece, GGUF) and by merge rank otherwise (HF tokenizer.json).
  std::string model = "gpt2";
  std::string pre = "gpt2";            // tokenizer.ggml.pre: selects the pre-tokenizer regexes (gpt2 only)
  std::vector<std::string> tokens;     // [n_vocab] token text: the GPT-2 byte alphabet (gpt2) or UTF-8
                                       // with "▁" for space (llama); CONTROL / USER_DEFINED: literal text
  std::vector<TokenType> token_types;  // [n_vocab] or empty (all kNormal)
  std::vector<std::string> merges;     // "left right", rank = index
  std::vector<float> scores;           // [n_vocab] tokenizer.ggml.scores (llama without merges): higher
                                       // merges first
  // Added tokens that take the whitespace before (lstrip) or after (rstrip) them with them, as HF's
  // AddedToken does (Phi-3's chat tokens have rstrip).
  std::vector<int32_t> lstrip_ids, rstrip_ids;
  bool normalize_nfc = false;  // HF normalizer NFC (Qwen2): each run of text is NFC'd before splitting
  // llama only.
  SpacePrefix space_prefix = SpacePrefix::kAlways;  // tokenizer.ggml.add_space_prefix (default true)
  bool split_on_space = false;                      // HF Metaspace split: each "▁" starts a new word
  bool byte_fallback = true;       // a character without a token becomes its <0xXX> byte tokens
  bool fuse_unk = true;            // a run of characters without tokens is one unknown token
  bool decode_strip_space = true;  // decode drops the decoded text's one leading space
  int32_t bos_id = -1;             // -1: absent
  int32_t eos_id = -1;
  int32_t pad_id = -1;
  int32_t unk_id = -1;
  int32_t eot_id = -1;                 // tokenizer.ggml.eot_token_id, if the model has one
  bool add_bos = false;                // tokenizer.ggml.add_bos_token
  bool add_eos = false;                // tokenizer.ggml.add_eos_token
  std::string chat_template;           // tokenizer.chat_template, empty if absent
  std::vector<int32_t> extra_eos_ids;  // more ids that end generation (config.json's eos_token_id list)
  // A tokenizer.json without a fast path (tokenizer/hf_pipeline.h): when set, encode runs its
  // normalizer and pre-tokenizer, then BPE over characters (`merges`, byte_fallback, fuse_unk,
  // ignore_merges); decode runs its decoders.
  std::shared_ptr<const HfPipeline> hf_pipeline;
  bool ignore_merges = false;  // HF BPE: a piece that is itself a token is not merged
};

// Bounds every count and length and checks ids and merges; DATA_LOSS naming
// the field on failure.
inline constexpr int64_t kMaxVocabSize = 1 << 22;
inline constexpr int64_t kMaxMerges = 1 << 22;
inline constexpr int64_t kMaxTokenBytes = 1 << 12;
Status validate_vocab(const VocabData& vocab);

// Reads the tokenizer.* metadata of a GGUF file. UNIMPLEMENTED for a
// tokenizer model other than "gpt2" and "llama" (naming it: "t5" is
// SentencePiece unigram, "bert" WordPiece, ...); DATA_LOSS naming the key when a field is
// missing, mistyped or out of range.
StatusOr<VocabData> vocab_from_gguf(const GgufFile& gguf);

}  // namespace nanoserve
