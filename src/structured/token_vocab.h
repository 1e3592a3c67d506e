#pragma once
// The vocabulary as the JSON automaton sees it: each token's bytes, in a trie
// laid out in preorder, so a mask is one forward scan that skips whole
// subtrees once their prefix is refused (docs/structured_output.md).

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace nanoserve::structured {

// One bit per token id: set = allowed. [ceil(vocab / 64)] words.
using TokenMask = std::vector<uint64_t>;

inline bool mask_has(const TokenMask& m, int32_t id) {
  return (m[id >> 6] >> (id & 63)) & 1;
}
inline void mask_set(TokenMask& m, int32_t id) {
  m[id >> 6] |= uint64_t{1} << (id & 63);
}
// logits[i] = -inf for every token i the mask leaves out (words of all
// allowed bits are skipped whole). logits: [vocab], the mask's size.
inline void mask_logits(const TokenMask& m, std::span<float> logits) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int32_t n = static_cast<int32_t>(logits.size());
  for (int32_t w = 0; w * 64 < n; ++w) {
    const uint64_t bits = m[w];
    if (bits == ~uint64_t{0}) continue;
    const int32_t end = std::min(n, w * 64 + 64);
    for (int32_t i = w * 64; i < end; ++i) logits[i] = (bits >> (i & 63)) & 1 ? logits[i] : kNegInf;
  }
}

class TokenVocab {
 public:
  // pieces[id]: the raw bytes of token id. special[id]: a control token, never
  // allowed as text. eos_ids: the end tokens, allowed once the value is complete.
  TokenVocab(std::vector<std::string> pieces, const std::vector<bool>& special, std::vector<int32_t> eos_ids);

  int32_t size() const { return static_cast<int32_t>(pieces_.size()); }
  const std::string& piece(int32_t id) const { return pieces_[id]; }
  bool is_eos(int32_t id) const;
  std::span<const int32_t> eos_ids() const { return eos_ids_; }
  // Tokens that may appear as text: not special, not an end token, not empty.
  bool is_text(int32_t id) const { return text_[id]; }

  struct TrieNode {
    uint8_t byte;       // the edge into this node
    uint16_t depth;     // bytes from the root: this node's prefix length (>= 1)
    int32_t end;        // index one past this node's subtree
    int32_t tok_begin;  // tokens whose bytes end here: tokens_[tok_begin, tok_end)
    int32_t tok_end;
  };
  std::span<const TrieNode> trie() const { return nodes_; }
  std::span<const int32_t> trie_tokens() const { return tokens_; }
  int32_t max_piece_length() const { return max_len_; }

 private:
  std::vector<std::string> pieces_;
  std::vector<bool> text_;
  std::vector<int32_t> eos_ids_;  // sorted
  std::vector<TrieNode> nodes_;   // preorder
  std::vector<int32_t> tokens_;
  int32_t max_len_ = 0;
};

}  // namespace nanoserve::structured
