#pragma once
// Byte-level BPE merges over the raw bytes of one pre-token.
//
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

  std::array<int32_t, 256> byte_ids_{};  // token of each byte's alphabet char; unk (or -1) if absent
  std::array<bool, 256> missing_{};      // the byte has no token of its own
  std::unordered_map<uint64_t, Merge> merges_;
};

}  // namespace nanoserve
