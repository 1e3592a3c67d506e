#include "tokenizer/normalizer.h"

#ifdef NANOSERVE_ICU
#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <vector>
#endif

#include "tokenizer/utf8.h"

namespace nanoserve::normalizer {

namespace {
bool ascii(std::string_view text) {
  for (char c : text) {
    if (static_cast<uint8_t>(c) >= 0x80) return false;
  }
  return true;
}
}  // namespace

const char* form_name(Form form) {
  switch (form) {
    case Form::kNfc: return "NFC";
    case Form::kNfd: return "NFD";
    case Form::kNfkc: return "NFKC";
    case Form::kNfkd: return "NFKD";
  }
  return "?";
}

bool trivially_nfc(std::string_view text) {
  // U+0300, the first code point that NFC can change or combine, is 0xCC 0x80 in UTF-8: lead bytes
  // below 0xCC (and ASCII) start only code points below it.
  for (char c : text) {
    if (static_cast<uint8_t>(c) >= 0xCC) return false;
  }
  return true;
}

#ifdef NANOSERVE_ICU

bool nfc_available() {
  return true;
}

namespace {

const UNormalizer2* instance(Form form, UErrorCode* err) {
  switch (form) {
    case Form::kNfc: return unorm2_getNFCInstance(err);
    case Form::kNfd: return unorm2_getNFDInstance(err);
    case Form::kNfkc: return unorm2_getNFKCInstance(err);
    case Form::kNfkd: return unorm2_getNFKDInstance(err);
  }
  return nullptr;
}

std::u16string to_utf16(std::string_view text) {
  int32_t n16 = 0;
  UErrorCode err = U_ZERO_ERROR;
  u_strFromUTF8(nullptr, 0, &n16, text.data(), static_cast<int32_t>(text.size()), &err);
  std::u16string src(static_cast<size_t>(n16), u'\0');
  err = U_ZERO_ERROR;
  u_strFromUTF8(src.data(), n16, &n16, text.data(), static_cast<int32_t>(text.size()), &err);
  return src;
}

std::string to_utf8(const UChar* s, int32_t n) {
  int32_t n8 = 0;
  UErrorCode err = U_ZERO_ERROR;
  u_strToUTF8(nullptr, 0, &n8, s, n, &err);
  std::string out(static_cast<size_t>(n8), '\0');
  err = U_ZERO_ERROR;
  u_strToUTF8(out.data(), n8, &n8, s, n, &err);
  return out;
}

}  // namespace

std::string nfc(std::string_view text) {
  if (trivially_nfc(text)) return std::string(text);
  return normalize(text, Form::kNfc);
}

std::string normalize(std::string_view text, Form form) {
  if (ascii(text)) return std::string(text);
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* norm = instance(form, &err);
  if (U_FAILURE(err) || norm == nullptr) return std::string(text);
  // UTF-8 -> UTF-16 -> normalized -> UTF-8; the output is sized by a first pass.
  const std::u16string src = to_utf16(text);
  err = U_ZERO_ERROR;
  const int32_t n = unorm2_normalize(norm, src.data(), static_cast<int32_t>(src.size()), nullptr, 0, &err);
  std::u16string dst(static_cast<size_t>(n), u'\0');
  err = U_ZERO_ERROR;
  unorm2_normalize(norm, src.data(), static_cast<int32_t>(src.size()), dst.data(), n, &err);
  if (U_FAILURE(err) && err != U_STRING_NOT_TERMINATED_WARNING) return std::string(text);
  return to_utf8(dst.data(), n);
}

void append_lowercase(char32_t c, std::string& out) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
    return;
  }
  // One code point alone: the root locale's full mapping without context, as Rust's.
  std::string one;
  utf8::append(one, c);
  const std::u16string src = to_utf16(one);
  UChar dst[8];
  UErrorCode err = U_ZERO_ERROR;
  const int32_t n = u_strToLower(dst, 8, src.data(), static_cast<int32_t>(src.size()), "", &err);
  if (U_FAILURE(err) || n > 8) {
    out.append(one);
    return;
  }
  out.append(to_utf8(dst, n));
}

#else

bool nfc_available() {
  return false;
}

std::string nfc(std::string_view text) {
  return std::string(text);
}

std::string normalize(std::string_view text, Form) {
  return std::string(text);
}

void append_lowercase(char32_t c, std::string& out) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
  } else {
    utf8::append(out, c);
  }
}

#endif

}  // namespace nanoserve::normalizer
