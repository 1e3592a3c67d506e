// Case mapping for upper, lower, title and capitalize: Python's mappings for
// ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic (ß uppercases to SS);
// other scripts pass through unchanged (docs/chat_template.md).

#include <cctype>

#include "template/jinja_builtins.h"

namespace nanoserve::jinja {

namespace {

std::pair<uint32_t, size_t> decode(std::string_view s, size_t pos) {
  unsigned char c = static_cast<unsigned char>(s[pos]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || pos + n > s.size()) return {c, 1};
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < n; ++k) {
    unsigned char d = static_cast<unsigned char>(s[pos + k]);
    if ((d & 0xC0) != 0x80) return {c, 1};
    cp = (cp << 6) | (d & 0x3F);
  }
  return {cp, n};
}

void encode(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Latin Extended-A pairs capital/small as even/odd, except in 0x139-0x148 and 0x179-0x17E (odd/even).
bool ext_a_odd_upper(uint32_t cp) {
  return (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E);
}

uint32_t lower_cp(uint32_t cp) {
  if (cp < 0x80) return static_cast<uint32_t>(std::tolower(static_cast<int>(cp)));
  if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) return cp + 0x20;
  if (cp == 0x178) return 0xFF;
  if (cp == 0x130) return cp;  // İ lowercases to two code points; left as is
  if (cp >= 0x100 && cp <= 0x17F && cp != 0x138 && cp != 0x149 && cp != 0x17F) {
    bool upper = ext_a_odd_upper(cp) ? (cp & 1) : !(cp & 1);
    return upper ? cp + 1 : cp;
  }
  if (cp >= 0x391 && cp <= 0x3A9 && cp != 0x3A2) return cp + 0x20;
  if (cp >= 0x410 && cp <= 0x42F) return cp + 0x20;
  if (cp >= 0x400 && cp <= 0x40F) return cp + 0x50;
  return cp;
}

// The uppercase spelling of cp (ß is "SS"), appended to out.
void upper_into(uint32_t cp, std::string& out) {
  if (cp == 0xDF) {
    out += "SS";
    return;
  }
  uint32_t u = cp;
  if (cp < 0x80) {
    u = static_cast<uint32_t>(std::toupper(static_cast<int>(cp)));
  } else if (cp >= 0xE0 && cp <= 0xFE && cp != 0xF7) {
    u = cp - 0x20;
  } else if (cp == 0xFF) {
    u = 0x178;
  } else if (cp == 0xB5) {
    u = 0x39C;
  } else if (cp >= 0x100 && cp <= 0x17F && cp != 0x138 && cp != 0x149 && cp != 0x131 && cp != 0x17F) {
    bool lower = ext_a_odd_upper(cp) ? !(cp & 1) : (cp & 1);
    u = lower ? cp - 1 : cp;
  } else if (cp == 0x131) {
    u = 'I';
  } else if (cp == 0x17F) {
    u = 'S';
  } else if (cp == 0x3C2) {
    u = 0x3A3;
  } else if (cp >= 0x3B1 && cp <= 0x3C9) {
    u = cp - 0x20;
  } else if (cp >= 0x430 && cp <= 0x44F) {
    u = cp - 0x20;
  } else if (cp >= 0x450 && cp <= 0x45F) {
    u = cp - 0x50;
  }
  encode(u, out);
}

// A letter with case: one that a mapping changes, or that is the result of one.
bool cased(uint32_t cp) {
  if (cp < 0x80) return std::isalpha(static_cast<int>(cp)) != 0;
  std::string up, self;
  upper_into(cp, up);
  encode(cp, self);
  return lower_cp(cp) != cp || up != self || cp == 0xDF;
}

enum class Mode { kUpper, kLower };

// Appends cp's mapping, with the origin of the source bytes [pos, pos + n).
void put(const Str& s, size_t pos, size_t n, uint32_t cp, Mode mode, Str& out) {
  std::string text;
  if (mode == Mode::kUpper) {
    upper_into(cp, text);
  } else {
    encode(lower_cp(cp), text);
  }
  Str piece = s.sub(pos, n);
  if (piece.text == text) {
    out.append(piece);
  } else if (piece.any_caller()) {
    out.append_caller(text);
  } else {
    out.append_template(text);
  }
}

}  // namespace

Str upper(const Str& s) {
  Str out;
  for (size_t k = 0; k < s.text.size();) {
    auto [cp, n] = decode(s.text, k);
    put(s, k, n, cp, Mode::kUpper, out);
    k += n;
  }
  return out;
}

Str lower(const Str& s) {
  Str out;
  for (size_t k = 0; k < s.text.size();) {
    auto [cp, n] = decode(s.text, k);
    put(s, k, n, cp, Mode::kLower, out);
    k += n;
  }
  return out;
}

Str title(const Str& s, bool python_title) {
  Str out;
  bool prev_cased = false;
  for (size_t k = 0; k < s.text.size();) {
    auto [cp, n] = decode(s.text, k);
    if (python_title) {
      // str.title(): a cased character after a cased one is lowered, any other is raised.
      const bool c = cased(cp);
      if (c)
        put(s, k, n, cp, prev_cased ? Mode::kLower : Mode::kUpper, out);
      else
        out.append(s.sub(k, n));
      prev_cased = c;
    } else {
      // Jinja's title filter: a word starts after whitespace or one of - ( { [ <.
      const bool sep =
          space_at(s.text, k) != 0 || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
      if (sep)
        out.append(s.sub(k, n));
      else
        put(s, k, n, cp, prev_cased ? Mode::kLower : Mode::kUpper, out);
      prev_cased = !sep;
    }
    k += n;
  }
  return out;
}

Str capitalize(const Str& s) {
  Str out;
  for (size_t k = 0; k < s.text.size();) {
    auto [cp, n] = decode(s.text, k);
    put(s, k, n, cp, k == 0 ? Mode::kUpper : Mode::kLower, out);
    k += n;
  }
  return out;
}

}  // namespace nanoserve::jinja
