#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <utility>

#include "io/gguf.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/utf8.h"

namespace nanoserve {

namespace {
const std::string kEmpty;
}

Tokenizer::Tokenizer(VocabData vocab, PreTokenizer pre, BpeModel bpe)
    : vocab_(std::move(vocab)), pre_(std::move(pre)), bpe_(std::move(bpe)) {}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const GgufFile& gguf) {
  NS_ASSIGN_OR_RETURN(VocabData v, vocab_from_gguf(gguf));
  return from_vocab(std::move(v));
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::from_vocab(VocabData v) {
  if (v.model != "gpt2") {
    return unimplemented("tokenizer: model '" + v.model +
                         "' is not supported; only byte-level BPE ('gpt2') is built");
  }
  NS_RETURN_IF_ERROR(validate_vocab(v));
  NS_ASSIGN_OR_RETURN(PreTokenizer pre, PreTokenizer::create(v.pre));
  std::unordered_map<std::string, int32_t> ids;
  ids.reserve(v.tokens.size());
  for (size_t i = 0; i < v.tokens.size(); ++i) ids.try_emplace(v.tokens[i], static_cast<int32_t>(i));
  NS_ASSIGN_OR_RETURN(BpeModel bpe, BpeModel::create(v.tokens, ids, v.merges, v.unk_id));

  std::unique_ptr<Tokenizer> t(new Tokenizer(std::move(v), std::move(pre), std::move(bpe)));
  t->token_ids_ = std::move(ids);
  const VocabData& vd = t->vocab_;
  t->pieces_.resize(vd.tokens.size());
  for (size_t i = 0; i < vd.tokens.size(); ++i) {
    const int32_t id = static_cast<int32_t>(i);
    std::string& piece = t->pieces_[i];
    // Special tokens and any text outside the byte alphabet are shown verbatim.
    if (t->is_special(id) || !byte_level::decode(vd.tokens[i], piece)) piece = vd.tokens[i];
    TokenType type = t->token_type(id);
    if (type == TokenType::kControl || type == TokenType::kUserDefined) {
      t->specials_.push_back({vd.tokens[i], id, type == TokenType::kControl});
    }
  }
  std::stable_sort(t->specials_.begin(), t->specials_.end(),
                   [](const Special& a, const Special& b) { return a.text.size() > b.text.size(); });
  for (const Special& s : t->specials_) t->special_first_byte_[static_cast<uint8_t>(s.text[0])] = true;

  std::vector<int32_t>& eos = t->eos_ids_;
  if (vd.eos_id >= 0) eos.push_back(vd.eos_id);
  if (vd.eot_id >= 0) eos.push_back(vd.eot_id);
  for (int32_t id : vd.extra_eos_ids) {
    if (id >= 0) eos.push_back(id);
  }
  if (!vd.chat_template.empty()) {
    auto tmpl = ChatTemplate::parse(vd.chat_template);
    if (tmpl.ok()) {
      if (auto end = t->token_id(tmpl->end_of_turn())) eos.push_back(*end);
    }
  }
  std::sort(eos.begin(), eos.end());
  eos.erase(std::unique(eos.begin(), eos.end()), eos.end());
  return t;
}

TokenType Tokenizer::token_type(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return TokenType::kUndefined;
  return vocab_.token_types.empty() ? TokenType::kNormal : vocab_.token_types[id];
}

bool Tokenizer::is_special(int32_t id) const {
  TokenType t = token_type(id);
  return t == TokenType::kControl || t == TokenType::kUserDefined;
}

bool Tokenizer::is_eos(int32_t id) const {
  return std::binary_search(eos_ids_.begin(), eos_ids_.end(), id);
}

const std::string& Tokenizer::token_to_piece(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return kEmpty;
  return pieces_[id];
}

const std::string& Tokenizer::token_text(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return kEmpty;
  return vocab_.tokens[id];
}

std::optional<int32_t> Tokenizer::token_id(std::string_view vocab_text) const {
  auto it = token_ids_.find(std::string(vocab_text));
  if (it == token_ids_.end()) return std::nullopt;
  return it->second;
}

void Tokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (pre_.ignore_merges()) {
    std::string text;
    byte_level::encode(piece, text);
    auto it = token_ids_.find(text);
    if (it != token_ids_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (piece.size() == 1 || piece.size() > kCacheMaxWordBytes) {
    bpe_.encode_word(piece, out);
    return;
  }
  std::string key(piece);
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  size_t start = out.size();
  bpe_.encode_word(piece, out);
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (cache_.size() >= kCacheMaxEntries) cache_.clear();
  cache_.try_emplace(std::move(key), out.begin() + static_cast<std::ptrdiff_t>(start), out.end());
}

void Tokenizer::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::vector<std::string_view> pieces;
  pre_.split(text, pieces);
  for (std::string_view p : pieces) encode_piece(p, out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  const TextPiece piece{text, parse_special};
  return encode(std::span<const TextPiece>(&piece, 1), add_special);
}

std::vector<int32_t> Tokenizer::encode(std::span<const TextPiece> pieces, bool add_special) const {
  size_t total = 0;
  for (const TextPiece& p : pieces) total += p.text.size();
  std::vector<int32_t> out;
  out.reserve(total / 3 + 2);
  if (add_special && vocab_.add_bos && vocab_.bos_id >= 0) out.push_back(vocab_.bos_id);

  // Plain text since the last special token, carried across piece boundaries;
  // a run that lies inside one piece is encoded from the piece without a copy.
  std::string run;
  auto flush = [&](std::string_view tail) {
    if (run.empty()) {
      encode_plain(tail, out);
      return;
    }
    run.append(tail);
    encode_plain(run, out);
    run.clear();
  };
  std::string sanitized;
  for (size_t i = 0; i < pieces.size(); ++i) {
    std::string_view text = pieces[i].text;
    if (!utf8::is_valid(text)) {
      sanitized = utf8::sanitize(text);
      text = sanitized;
    }
    const bool parse_special = pieces[i].parse_special;
    size_t seg_start = 0;
    if (!specials_.empty()) {
      for (size_t pos = 0; pos < text.size(); ++pos) {
        if (!special_first_byte_[static_cast<uint8_t>(text[pos])]) continue;
        const Special* hit = nullptr;
        for (const Special& s : specials_) {  // longest first: leftmost-longest match
          if ((parse_special || !s.control) && text.compare(pos, s.text.size(), s.text) == 0) {
            hit = &s;
            break;
          }
        }
        if (hit == nullptr) continue;
        flush(text.substr(seg_start, pos - seg_start));
        out.push_back(hit->id);
        pos += hit->text.size() - 1;
        seg_start = pos + 1;
      }
    }
    if (i + 1 == pieces.size()) {
      flush(text.substr(seg_start));
    } else {
      run.append(text.substr(seg_start));
    }
  }
  if (add_special && vocab_.add_eos && vocab_.eos_id >= 0) out.push_back(vocab_.eos_id);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    bytes += token_to_piece(id);
  }
  if (utf8::is_valid(bytes)) return bytes;
  return utf8::sanitize(bytes);
}

}  // namespace nanoserve
