#pragma once
// BPE merges by rank over one pre-token.
//
// create_chars (Hugging Face BPE over characters, the SentencePiece-style
// tokenizer.json of Llama-2, Mistral, TinyLlama, Phi-3): a word starts as one
// symbol per UTF-8 character; a character without a token becomes its bytes
// as <0xXX> tokens when byte_fallback is on and the vocab has all of them,
// and otherwise the unknown token (a run of them one unknown when fuse_unk),
// as in HF's BPE::merge_word. The merging is the same as below.
//
// create (byte-level):
// A word starts as one symbol per byte (the token of that byte's alphabet
// character; bytes the vocab lacks become the unknown token, a run of them
// one unknown token, as Hugging Face's BPE with fuse_unk does: SmolLM2's
// vocab has no token for bytes 0x04, 0x06, 0x13, 0x14, 0x16, 0x1D). The adjacent pair with the lowest merge
// rank is merged, the leftmost first on equal rank, until no adjacent pair has a merge: the same order as
// Hugging Face's BPE::merge_word. `encode_word` does it with a min-heap over candidate pairs and a linked
// list of live symbols, O(n log n); `encode_word_reference` is the plain O(n^2) rescan that the fast one is
// tested against.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace nanoserve {

class BpeModel {
 public:
  // `tokens`: id -> alphabet text; `token_ids`: the inverse (first id wins on
  // duplicates); `merges` "left right" by rank (validated by validate_vocab).
  static StatusOr<BpeModel> create(const std::vector<std::string>& tokens,
                                   const std::unordered_map<std::string, int32_t>& token_ids,
                                   const std::vector<std::string>& merges, int32_t unk_id);
  static StatusOr<BpeModel> create_chars(const std::vector<std::string>& tokens,
                                         const std::unordered_map<std::string, int32_t>& token_ids,
                                         const std::vector<std::string>& merges, int32_t unk_id,
                                         bool byte_fallback, bool fuse_unk);

  // Appends the ids of `word` (raw bytes, non-empty) to `out`.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  void encode_word_reference(std::string_view word, std::vector<int32_t>& out) const;

  size_t n_merges() const { return merges_.size(); }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  static uint64_t key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  const Merge* find_merge(int32_t left, int32_t right) const {
    auto it = merges_.find(key(left, right));
    return it == merges_.end() ? nullptr : &it->second;
  }

  // One symbol per byte, except that a run of bytes without a token becomes a
  // single unknown token (dropped when the vocab has none).
  void initial_symbols(std::string_view word, std::vector<int32_t>& ids) const;
  void initial_char_symbols(std::string_view word, std::vector<int32_t>& ids) const;
  Status add_merges(const std::unordered_map<std::string, int32_t>& token_ids,
                    const std::vector<std::string>& merges);

  std::array<int32_t, 256> byte_ids_{};  // token of each byte's alphabet char; unk (or -1) if absent
  std::array<bool, 256> missing_{};      // the byte has no token of its own
  std::unordered_map<uint64_t, Merge> merges_;
  // Character-level only.
  bool chars_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  int32_t unk_id_ = -1;
  std::array<int32_t, 256> fallback_ids_{};            // <0xXX> token of each byte, -1 if absent
  std::unordered_map<std::string, int32_t> char_ids_;  // tokens that are one character
};

}  // namespace nanoserve
