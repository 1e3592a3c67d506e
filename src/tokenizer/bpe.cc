#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace nanoserve {

StatusOr<BpeModel> BpeModel::create(const std::vector<std::string>& tokens,
                                    const std::unordered_map<std::string, int32_t>& token_ids,
                                    const std::vector<std::string>& merges, int32_t unk_id) {
  (void)tokens;
  BpeModel m;
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    utf8::append(ch, byte_level::byte_to_code_point(static_cast<uint8_t>(b)));
    auto it = token_ids.find(ch);
    if (it != token_ids.end()) {
      m.byte_ids_[b] = it->second;
    } else {
      // Bytes that valid UTF-8 never holds may be missing; encode() sanitizes its input first.
      bool can_occur = b < 0xC0 || (b >= 0xC2 && b <= 0xF4);
      if (can_occur && unk_id < 0) {
        return data_loss("tokenizer: the vocab has no token for byte " + std::to_string(b) +
                         " and no unknown token");
      }
      m.byte_ids_[b] = unk_id;
      m.missing_[b] = true;
    }
  }
  NS_RETURN_IF_ERROR(m.add_merges(token_ids, merges));
  return m;
}

Status BpeModel::add_merges(const std::unordered_map<std::string, int32_t>& token_ids,
                            const std::vector<std::string>& merges) {
  merges_.reserve(merges.size());
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& line = merges[rank];
    size_t sp = line.find(' ');
    if (sp == std::string::npos)
      return data_loss("tokenizer: merge " + std::to_string(rank) + " has no space");
    joined.assign(line, 0, sp);
    auto l = token_ids.find(joined);
    auto r = token_ids.find(line.substr(sp + 1));
    joined.append(line, sp + 1);
    auto j = token_ids.find(joined);
    if (l == token_ids.end() || r == token_ids.end() || j == token_ids.end()) {
      return data_loss("tokenizer: merge " + std::to_string(rank) + " names a token not in the vocab");
    }
    // A repeated pair keeps its first (lowest) rank, as in Hugging Face.
    merges_.try_emplace(key(l->second, r->second), Merge{static_cast<int32_t>(rank), j->second});
  }
  return Status::ok_status();
}

StatusOr<BpeModel> BpeModel::create_chars(const std::vector<std::string>& tokens,
                                          const std::unordered_map<std::string, int32_t>& token_ids,
                                          const std::vector<std::string>& merges, int32_t unk_id,
                                          bool byte_fallback, bool fuse_unk) {
  BpeModel m;
  m.chars_ = true;
  m.byte_fallback_ = byte_fallback;
  m.fuse_unk_ = fuse_unk;
  m.unk_id_ = unk_id;
  m.fallback_ids_.fill(-1);
  char name[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    auto it = token_ids.find(name);
    if (it != token_ids.end()) m.fallback_ids_[b] = it->second;
  }
  for (const std::string& t : tokens) {
    if (!t.empty() && utf8::sequence_length(t, 0) == t.size()) m.char_ids_.try_emplace(t, token_ids.at(t));
  }
  NS_RETURN_IF_ERROR(m.add_merges(token_ids, merges));
  return m;
}

void BpeModel::initial_char_symbols(std::string_view word, std::vector<int32_t>& ids) const {
  ids.reserve(word.size());
  bool pending_unk = false;  // an unknown run not yet pushed (fuse_unk)
  std::string ch;
  for (size_t pos = 0; pos < word.size();) {
    size_t n = utf8::sequence_length(word, pos);
    if (n == 0) n = 1;  // not reached: the input is valid UTF-8
    ch.assign(word.substr(pos, n));
    pos += n;
    auto it = char_ids_.find(ch);
    if (it != char_ids_.end()) {
      if (pending_unk) ids.push_back(unk_id_);
      pending_unk = false;
      ids.push_back(it->second);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : ch) all = all && fallback_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        if (pending_unk) ids.push_back(unk_id_);
        pending_unk = false;
        for (char c : ch) ids.push_back(fallback_ids_[static_cast<uint8_t>(c)]);
        continue;
      }
    }
    if (unk_id_ < 0) continue;  // no unknown token: the character is dropped, as in HF
    if (pending_unk && !fuse_unk_) ids.push_back(unk_id_);
    pending_unk = true;
  }
  if (pending_unk) ids.push_back(unk_id_);
}

void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>& ids) const {
  if (chars_) {
    initial_char_symbols(word, ids);
    return;
  }
  ids.reserve(word.size());
  bool prev_missing = false;
  for (char c : word) {
    const uint8_t b = static_cast<uint8_t>(c);
    if (missing_[b]) {
      // A run of bytes without tokens becomes one unknown token (Hugging Face's fuse_unk).
      if (!prev_missing && byte_ids_[b] >= 0) ids.push_back(byte_ids_[b]);
      prev_missing = true;
    } else {
      ids.push_back(byte_ids_[b]);
      prev_missing = false;
    }
  }
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() == 1 && !chars_) {
    if (byte_ids_[static_cast<uint8_t>(word[0])] >= 0)
      out.push_back(byte_ids_[static_cast<uint8_t>(word[0])]);
    return;
  }
  std::vector<int32_t> ids;
  initial_symbols(word, ids);
  const int n = static_cast<int>(ids.size());
  if (n <= 1) {
    out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  struct Symbol {
    int32_t id;
    int prev, next;  // -1 at the ends
  };
  struct Candidate {
    int32_t rank;
    int left;  // position of the left symbol
    int32_t left_id, right_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::vector<Symbol> sym(n);
  for (int i = 0; i < n; ++i) sym[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1};
  std::vector<Candidate> heap_storage;
  heap_storage.reserve(n);
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap(
      std::greater<Candidate>(), std::move(heap_storage));
  auto push_pair = [&](int left) {
    int right = sym[left].next;
    if (right < 0) return;
    if (const Merge* mg = find_merge(sym[left].id, sym[right].id)) {
      heap.push({mg->rank, left, sym[left].id, sym[right].id});
    }
  };
  for (int i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    Symbol& l = sym[c.left];
    // Stale if the left symbol was merged away or changed, or its neighbour changed.
    if (l.id != c.left_id || l.next < 0 || sym[l.next].id != c.right_id) continue;
    const Merge* mg = find_merge(c.left_id, c.right_id);
    int right = l.next;
    l.id = mg->merged_id;
    l.next = sym[right].next;
    if (l.next >= 0) sym[l.next].prev = c.left;
    sym[right].id = -1;  // dead
    if (l.prev >= 0) push_pair(l.prev);
    push_pair(c.left);
  }
  for (int i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

void BpeModel::encode_word_reference(std::string_view word, std::vector<int32_t>& out) const {
  std::vector<int32_t> ids;
  initial_symbols(word, ids);
  while (true) {
    int best = -1;
    int32_t best_rank = INT32_MAX;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const Merge* mg = find_merge(ids[i], ids[i + 1]);
      if (mg && mg->rank < best_rank) {
        best_rank = mg->rank;
        best = static_cast<int>(i);
      }
    }
    if (best < 0) break;
    ids[best] = find_merge(ids[best], ids[best + 1])->merged_id;
    ids.erase(ids.begin() + best + 1);
  }
  out.insert(out.end(), ids.begin(), ids.end());
}

}  // namespace nanoserve
