#include "template/jinja_lexer.h"

#include <cctype>
#include <cstdlib>

#include "template/jinja_value.h"

namespace nanoserve::jinja {

std::string position_text(std::string_view source, uint32_t pos) {
  size_t line = 1, col = 1;
  for (size_t k = 0; k < pos && k < source.size(); ++k) {
    if (source[k] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(col);
}

namespace {

std::string normalise_newlines(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (size_t k = 0; k < src.size(); ++k) {
    if (src[k] == '\r') {
      out += '\n';
      if (k + 1 < src.size() && src[k + 1] == '\n') ++k;
    } else {
      out += src[k];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Python's str.rstrip() / \s* over Unicode whitespace.
size_t rstrip_end(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t k = end - 1;
    while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
    if (space_at(s, k) != end - k) break;
    end = k;
  }
  return end;
}
size_t skip_space(std::string_view s, size_t pos) {
  while (pos < s.size()) {
    size_t n = space_at(s, pos);
    if (n == 0) break;
    pos += n;
  }
  return pos;
}

class Lexer {
 public:
  explicit Lexer(std::string source) { out_.source = std::move(source); }

  StatusOr<Lexed> run() {
    const std::string_view s = out_.source;
    size_t pos = 0;
    bool line_starting = true;
    while (pos < s.size()) {
      // The next tag start ({{, {% or {#) and its sign.
      size_t open = pos;
      while (true) {
        open = s.find('{', open);
        if (open == std::string_view::npos || open + 1 >= s.size()) {
          open = std::string_view::npos;
          break;
        }
        char c = s[open + 1];
        if (c == '{' || c == '%' || c == '#') break;
        ++open;
      }
      std::string_view text = s.substr(pos, open == std::string_view::npos ? s.size() - pos : open - pos);
      if (open == std::string_view::npos) {
        push_text(text, pos);
        break;
      }
      const char kind = s[open + 1];
      const char sign = open + 2 < s.size() && (s[open + 2] == '-' || s[open + 2] == '+') ? s[open + 2] : 0;
      if (sign == '-') {
        text = text.substr(0, rstrip_end(text));
      } else if (sign != '+' && kind != '{') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string_view::npos ? 0 : l_pos + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() && skip_space(text, l_pos) == text.size()) {
          text = text.substr(0, l_pos);
        }
      }
      push_text(text, pos);
      size_t inner = open + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        size_t close = s.find("#}", inner);
        if (close == std::string_view::npos) return error(open, "the comment is not closed ('#}' missing)");
        pos = end_of_tag(close, close + 2, /*trim=*/true);
      } else if (kind == '%' && is_raw(inner)) {
        auto st = lex_raw(open, inner);
        if (!st.ok()) return st.status();
        pos = *st;
      } else {
        push(kind == '%' ? Tok::kBlockBegin : Tok::kVarBegin, open, "");
        auto st = lex_tag(inner, kind == '%');
        if (!st.ok()) return st.status();
        pos = *st;
      }
      line_starting = pos > 0 && s[pos - 1] == '\n';
    }
    push(Tok::kEof, static_cast<uint32_t>(s.size()), "");
    return std::move(out_);
  }

 private:
  Status error(size_t pos, const std::string& what) {
    return invalid_argument("chat template: " + position_text(out_.source, static_cast<uint32_t>(pos)) +
                            ": " + what);
  }
  void push(Tok type, size_t pos, std::string text) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    t.pos = static_cast<uint32_t>(pos);
    out_.tokens.push_back(std::move(t));
  }
  void push_text(std::string_view text, size_t pos) {
    if (!text.empty()) push(Tok::kText, pos, std::string(text));
  }

  // Where the text after a tag ends resumes: `close` is the offset of the end mark's first
  // character (the '%', '}' or '#'), `after` the offset just past it.
  size_t end_of_tag(size_t close, size_t after, bool trim) {
    const std::string_view s = out_.source;
    char before = close > 0 ? s[close - 1] : 0;
    if (before == '-') return skip_space(s, after);
    if (before == '+') return after;
    if (trim && after < s.size() && s[after] == '\n') return after + 1;
    return after;
  }

  bool is_raw(size_t inner) const {
    const std::string_view s = out_.source;
    size_t k = skip_space(s, inner);
    if (s.compare(k, 3, "raw") != 0) return false;
    k = skip_space(s, k + 3);
    return s.compare(k, 2, "%}") == 0 || s.compare(k, 3, "-%}") == 0;
  }

  StatusOr<size_t> lex_raw(size_t open, size_t inner) {
    const std::string_view s = out_.source;
    size_t k = skip_space(s, skip_space(s, inner) + 3);
    size_t body = s[k] == '-' ? skip_space(s, k + 3) : k + 2;
    for (size_t at = s.find("{%", body); at != std::string_view::npos; at = s.find("{%", at + 2)) {
      size_t j = at + 2;
      char sign = j < s.size() && (s[j] == '-' || s[j] == '+') ? s[j] : 0;
      if (sign) ++j;
      j = skip_space(s, j);
      if (s.compare(j, 6, "endraw") != 0) continue;
      j = skip_space(s, j + 6);
      size_t close = s.compare(j, 2, "%}") == 0                                   ? j
                     : s.compare(j, 3, "-%}") == 0 || s.compare(j, 3, "+%}") == 0 ? j + 1
                                                                                  : 0;
      if (close == 0) continue;
      std::string_view text = s.substr(body, at - body);
      if (sign == '-') {
        text = text.substr(0, rstrip_end(text));
      } else if (sign != '+') {
        size_t l_pos = text.rfind('\n');
        if (l_pos != std::string_view::npos && skip_space(text, l_pos + 1) == text.size())
          text = text.substr(0, l_pos + 1);
      }
      push_text(text, body);
      return end_of_tag(close, close + 2, /*trim=*/true);
    }
    return error(open, "'raw' block is not closed ('{% endraw %}' missing)");
  }

  // Tokens of one tag from `pos` (just past `{%`/`{{` and its sign); returns where text resumes.
  StatusOr<size_t> lex_tag(size_t pos, bool block) {
    const std::string_view s = out_.source;
    std::vector<char> brackets;
    while (true) {
      pos = skip_space(s, pos);
      if (pos >= s.size())
        return error(pos, block ? "the tag is not closed ('%}' missing)"
                                : "the expression is not closed ('}}' missing)");
      if (brackets.empty()) {
        if (block) {
          for (size_t sign : {0, 1}) {
            if ((sign == 0 || s[pos] == '-' || s[pos] == '+') && s.compare(pos + sign, 2, "%}") == 0) {
              push(Tok::kBlockEnd, pos, "");
              return end_of_tag(pos + sign, pos + sign + 2, /*trim=*/true);
            }
          }
        } else {
          for (size_t sign : {0, 1}) {
            if ((sign == 0 || s[pos] == '-') && s.compare(pos + sign, 2, "}}") == 0) {
              push(Tok::kVarEnd, pos, "");
              return end_of_tag(pos + sign, pos + sign + 2, /*trim=*/false);
            }
          }
        }
      }
      const char c = s[pos];
      if (std::isdigit(static_cast<unsigned char>(c))) {
        pos = lex_number(pos);
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t j = pos;
        while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
        push(Tok::kName, pos, std::string(s.substr(pos, j - pos)));
        pos = j;
      } else if (c == '\'' || c == '"') {
        auto end = lex_string(pos);
        if (!end.ok()) return end.status();
        pos = *end;
      } else {
        static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
        std::string op;
        for (std::string_view two : kTwo) {
          if (s.compare(pos, 2, two) == 0) op = two;
        }
        if (op.empty()) {
          if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
            return error(pos, std::string("unexpected character '") + c + "'");
          }
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") {
          if (brackets.size() >= 256) return error(pos, "brackets nested deeper than 256");
          brackets.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
        } else if (op == ")" || op == "]" || op == "}") {
          if (brackets.empty() || brackets.back() != op[0]) return error(pos, "unexpected '" + op + "'");
          brackets.pop_back();
        }
        push(Tok::kOp, pos, op);
        pos += op.size();
      }
    }
  }

  // digits with '_' separators; a float has a fraction and/or an exponent.
  size_t lex_number(size_t pos) {
    const std::string_view s = out_.source;
    auto digits = [&](size_t k) {
      size_t j = k;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) {
        ++j;
        if (j + 1 < s.size() && s[j] == '_' && std::isdigit(static_cast<unsigned char>(s[j + 1]))) ++j;
      }
      return j;
    };
    size_t j = digits(pos);
    bool is_float = false;
    if (j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]))) {
      j = digits(j + 1);
      is_float = true;
    }
    if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
      size_t k = j + 1;
      if (k < s.size() && (s[k] == '+' || s[k] == '-')) ++k;
      if (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) {
        j = digits(k);
        is_float = true;
      }
    }
    std::string text;
    for (size_t k = pos; k < j; ++k) {
      if (s[k] != '_') text += s[k];
    }
    Token t;
    t.pos = static_cast<uint32_t>(pos);
    t.text = text;
    if (is_float) {
      t.type = Tok::kFloat;
      t.f = std::strtod(text.c_str(), nullptr);
    } else {
      t.type = Tok::kInt;
      errno = 0;
      unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
      if (errno != 0 || v > static_cast<unsigned long long>(INT64_MAX)) {
        t.type = Tok::kFloat;  // beyond int64: kept as a float rather than wrapped
        t.f = std::strtod(text.c_str(), nullptr);
      } else {
        t.i = static_cast<int64_t>(v);
      }
    }
    out_.tokens.push_back(std::move(t));
    return j;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  // A quoted literal with Python's escapes (\n \t \xhh \uXXXX ...; an unknown escape stays as written).
  StatusOr<size_t> lex_string(size_t pos) {
    const std::string_view s = out_.source;
    const char q = s[pos];
    std::string v;
    size_t k = pos + 1;
    while (true) {
      if (k >= s.size()) return error(pos, "the string is not closed");
      char c = s[k];
      if (c == q) break;
      if (c != '\\') {
        v += c;
        ++k;
        continue;
      }
      if (k + 1 >= s.size()) return error(pos, "the string is not closed");
      char e = s[k + 1];
      k += 2;
      auto hex = [&](size_t n) -> bool {
        if (k + n > s.size()) return false;
        uint32_t cp = 0;
        for (size_t j = 0; j < n; ++j) {
          if (!std::isxdigit(static_cast<unsigned char>(s[k + j]))) return false;
          cp = cp * 16 +
               static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(s[k + j]))
                                         ? s[k + j] - '0'
                                         : (std::tolower(static_cast<unsigned char>(s[k + j])) - 'a' + 10));
        }
        if (cp > 0x10FFFF) return false;
        append_utf8(v, cp);
        k += n;
        return true;
      };
      switch (e) {
        case 'n': v += '\n'; break;
        case 't': v += '\t'; break;
        case 'r': v += '\r'; break;
        case 'a': v += '\a'; break;
        case 'b': v += '\b'; break;
        case 'f': v += '\f'; break;
        case 'v': v += '\v'; break;
        case '\\': v += '\\'; break;
        case '\'': v += '\''; break;
        case '"': v += '"'; break;
        case '\n': break;
        case 'x':
          if (!hex(2)) return error(k - 2, "bad \\x escape in a string");
          break;
        case 'u':
          if (!hex(4)) return error(k - 2, "bad \\u escape in a string");
          break;
        case 'U':
          if (!hex(8)) return error(k - 2, "bad \\U escape in a string");
          break;
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int j = 0; j < 2 && k < s.size() && s[k] >= '0' && s[k] <= '7'; ++j)
              cp = cp * 8 + (s[k++] - '0');
            append_utf8(v, cp);
          } else {
            v += '\\';
            v += e;
          }
      }
    }
    push(Tok::kString, pos, std::move(v));
    return k + 1;
  }

  Lexed out_;
};

}  // namespace

StatusOr<Lexed> lex(std::string_view source) {
  return Lexer(normalise_newlines(source)).run();
}

}  // namespace nanoserve::jinja
