#pragma once
// Unicode normalization for tokenizer.json normalizers (Qwen2's NFC), done by
// ICU when the build has it (NANOSERVE_ICU).

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

}  // namespace nanoserve::normalizer
