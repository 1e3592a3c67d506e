#include "tokenizer/utf8.h"

#include "core/check.h"

namespace nanoserve::utf8 {

namespace {

// Allowed range of the second byte for a given lead byte (Table 3-7);
// continuation bytes after the second are always 0x80..0xBF.
struct LeadInfo {
  uint8_t len;  // total sequence length, 0 for a byte that can never lead
  uint8_t lo;   // second byte lower bound
  uint8_t hi;   // second byte upper bound
};

LeadInfo lead_info(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};  // continuation or overlong 2-byte lead
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b < 0xED) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};  // excludes surrogates
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};  // up to U+10FFFF
  return {0, 0, 0};
}

// How many bytes starting at pos match a prefix of a well-formed sequence.
// Sets *full when all info.len bytes are present and valid.
size_t valid_prefix(std::string_view s, size_t pos, const LeadInfo& info) {
  size_t n = 1;
  for (; n < info.len && pos + n < s.size(); ++n) {
    uint8_t c = static_cast<uint8_t>(s[pos + n]);
    uint8_t lo = n == 1 ? info.lo : 0x80;
    uint8_t hi = n == 1 ? info.hi : 0xBF;
    if (c < lo || c > hi) break;
  }
  return n;
}

}  // namespace

size_t sequence_length(std::string_view s, size_t pos, size_t* maximal_subpart) {
  NS_CHECK_LT(pos, s.size());
  LeadInfo info = lead_info(static_cast<uint8_t>(s[pos]));
  if (info.len == 1) return 1;
  if (info.len == 0) {
    if (maximal_subpart) *maximal_subpart = 1;
    return 0;
  }
  size_t n = valid_prefix(s, pos, info);
  if (n == info.len) return n;
  if (maximal_subpart) *maximal_subpart = n;
  return 0;
}

size_t incomplete_tail(std::string_view s) {
  // A truncated sequence is at most 3 bytes long; look back that far for a lead.
  size_t start = s.size() >= 3 ? s.size() - 3 : 0;
  for (size_t pos = start; pos < s.size(); ++pos) {
    LeadInfo info = lead_info(static_cast<uint8_t>(s[pos]));
    if (info.len < 2) continue;
    size_t have = s.size() - pos;
    if (have >= info.len) continue;
    if (valid_prefix(s, pos, info) == have) return have;
  }
  return 0;
}

bool is_valid(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    size_t n = sequence_length(s, pos);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

std::string sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    size_t bad = 0;
    size_t n = sequence_length(s, pos, &bad);
    if (n > 0) {
      out.append(s.substr(pos, n));
      pos += n;
    } else {
      append(out, kReplacement);
      pos += bad;
    }
  }
  return out;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

char32_t decode_at(std::string_view s, size_t pos, size_t len) {
  auto b = [&](size_t i) { return static_cast<char32_t>(static_cast<uint8_t>(s[pos + i])); };
  switch (len) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    case 4: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
  NS_CHECK(false) << "bad UTF-8 length " << len;
  return 0;
}

}  // namespace nanoserve::utf8
