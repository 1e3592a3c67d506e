#pragma once
// Bearer-key checking. The comparison takes time independent of where the
// keys differ, so the key cannot be guessed byte by byte from response times.

#include <string_view>

namespace nanoserve::server {

// Compares every byte of `given` whatever the contents; the running time
// depends only on the lengths, never on where a mismatch is.
bool constant_time_equal(std::string_view given, std::string_view expected);

// True when `authorization` (the header's value as received, after HTTP's own
// whitespace trimming) is "Bearer " followed by exactly the bytes of `api_key`:
// no decoding, no trimming, nothing appended, a NUL compared like any byte.
// The scheme is case-insensitive (RFC 7235), the key is not. An empty api_key
// means no key is required.
bool bearer_authorized(std::string_view authorization, std::string_view api_key);

}  // namespace nanoserve::server
