#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <utility>

#include "io/gguf.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/hf_pipeline.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/utf8.h"

namespace nanoserve {

namespace {
const std::string kEmpty;

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// Bytes of the Unicode White_Space character at s[pos] (Rust's char::is_whitespace, which HF's
// lstrip/rstrip use), or 0.
size_t white_space_at(std::string_view s, size_t pos) {
  const size_t n = utf8::sequence_length(s, pos);
  if (n == 0) return 0;
  const char32_t c = utf8::decode_at(s, pos, n);
  const bool ws = (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
                  (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
                  c == 0x3000;
  return ws ? n : 0;
}

// Length of `s` without its trailing White_Space.
size_t trim_white_space_end(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
    if (white_space_at(s, start) != end - start) break;
    end = start;
  }
  return end;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size())) {
    s.replace(pos, from.size(), to);
  }
}

}  // namespace

Tokenizer::Tokenizer(VocabData vocab, PreTokenizer pre, BpeModel bpe, std::optional<SpmModel> spm)
    : vocab_(std::move(vocab)), pre_(std::move(pre)), bpe_(std::move(bpe)), spm_(std::move(spm)) {}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const GgufFile& gguf) {
  NS_ASSIGN_OR_RETURN(VocabData v, vocab_from_gguf(gguf));
  return from_vocab(std::move(v));
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::from_vocab(VocabData v) {
  NS_RETURN_IF_ERROR(validate_vocab(v));
  const bool spm = v.model == "llama";
  const bool hf = v.hf_pipeline != nullptr;
  // A llama vocab or a tokenizer.json pipeline splits no regex pieces here; the gpt2 pre-tokenizer is
  // built only to fill the member.
  NS_ASSIGN_OR_RETURN(PreTokenizer pre, PreTokenizer::create(spm || hf ? "gpt2" : v.pre));
  std::unordered_map<std::string, int32_t> ids;
  ids.reserve(v.tokens.size());
  for (size_t i = 0; i < v.tokens.size(); ++i) ids.try_emplace(v.tokens[i], static_cast<int32_t>(i));
  std::optional<SpmModel> spm_model;
  BpeModel bpe;
  if (hf) {
    NS_ASSIGN_OR_RETURN(
        bpe, BpeModel::create_chars(v.tokens, ids, v.merges, v.unk_id, v.byte_fallback, v.fuse_unk));
  } else if (!spm) {
    NS_ASSIGN_OR_RETURN(bpe, BpeModel::create(v.tokens, ids, v.merges, v.unk_id));
  } else if (v.merges.empty()) {
    NS_ASSIGN_OR_RETURN(spm_model, SpmModel::create(v));
  } else {
    NS_ASSIGN_OR_RETURN(
        bpe, BpeModel::create_chars(v.tokens, ids, v.merges, v.unk_id, v.byte_fallback, v.fuse_unk));
  }

  std::unique_ptr<Tokenizer> t(
      new Tokenizer(std::move(v), std::move(pre), std::move(bpe), std::move(spm_model)));
  t->token_ids_ = std::move(ids);
  const VocabData& vd = t->vocab_;
  t->pieces_.resize(vd.tokens.size());
  for (size_t i = 0; i < vd.tokens.size(); ++i) {
    const int32_t id = static_cast<int32_t>(i);
    std::string& piece = t->pieces_[i];
    const TokenType type = t->token_type(id);
    if (hf) {
      piece = vd.hf_pipeline->decode({vd.tokens[i]}, /*stream=*/true);
    } else if (spm) {
      // "<0x0A>" is the byte; every other token its text with "▁" as a space (HF's Replace decoder).
      const int b = type == TokenType::kByte ? SpmModel::parse_byte_token(vd.tokens[i]) : -1;
      if (b >= 0) {
        piece.assign(1, static_cast<char>(b));
      } else {
        piece = vd.tokens[i];
        replace_all(piece, kSpace, " ");
      }
    } else if (t->is_special(id) || !byte_level::decode(vd.tokens[i], piece)) {
      piece = vd.tokens[i];  // special tokens and any text outside the byte alphabet are shown verbatim
    }
    if (type == TokenType::kControl || type == TokenType::kUserDefined || type == TokenType::kUnknown) {
      t->specials_.push_back({vd.tokens[i], id, type != TokenType::kUserDefined});
    }
  }
  for (Special& sp : t->specials_) {
    sp.lstrip = std::find(vd.lstrip_ids.begin(), vd.lstrip_ids.end(), sp.id) != vd.lstrip_ids.end();
    sp.rstrip = std::find(vd.rstrip_ids.begin(), vd.rstrip_ids.end(), sp.id) != vd.rstrip_ids.end();
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
  const std::string_view end_of_turn = chat_end_of_turn(vd.chat_template);
  if (!end_of_turn.empty()) {
    if (auto end = t->token_id(end_of_turn)) eos.push_back(*end);
  }
  std::sort(eos.begin(), eos.end());
  eos.erase(std::unique(eos.begin(), eos.end()), eos.end());
  return t;
}

std::string_view chat_end_of_turn(std::string_view chat_template) {
  static constexpr std::string_view kEndOfTurn[] = {"<|im_end|>", "<|eot_id|>", "<|end|>", "<|eot|>",
                                                    "<end_of_turn>"};
  for (std::string_view eot : kEndOfTurn) {
    if (chat_template.find(eot) != std::string_view::npos) return eot;
  }
  return {};
}

TokenType Tokenizer::token_type(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return TokenType::kUndefined;
  return vocab_.token_types.empty() ? TokenType::kNormal : vocab_.token_types[id];
}

bool Tokenizer::is_special(int32_t id) const {
  TokenType t = token_type(id);
  return t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown;
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
  encode_cached(piece, out);
}

void Tokenizer::encode_cached(std::string_view piece, std::vector<int32_t>& out) const {
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

void Tokenizer::encode_spm_run(std::string_view text, bool at_start, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::string escaped;
  escaped.reserve(text.size() + 16);
  // Metaspace prepends only where the escaped run does not already start with "▁".
  const bool starts_with_space = text[0] == ' ' || text.starts_with(kSpace);
  switch (vocab_.space_prefix) {
    case SpacePrefix::kNone: break;
    case SpacePrefix::kAlways: escaped = kSpace; break;
    case SpacePrefix::kMetaspaceAlways:
      if (!starts_with_space) escaped = kSpace;
      break;
    case SpacePrefix::kMetaspaceFirst:
      if (at_start && !starts_with_space) escaped = kSpace;
      break;
  }
  for (char c : text) {
    if (c == ' ') {
      escaped.append(kSpace);
    } else {
      escaped.push_back(c);
    }
  }
  std::string_view all = escaped;
  auto encode_word = [&](std::string_view word) {
    if (spm_) {
      spm_->encode(word, out);
    } else {
      encode_piece(word, out);
    }
  };
  if (!vocab_.split_on_space) {
    encode_word(all);
    return;
  }
  // Metaspace split: each "▁" starts a word (HF's MergedWithNext).
  size_t start = 0;
  for (size_t pos = all.find(kSpace, 1); pos != std::string_view::npos; pos = all.find(kSpace, pos + 1)) {
    encode_word(all.substr(start, pos - start));
    start = pos;
  }
  encode_word(all.substr(start));
}

void Tokenizer::encode_run(std::string_view text, bool at_start, std::vector<int32_t>& out) const {
  if (const HfPipeline* hf = vocab_.hf_pipeline.get()) {
    std::vector<hf::Piece> pieces;
    hf->split(text, at_start, pieces);
    for (const hf::Piece& p : pieces) {
      if (vocab_.ignore_merges) {
        auto it = token_ids_.find(p.text);
        if (it != token_ids_.end()) {
          out.push_back(it->second);
          continue;
        }
      }
      encode_cached(p.text, out);
    }
    return;
  }
  if (vocab_.normalize_nfc && !normalizer::trivially_nfc(text)) {
    const std::string normalized = normalizer::nfc(text);
    if (normalized != text) {
      encode_run(std::string_view(normalized), at_start, out);
      return;
    }
  }
  if (is_spm()) {
    encode_spm_run(text, at_start, out);
  } else {
    encode_plain(text, out);
  }
}

void Tokenizer::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  if (vocab_.hf_pipeline) {
    encode_run(text, /*at_start=*/true, out);
    return;
  }
  if (is_spm()) {
    encode_spm_run(text, /*at_start=*/true, out);
    return;
  }
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
  // `run_at_start`: the run begins the text (for SpacePrefix::kMetaspaceFirst).
  std::string run;
  bool run_at_start = true;
  auto flush = [&](std::string_view tail) {
    if (run.empty()) {
      encode_run(tail, run_at_start, out);
    } else {
      run.append(tail);
      encode_run(run, run_at_start, out);
      run.clear();
    }
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
        std::string_view before = text.substr(seg_start, pos - seg_start);
        if (hit->lstrip) {
          before = before.substr(0, trim_white_space_end(before));
          if (before.empty()) run.resize(trim_white_space_end(run));
        }
        flush(before);
        run_at_start = false;
        out.push_back(hit->id);
        pos += hit->text.size();
        if (hit->rstrip) {
          while (pos < text.size()) {
            const size_t n = white_space_at(text, pos);
            if (n == 0) break;
            pos += n;
          }
        }
        seg_start = pos;
        --pos;  // the loop steps to seg_start
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
  if (const HfPipeline* hf = vocab_.hf_pipeline.get()) {
    // As HF: the vocab text of each token through the decoder chain; skip_special drops the added
    // tokens marked special (CONTROL), not the others.
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
      if (id < 0 || id >= n_vocab() || (skip_special && token_type(id) == TokenType::kControl)) continue;
      tokens.push_back(vocab_.tokens[id]);
    }
    std::string text = hf->decode(std::move(tokens), /*stream=*/false);
    return utf8::is_valid(text) ? text : utf8::sanitize(text);
  }
  std::string bytes;
  for (int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    bytes += token_to_piece(id);
  }
  if (is_spm() && vocab_.decode_strip_space && !bytes.empty() && bytes[0] == ' ') bytes.erase(0, 1);
  if (utf8::is_valid(bytes)) return bytes;
  return utf8::sanitize(bytes);
}

}  // namespace nanoserve
