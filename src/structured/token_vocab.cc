#include "structured/token_vocab.h"

#include <algorithm>
#include <numeric>

#include "core/check.h"

namespace nanoserve::structured {

TokenVocab::TokenVocab(std::vector<std::string> pieces, const std::vector<bool>& special,
                       std::vector<int32_t> eos_ids)
    : pieces_(std::move(pieces)), text_(pieces_.size(), false), eos_ids_(std::move(eos_ids)) {
  std::sort(eos_ids_.begin(), eos_ids_.end());
  eos_ids_.erase(std::unique(eos_ids_.begin(), eos_ids_.end()), eos_ids_.end());
  const int32_t n = size();
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < n; ++id) {
    const bool sp = id < static_cast<int32_t>(special.size()) && special[id];
    // A depth must fit the trie node's field; a longer piece is never allowed.
    text_[id] = !sp && !is_eos(id) && !pieces_[id].empty() && pieces_[id].size() < 65535;
    if (text_[id]) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return pieces_[a] < pieces_[b] || (pieces_[a] == pieces_[b] && a < b);
  });
  // Sorted strings give the preorder: each one shares its longest common
  // prefix with the one before and adds nodes for the rest.
  std::vector<int32_t> path;  // node index per prefix length - 1
  const std::string* prev = nullptr;
  for (int32_t id : ids) {
    const std::string& s = pieces_[id];
    size_t lcp = 0;
    if (prev != nullptr) {
      const size_t m = std::min(prev->size(), s.size());
      while (lcp < m && (*prev)[lcp] == s[lcp]) ++lcp;
    }
    while (path.size() > lcp) {
      nodes_[path.back()].end = static_cast<int32_t>(nodes_.size());
      path.pop_back();
    }
    for (size_t i = lcp; i < s.size(); ++i) {
      const int32_t t = static_cast<int32_t>(tokens_.size());
      nodes_.push_back(TrieNode{static_cast<uint8_t>(s[i]), static_cast<uint16_t>(i + 1), -1, t, t});
      path.push_back(static_cast<int32_t>(nodes_.size()) - 1);
    }
    NS_CHECK(!path.empty()) << "an empty piece in the trie";
    tokens_.push_back(id);
    nodes_[path.back()].tok_end = static_cast<int32_t>(tokens_.size());
    max_len_ = std::max(max_len_, static_cast<int32_t>(s.size()));
    prev = &s;
  }
  while (!path.empty()) {
    nodes_[path.back()].end = static_cast<int32_t>(nodes_.size());
    path.pop_back();
  }
}

bool TokenVocab::is_eos(int32_t id) const {
  return std::binary_search(eos_ids_.begin(), eos_ids_.end(), id);
}

}  // namespace nanoserve::structured
