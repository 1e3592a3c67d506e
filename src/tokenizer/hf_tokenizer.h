#pragma once
// A Hugging Face tokenizer.json (+ tokenizer_config.json) into VocabData, for
// the two BPE kinds the engine implements, told apart by the decoder:
// ByteLevel (model "gpt2") or the SentencePiece-style Sequence (model "llama").
// SentencePiece-style (Llama-2, Mistral, TinyLlama, Phi-3):
//   model          BPE with byte_fallback, fuse_unk; no ignore_merges
//   normalizer     Sequence[Prepend("▁"), Replace(" ", "▁")] (space prefix on
//                  every run) or Sequence[Replace] (none), pre_tokenizer null;
//                  or null, with pre_tokenizer Metaspace("▁", prepend_scheme
//                  first / always / never, split)
//   decoder        Sequence[Replace("▁", " "), ByteFallback, Fuse] and
//                  optionally Strip(" ", 0 or 1, 0)
//   <0xXX> tokens become BYTE tokens.
// Byte-level:
//   model          type "BPE"; vocab {token: id}; merges as "a b" strings or
//                  [a, b] pairs; unk_token; ignore_merges (must agree with the
//                  pre-tokenizer); no dropout, byte_fallback, subword prefix
//                  or word suffix
//   added_tokens   {id, content, special, lstrip, rstrip, single_word false}:
//                  special -> CONTROL (parsed only with parse_special), else
//                  USER_DEFINED (always matched whole)
//   normalizer     null, or NFC (Qwen2; needs a build with ICU)
//   pre_tokenizer  one of the known byte-level pipelines, mapped onto a
//                  PreTokenizer name:
//                    ByteLevel(use_regex)                                -> gpt2
//                    Sequence[Digits(individual), ByteLevel(use_regex)]  -> smollm
//                    Sequence[Split(Llama-3 regex), ByteLevel(no regex)] -> llama-bpe
//                    Sequence[Split(Qwen2 regex), ByteLevel(no regex)]   -> qwen2
//                  always with add_prefix_space false
//   post_processor null, ByteLevel, TemplateProcessing (its single template
//                  tells whether BOS / EOS are added), or a Sequence of them
//   decoder        ByteLevel
// Anything else (WordPiece, Unigram, a Metaspace decoder, an NFKC normalizer,
// ...) is UNIMPLEMENTED naming the field's path and its type; a malformed file
// is DATA_LOSS naming the field.
// tokenizer_config.json (optional) gives chat_template, bos_token, eos_token,
// pad_token, unk_token, add_bos_token, add_eos_token.

#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"
#include "tokenizer/vocab.h"

namespace nanoserve {

// kFastest takes a fast path where the file's pipeline has one; kPipeline
// always runs the components as read (tests hold the two equal).
enum class HfPath { kFastest, kPipeline };

// `tokenizer_config` may be null. `name` starts every message.
StatusOr<VocabData> vocab_from_hf_json(const nlohmann::json& tokenizer,
                                       const nlohmann::json* tokenizer_config,
                                       const std::string& name = "tokenizer.json",
                                       HfPath path = HfPath::kFastest);
// Reads FOLDER/tokenizer.json and, when present, FOLDER/tokenizer_config.json.
StatusOr<VocabData> vocab_from_hf_folder(const std::string& folder);

}  // namespace nanoserve
