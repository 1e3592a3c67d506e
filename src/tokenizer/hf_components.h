#pragma once
// The components of a tokenizer.json pipeline, each implemented once and
// composed as the file says: normalizers (hf_normalizers.cc), pre-tokenizers
// (hf_pre_tokenizers.cc) and decoders (hf_decoders.cc). The model (BPE) and
// the post-processor are read in hf_tokenizer.cc.
//
// Text moves through them as Hugging Face's does, without the offsets that
// only the API's offset mapping needs. One thing of the offsets is kept:
// Metaspace's prepend_scheme "first" adds its "▁" only to a piece whose first
// character comes from the start of the input, which normalizers and earlier
// splits change. Each text therefore carries `zero`: how many of its leading
// bytes are characters aligned to the input's first character (the first
// character itself, what a normalizer expanded it into or put before it;
// 0 once it is gone or the text is not the start of the input).

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/utf8.h"

namespace nanoserve::hf {

// One piece of pre-tokenized text.
struct Piece {
  std::string text;
  size_t zero = 0;  // leading bytes aligned to the input's first character
};

class NormalizerStep {
 public:
  virtual ~NormalizerStep() = default;
  // PRECOND: `text` is valid UTF-8; it stays so.
  virtual void normalize(std::string& text, size_t& zero) const = 0;
};

class PreTokenizerStep {
 public:
  virtual ~PreTokenizerStep() = default;
  // Splits and rewrites `pieces` in place; empty pieces are dropped.
  virtual void pre_tokenize(std::vector<Piece>& pieces) const = 0;
};

class DecoderStep {
 public:
  virtual ~DecoderStep() = default;
  // Rewrites the token strings. `stream`: the tokens are one token's text that
  // continues earlier output (Tokenizer::token_to_piece), so bytes stay raw
  // (no U+FFFD), Strip does not apply and no token is the first.
  virtual void decode(std::vector<std::string>& tokens, bool stream) const = 0;
};

// Each parser reads the component object at `path` (e.g. "normalizer.normalizers[1]"),
// UNIMPLEMENTED naming the path and the type for what is not supported,
// DATA_LOSS naming the path for a malformed one. Null JSON gives null.
StatusOr<std::unique_ptr<NormalizerStep>> parse_normalizer(const nlohmann::json& j, const std::string& path);
StatusOr<std::unique_ptr<PreTokenizerStep>> parse_pre_tokenizer(const nlohmann::json& j,
                                                                const std::string& path);
StatusOr<std::unique_ptr<DecoderStep>> parse_decoder(const nlohmann::json& j, const std::string& path);

// The supported type names, for messages and docs.
inline constexpr const char* kNormalizerTypes =
    "Sequence, NFC, NFD, NFKC, NFKD, Lowercase, Strip, Prepend, Replace, BertNormalizer";
inline constexpr const char* kPreTokenizerTypes =
    "Sequence, Split, ByteLevel, Digits, Metaspace, Whitespace, WhitespaceSplit, Punctuation, "
    "BertPreTokenizer, CharDelimiterSplit";
inline constexpr const char* kDecoderTypes =
    "Sequence, ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace";

// Helpers shared by the component files.
std::string type_of(const nlohmann::json& j);
Status bad(const std::string& path, const std::string& what);
Status unsupported(const std::string& path, const std::string& what);
// "'S'", at most 40 bytes of S.
std::string quote_name(std::string_view s);
// "'PATH': 'TYPE' is not supported (SUPPORTED are)".
Status unsupported_type(const std::string& path, const std::string& type, const char* supported);
// An optional boolean field: `dflt` when absent or null, DATA_LOSS when not a boolean.
StatusOr<bool> bool_field(const nlohmann::json& j, const char* key, bool dflt, const std::string& path);
StatusOr<std::string> string_field(const nlohmann::json& j, const char* key, const std::string& path);
// A {"String": s} or {"Regex": r} pattern.
struct PatternSpec {
  std::string text;
  bool regex = false;
};
StatusOr<PatternSpec> pattern_field(const nlohmann::json& j, const char* key, const std::string& path);

// Rewrites `text` (PRECOND: valid UTF-8) one code point at a time: `f(c, raw, out)` appends what
// the code point `c` (bytes `raw`) becomes. `zero` becomes the output bytes of its leading bytes.
template <class F>
void map_chars(std::string& text, size_t& zero, F&& f) {
  std::string out;
  out.reserve(text.size() + 8);
  size_t new_zero = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t n = utf8::sequence_length(text, pos);
    if (n == 0) n = 1;
    f(utf8::decode_at(text, pos, n), std::string_view(text).substr(pos, n), out);
    if (pos < zero) new_zero = out.size();
    pos += n;
  }
  text = std::move(out);
  zero = new_zero;
}

// True when `c` is Unicode White_Space (Rust's char::is_whitespace).
bool is_white_space(char32_t c);

}  // namespace nanoserve::hf
