#pragma once
// SentencePiece BPE segmentation by piece score (tokenizer.ggml.model =
// "llama" in GGUF: Llama-2, Mistral, TinyLlama).
//
// The input is one run of text already escaped ("▁" for space, the dummy
// prefix added). It starts as one symbol per UTF-8 character. The adjacent
// pair whose concatenation is a piece with the highest score is merged, the
// leftmost first on equal scores, until no adjacent pair forms a piece: the
// order of sentencepiece's bpe_model.cc and of llama.cpp's SPM tokenizer.
// Mergeable pieces are NORMAL, USER_DEFINED and UNUSED tokens (not CONTROL,
// UNKNOWN or BYTE, which sentencepiece keeps apart). A final symbol that is an
// UNUSED piece is split back into the two symbols it was made of, as
// sentencepiece does. A symbol that is no piece (a character outside the
// vocab) becomes its UTF-8 bytes as <0xXX> tokens, or the unknown token when
// the vocab lacks a byte token (consecutive unknowns fused into one).
// `encode` keeps candidate pairs in a max-heap over a linked list of live
// symbols, O(n log n); `encode_reference` rescans every pair after each merge.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tokenizer/vocab.h"

namespace nanoserve {

class SpmModel {
 public:
  // PRECOND: validate_vocab(v) passed and v.scores has one entry per token.
  static StatusOr<SpmModel> create(const VocabData& v);

  // Appends the ids of `text` (valid UTF-8, escaped) to `out`.
  void encode(std::string_view text, std::vector<int32_t>& out) const;
  void encode_reference(std::string_view text, std::vector<int32_t>& out) const;

  // The byte a BYTE token stands for, or -1.
  int byte_of(int32_t id) const;
  // "<0x41>" -> 0x41; -1 when `text` is not a byte token's text.
  static int parse_byte_token(std::string_view text);

 private:
  struct Piece {
    int32_t id;
    float score;
    bool unused;
  };
  const Piece* find(std::string_view text) const;
  // The final symbol `text` as ids: itself, its halves if UNUSED, or bytes.
  void emit(std::string_view text, const std::unordered_map<std::string, size_t>& splits,
            std::vector<int32_t>& out) const;

  std::unordered_map<std::string, Piece> pieces_;
  std::array<int32_t, 256> byte_ids_{};  // <0xXX> token of each byte, -1 if absent
  std::vector<int16_t> byte_of_;         // [n_vocab] byte of a BYTE token, -1 otherwise
  int32_t unk_id_ = -1;
};

}  // namespace nanoserve
