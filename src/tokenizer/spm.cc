#include "tokenizer/spm.h"

#include <queue>

#include "tokenizer/utf8.h"

namespace nanoserve {

namespace {}  // namespace

int SpmModel::parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(text[3]), lo = hex(text[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

namespace {

// Lengths of the characters of `text` (PRECOND: valid UTF-8).
std::vector<uint32_t> char_lengths(std::string_view text) {
  std::vector<uint32_t> lens;
  lens.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    size_t n = utf8::sequence_length(text, pos);
    if (n == 0) n = 1;  // not reached for valid input
    lens.push_back(static_cast<uint32_t>(n));
    pos += n;
  }
  return lens;
}

}  // namespace

StatusOr<SpmModel> SpmModel::create(const VocabData& v) {
  if (v.scores.size() != v.tokens.size()) {
    return data_loss("tokenizer: scores has " + std::to_string(v.scores.size()) + " entries for " +
                     std::to_string(v.tokens.size()) + " tokens");
  }
  SpmModel m;
  m.unk_id_ = v.unk_id;
  m.byte_ids_.fill(-1);
  m.byte_of_.assign(v.tokens.size(), -1);
  m.pieces_.reserve(v.tokens.size());
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const TokenType type = v.token_types.empty() ? TokenType::kNormal : v.token_types[i];
    const int32_t id = static_cast<int32_t>(i);
    if (type == TokenType::kByte) {
      const int b = parse_byte_token(v.tokens[i]);
      if (b < 0) {
        return data_loss("tokenizer: token " + std::to_string(i) + " has type BYTE but is not <0xXX>");
      }
      if (m.byte_ids_[b] < 0) m.byte_ids_[b] = id;
      m.byte_of_[i] = static_cast<int16_t>(b);
      continue;
    }
    if (type == TokenType::kControl || type == TokenType::kUnknown) continue;
    // The first id wins on duplicates, as in sentencepiece and llama.cpp.
    m.pieces_.try_emplace(v.tokens[i], Piece{id, v.scores[i], type == TokenType::kUnused});
  }
  return m;
}

int SpmModel::byte_of(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < byte_of_.size() ? byte_of_[id] : -1;
}

const SpmModel::Piece* SpmModel::find(std::string_view text) const {
  auto it = pieces_.find(std::string(text));
  return it == pieces_.end() ? nullptr : &it->second;
}

void SpmModel::emit(std::string_view text, const std::unordered_map<std::string, size_t>& splits,
                    std::vector<int32_t>& out) const {
  if (const Piece* p = find(text)) {
    if (p->unused) {
      auto it = splits.find(std::string(text));
      if (it != splits.end()) {
        emit(text.substr(0, it->second), splits, out);
        emit(text.substr(it->second), splits, out);
        return;
      }
    }
    out.push_back(p->id);
    return;
  }
  // Not a piece: only single characters get here (every merge makes a piece).
  bool all_bytes = true;
  for (char c : text) all_bytes = all_bytes && byte_ids_[static_cast<uint8_t>(c)] >= 0;
  if (all_bytes) {
    for (char c : text) out.push_back(byte_ids_[static_cast<uint8_t>(c)]);
  } else if (unk_id_ >= 0 && (out.empty() || out.back() != unk_id_)) {
    out.push_back(unk_id_);
  }
}

void SpmModel::encode(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  const std::vector<uint32_t> lens = char_lengths(text);
  const int n = static_cast<int>(lens.size());
  struct Symbol {
    uint32_t start, len;  // bytes of `text`
    int prev, next;       // -1 at the ends
  };
  std::vector<Symbol> sym(n);
  uint32_t start = 0;
  for (int i = 0; i < n; ++i) {
    sym[i] = {start, lens[i], i - 1, i + 1 < n ? i + 1 : -1};
    start += lens[i];
  }
  struct Candidate {
    float score;
    int left, right;
    uint32_t len;  // bytes of the pair when it was pushed; a changed symbol makes it stale
    bool operator<(const Candidate& o) const {
      return score != o.score ? score < o.score : left > o.left;  // max score, then leftmost
    }
  };
  std::priority_queue<Candidate> heap;
  std::unordered_map<std::string, size_t> splits;  // merged UNUSED piece -> bytes of its left part
  auto push_pair = [&](int left) {
    const int right = sym[left].next;
    if (left < 0 || right < 0) return;
    const uint32_t len = sym[left].len + sym[right].len;
    if (const Piece* p = find(text.substr(sym[left].start, len))) heap.push({p->score, left, right, len});
  };
  for (int i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& l = sym[c.left];
    if (l.len == 0 || l.next != c.right || l.len + sym[c.right].len != c.len) continue;  // stale
    const std::string_view merged = text.substr(l.start, c.len);
    if (find(merged)->unused) splits[std::string(merged)] = l.len;
    Symbol& r = sym[c.right];
    l.len = c.len;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = c.left;
    r.len = 0;  // dead
    push_pair(l.prev);
    push_pair(c.left);
  }
  for (int i = 0; i >= 0; i = sym[i].next) emit(text.substr(sym[i].start, sym[i].len), splits, out);
}

void SpmModel::encode_reference(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<std::string_view> syms;
  size_t pos = 0;
  for (uint32_t len : char_lengths(text)) {
    syms.push_back(text.substr(pos, len));
    pos += len;
  }
  std::unordered_map<std::string, size_t> splits;
  while (true) {
    int best = -1;
    float best_score = 0;
    for (size_t i = 0; i + 1 < syms.size(); ++i) {
      const Piece* p = find(text.substr(syms[i].data() - text.data(), syms[i].size() + syms[i + 1].size()));
      if (p && (best < 0 || p->score > best_score)) {
        best = static_cast<int>(i);
        best_score = p->score;
      }
    }
    if (best < 0) break;
    std::string_view merged(syms[best].data(), syms[best].size() + syms[best + 1].size());
    if (find(merged)->unused) splits[std::string(merged)] = syms[best].size();
    syms[best] = merged;
    syms.erase(syms.begin() + best + 1);
  }
  for (std::string_view s : syms) emit(s, splits, out);
}

}  // namespace nanoserve
