#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/hf_regex.h"

#include <pcre2.h>

#include "core/check.h"

namespace nanoserve::hf {

const char* const kWhiteSpaceClass =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}"
    "\\x{3000}";
const char* const kWordClass = "\\p{Alphabetic}\\p{M}\\p{N}\\p{Pc}";
const char* const kRustWordClass = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}";

namespace {

constexpr const char* kHexClass = "0-9a-fA-F";

bool compiles(const std::string& pattern) {
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  if (code == nullptr) return false;
  pcre2_code_free(code);
  return true;
}

// Oniguruma (Ruby syntax) -> PCRE2, for the escapes that differ (see the header).
StatusOr<std::string> translate(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      const char* body = e == 's' || e == 'S'   ? kWhiteSpaceClass
                         : e == 'w' || e == 'W' ? kWordClass
                         : e == 'h' || e == 'H' ? kHexClass
                                                : nullptr;
      if ((e == 'p' || e == 'P') && i + 1 < p.size() && p[i + 1] == '{') {
        // A script name means the script in Oniguruma but its Script_Extensions in PCRE2 10.40+
        // (where "。" is Han): spell it \p{sc:Name} when that is a script.
        const size_t close = p.find('}', i + 2);
        if (close != std::string_view::npos) {
          std::string name(p.substr(i + 2, close - i - 2));
          const bool neg = !name.empty() && name[0] == '^';
          if (neg) name.erase(0, 1);
          const std::string sc = std::string("\\") + e + "{" + (neg ? "^" : "") + "sc:" + name + "}";
          if (!name.empty() && name.find(':') == std::string::npos && compiles(sc)) {
            out.append(sc);
            i = close;
            continue;
          }
        }
      }
      if (body == nullptr) {
        out.push_back('\\');
        out.push_back(e);
        continue;
      }
      const bool negated = e == 'S' || e == 'W' || e == 'H';
      if (in_class) {
        if (negated) {
          return unimplemented(std::string("the escape \\") + e + " inside a [...] class is not supported");
        }
        out.append(body);
      } else {
        out.append(negated ? "[^" : "[").append(body).append("]");
      }
      continue;
    }
    if (in_class) {
      if (c == '[') {
        if (i + 1 < p.size() && p[i + 1] == ':') {  // a POSIX class, [:alpha:]
          const size_t end = p.find(":]", i + 2);
          if (end == std::string_view::npos) return unimplemented("an unterminated [: :] class");
          out.append(p.substr(i, end + 2 - i));
          i = end + 1;
          continue;
        }
        return unimplemented("a nested [...] class is not supported");
      }
      if (c == '&' && i + 1 < p.size() && p[i + 1] == '&') {
        return unimplemented("class intersection (&&) is not supported");
      }
      if (c == ']') in_class = false;
      out.push_back(c);
      continue;
    }
    out.push_back(c);
    if (c == '[') {
      in_class = true;
      // A ']' right after '[' or '[^' is a literal in both engines.
      if (i + 1 < p.size() && p[i + 1] == '^') out.push_back(p[++i]);
      if (i + 1 < p.size() && p[i + 1] == ']') out.push_back(p[++i]);
    }
  }
  return out;
}

std::string quote(std::string_view text) {
  std::string out = "\\Q";
  size_t pos = 0;
  while (true) {  // "\E" inside the text ends the quote: split it there
    const size_t at = text.find("\\E", pos);
    if (at == std::string_view::npos) break;
    out.append(text.substr(pos, at - pos)).append("\\E\\\\\\QE");
    pos = at + 2;
  }
  out.append(text.substr(pos)).append("\\E");
  return out;
}

}  // namespace

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() {
    if (code) pcre2_code_free(code);
  }
};

Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;
Regex::~Regex() = default;

StatusOr<Regex> Regex::from_pcre2(std::string_view pattern) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  Regex r;
  r.code_ = std::make_unique<Code>();
  r.code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &err, &err_offset, nullptr);
  if (r.code_->code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return unimplemented("the regex does not compile at offset " + std::to_string(err_offset) + ": " +
                         reinterpret_cast<const char*>(msg));
  }
  r.code_->jit = pcre2_jit_compile(r.code_->code, PCRE2_JIT_COMPLETE) == 0;
  return r;
}

StatusOr<Regex> Regex::from_onig(std::string_view pattern) {
  NS_ASSIGN_OR_RETURN(std::string p, translate(pattern));
  return from_pcre2(p);
}

StatusOr<Regex> Regex::literal(std::string_view text) {
  return from_pcre2(quote(text));
}

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_->code, nullptr);
  NS_CHECK(md != nullptr) << "pcre2 match data allocation failed";
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    int rc = PCRE2_ERROR_NOMATCH;
    if (code_->jit)
      rc = pcre2_jit_match(code_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    // The interpreter keeps its backtracking on the heap: the fallback when the JIT stack runs out.
    if (!code_->jit || (rc < 0 && rc != PCRE2_ERROR_NOMATCH)) {
      rc = pcre2_match(code_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    }
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[1] <= ov[0]) {  // empty: step over one code point
      pos = ov[0] + 1;
      while (pos < text.size() && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    out.emplace_back(ov[0], ov[1]);
    pos = ov[1];
  }
  pcre2_match_data_free(md);
}

bool Regex::matches_whole(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> m;
  find_all(text, m);
  return m.size() == 1 && m[0].first == 0 && m[0].second == text.size();
}

}  // namespace nanoserve::hf
