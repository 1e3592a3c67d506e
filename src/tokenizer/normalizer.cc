#include "tokenizer/normalizer.h"

#ifdef NANOSERVE_ICU
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <vector>
#endif

namespace nanoserve::normalizer {

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

std::string nfc(std::string_view text) {
  if (trivially_nfc(text)) return std::string(text);
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* norm = unorm2_getNFCInstance(&err);
  if (U_FAILURE(err)) return std::string(text);
  // UTF-8 -> UTF-16 -> NFC -> UTF-8. Each step is sized first; valid input cannot fail.
  int32_t n16 = 0;
  err = U_ZERO_ERROR;
  u_strFromUTF8(nullptr, 0, &n16, text.data(), static_cast<int32_t>(text.size()), &err);
  std::vector<UChar> src(static_cast<size_t>(n16) + 1);
  err = U_ZERO_ERROR;
  u_strFromUTF8(src.data(), n16 + 1, &n16, text.data(), static_cast<int32_t>(text.size()), &err);
  if (U_FAILURE(err)) return std::string(text);
  // NFC never grows UTF-16 text by more than 3x (Unicode's stated bound for NFC is 3x).
  std::vector<UChar> dst(static_cast<size_t>(n16) * 3 + 1);
  err = U_ZERO_ERROR;
  const int32_t nd =
      unorm2_normalize(norm, src.data(), n16, dst.data(), static_cast<int32_t>(dst.size()), &err);
  if (U_FAILURE(err)) return std::string(text);
  int32_t n8 = 0;
  err = U_ZERO_ERROR;
  u_strToUTF8(nullptr, 0, &n8, dst.data(), nd, &err);
  std::string out(static_cast<size_t>(n8), '\0');
  err = U_ZERO_ERROR;
  u_strToUTF8(out.data(), n8, &n8, dst.data(), nd, &err);
  if (U_FAILURE(err) && err != U_STRING_NOT_TERMINATED_WARNING) return std::string(text);
  return out;
}

#else

bool nfc_available() {
  return false;
}

std::string nfc(std::string_view text) {
  return std::string(text);
}

#endif

}  // namespace nanoserve::normalizer
