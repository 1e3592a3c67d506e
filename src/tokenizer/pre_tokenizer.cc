#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pre_tokenizer.h"

#include <pcre2.h>

#include <utility>

#include "core/check.h"

namespace nanoserve {

namespace {

// Unicode White_Space, used for \s. {WS} in a pattern below is replaced by it.
constexpr std::string_view kWhiteSpace =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}"
    "\\x{3000}";

constexpr std::string_view kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^{WS}\\p{L}\\p{N}]+|[{WS}]+(?![^{WS}])|[{WS}]+";
constexpr std::string_view kEachDigit = "\\p{N}";
// The two smollm stages as one regex, which halves the matcher calls: digits
// match alone, and whitespace right before a digit is taken whole (it ended a
// stage-1 piece, where (?!\S) saw the end of the piece).
constexpr std::string_view kSmollmFused =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+|\\p{N}| "
    "?[^{WS}\\p{L}\\p{N}]+|[{WS}]+(?=\\p{N})|[{WS}]+(?![^{WS}])|[{WS}]+";
constexpr std::string_view kLlama3 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^{WS}\\p{L}\\p{N}]+[\\r\\n]*"
    "|[{WS}]*[\\r\\n]+|[{WS}]+(?![^{WS}])|[{WS}]+";
constexpr std::string_view kQwen2 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^{WS}\\p{L}\\p{N}]+[\\r\\n]*"
    "|[{WS}]*[\\r\\n]+|[{WS}]+(?![^{WS}])|[{WS}]+";

struct PreSpec {
  std::vector<std::string_view> patterns;
  bool ignore_merges = false;
};

bool lookup_spec(std::string_view name, bool reference, PreSpec* spec) {
  if (name == "gpt2" || name == "gpt-2" || name == "mpt" || name == "olmo" || name == "jais") {
    *spec = {{kGpt2}, false};
  } else if (name == "smollm" || name == "starcoder" || name == "refact" || name == "command-r" ||
             name == "codeshell" || name == "exaone" || name == "minerva-7b") {
    if (reference) {
      *spec = {{kEachDigit, kGpt2}, false};
    } else {
      *spec = {{kSmollmFused}, false};
    }
  } else if (name == "llama-bpe" || name == "llama3" || name == "llama-v3" || name == "smaug-bpe") {
    *spec = {{kLlama3}, true};
  } else if (name == "qwen2" || name == "stablelm2") {
    *spec = {{kQwen2}, false};
  } else {
    return false;
  }
  return true;
}

std::string expand(std::string_view pattern) {
  std::string out;
  constexpr std::string_view kMark = "{WS}";
  size_t pos = 0;
  while (true) {
    size_t at = pattern.find(kMark, pos);
    out.append(pattern.substr(pos, at == std::string_view::npos ? std::string_view::npos : at - pos));
    if (at == std::string_view::npos) break;
    out.append(kWhiteSpace);
    pos = at + kMark.size();
  }
  return out;
}

}  // namespace

struct PreTokenizer::Stage {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Stage() {
    if (code) pcre2_code_free(code);
  }
};

PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

StatusOr<PreTokenizer> PreTokenizer::create(std::string_view pre_name, bool reference) {
  PreSpec spec;
  if (!lookup_spec(pre_name, reference, &spec)) {
    return unimplemented(
        "tokenizer: pre-tokenizer '" + std::string(pre_name) +
        "' (tokenizer.ggml.pre) is not supported; known: gpt2, smollm, llama-bpe, qwen2 and aliases");
  }
  PreTokenizer p;
  p.name_ = std::string(pre_name);
  p.ignore_merges_ = spec.ignore_merges;
  for (std::string_view raw : spec.patterns) {
    std::string pattern = expand(raw);
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    auto stage = std::make_unique<Stage>();
    stage->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
    if (stage->code == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      return internal_error("tokenizer: pre-tokenizer regex does not compile at " +
                            std::to_string(err_offset) + ": " + reinterpret_cast<const char*>(msg));
    }
    stage->jit = pcre2_jit_compile(stage->code, PCRE2_JIT_COMPLETE) == 0;
    p.stages_.push_back(std::move(stage));
  }
  return p;
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
  std::vector<std::string_view> cur{text};
  std::vector<std::string_view> next;
  pcre2_match_data* md = nullptr;
  for (size_t si = 0; si < stages_.size(); ++si) {
    const Stage& st = *stages_[si];
    if (md) pcre2_match_data_free(md);
    md = pcre2_match_data_create_from_pattern(st.code, nullptr);
    NS_CHECK(md != nullptr) << "pcre2 match data allocation failed";
    next.clear();
    for (std::string_view piece : cur) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t pos = 0;   // next byte to search from
      size_t done = 0;  // bytes of `piece` already emitted
      while (pos < piece.size()) {
        // NO_UTF_CHECK: the caller passes valid UTF-8 and pieces end on code point boundaries.
        int rc = PCRE2_ERROR_NOMATCH;
        if (st.jit)
          rc = pcre2_jit_match(st.code, subject, piece.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
        // The interpreter keeps its backtracking on the heap: the fallback when the JIT stack runs out.
        if (!st.jit || (rc < 0 && rc != PCRE2_ERROR_NOMATCH)) {
          rc = pcre2_match(st.code, subject, piece.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
        }
        if (rc < 0) break;  // no further match (or a resource limit): the rest is one gap
        PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        size_t start = ov[0], end = ov[1];
        if (end == start) {
          // None of our patterns match empty; step over one code point defensively.
          ++pos;
          while (pos < piece.size() && (static_cast<uint8_t>(piece[pos]) & 0xC0) == 0x80) ++pos;
          continue;
        }
        if (start > done) next.push_back(piece.substr(done, start - done));
        next.push_back(piece.substr(start, end - start));
        done = pos = end;
      }
      if (done < piece.size()) next.push_back(piece.substr(done));
    }
    std::swap(cur, next);
  }
  if (md) pcre2_match_data_free(md);
  out.insert(out.end(), cur.begin(), cur.end());
}

}  // namespace nanoserve
