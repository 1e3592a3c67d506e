#pragma once
// Unicode normalization and case mapping for tokenizer.json normalizers (NFC,
// NFD, NFKC, NFKD, Lowercase), done by ICU when the build has it
// (NANOSERVE_ICU).

#include <string>
#include <string_view>

namespace nanoserve::normalizer {

// Whether this build can normalize (ICU found at configure time).
bool nfc_available();

// `text` (PRECOND: valid UTF-8) in Normalization Form C. Text whose code
// points are all below U+0300 is NFC already and comes back unchanged without
// a conversion. Without ICU, returns `text` unchanged.
std::string nfc(std::string_view text);

// True when nfc(text) would equal `text` by the fast test above.
bool trivially_nfc(std::string_view text);

enum class Form { kNfc, kNfd, kNfkc, kNfkd };
const char* form_name(Form form);

// `text` (PRECOND: valid UTF-8) in the given form. ASCII text comes back
// unchanged without a conversion. Without ICU, returns `text` unchanged.
std::string normalize(std::string_view text, Form form);

// Appends the full lowercase mapping of one code point, as Rust's
// char::to_lowercase (no context: a final sigma stays σ); "İ" gives "i̇".
// Without ICU, only ASCII is mapped.
void append_lowercase(char32_t c, std::string& out);

}  // namespace nanoserve::normalizer
