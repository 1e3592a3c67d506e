#pragma once
// The tokenizer's data, independent of where it came from: GGUF metadata
// (vocab_from_gguf), a Hugging Face tokenizer.json (tokenizer/hf_tokenizer.h),
// or anything a test builds by hand.

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace nanoserve {

class GgufFile;

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

struct VocabData {
  std::string model = "gpt2";          // tokenizer.ggml.model; only byte-level BPE ("gpt2") is built
  std::string pre = "gpt2";            // tokenizer.ggml.pre: selects the pre-tokenizer regexes
  std::vector<std::string> tokens;     // [n_vocab] token text in the GPT-2 byte alphabet
                                       // (CONTROL / USER_DEFINED tokens: their literal text)
  std::vector<TokenType> token_types;  // [n_vocab] or empty (all kNormal)
  std::vector<std::string> merges;     // "left right", rank = index
  int32_t bos_id = -1;                 // -1: absent
  int32_t eos_id = -1;
  int32_t pad_id = -1;
  int32_t unk_id = -1;
  int32_t eot_id = -1;        // tokenizer.ggml.eot_token_id, if the model has one
  bool add_bos = false;       // tokenizer.ggml.add_bos_token
  bool add_eos = false;       // tokenizer.ggml.add_eos_token
  std::string chat_template;  // tokenizer.chat_template, empty if absent
  std::vector<int32_t> extra_eos_ids;  // more ids that end generation (config.json's eos_token_id list)
};

// Bounds every count and length and checks ids and merges; DATA_LOSS naming
// the field on failure.
inline constexpr int64_t kMaxVocabSize = 1 << 22;
inline constexpr int64_t kMaxMerges = 1 << 22;
inline constexpr int64_t kMaxTokenBytes = 1 << 12;
Status validate_vocab(const VocabData& vocab);

// Reads the tokenizer.* metadata of a GGUF file. UNIMPLEMENTED for a
// tokenizer model other than "gpt2"; DATA_LOSS naming the key when a field is
// missing, mistyped or out of range.
StatusOr<VocabData> vocab_from_gguf(const GgufFile& gguf);

}  // namespace nanoserve
