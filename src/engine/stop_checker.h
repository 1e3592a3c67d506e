#pragma once
// Decides when a request is done, and which of its text is safe to emit.
//
// After each generated token, in this order (steps 1 and 2 only once
// min_tokens tokens are generated, counting this one; the sampler keeps end
// tokens from being drawn before that):
//   1. an end token (the model's eos ids unless ignore_eos, or one of the
//      request's stop_token_ids) finishes with kStop; its own text is dropped;
//   2. a stop string that ends in this token's text finishes with kStop;
//      the text before it is emitted, the stop string and the rest are not
//      (one that ended before min_tokens was reached does not count, as in vLLM);
//   3. max_tokens generated finishes with kLength;
// otherwise the text is emitted except its longest suffix that could still
// grow into a stop string, which is held back until it cannot. On a finish,
// held text that did not become a stop string is emitted.
//
// Emitted text never needs to be searched again: a stop string cannot start
// inside it, because any suffix that was a stop-string prefix was held back.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampling_params.h"

namespace nanoserve {

// kAbort: the client or the server ended it; kError: a step failed under it
// (RequestOutput::error says why).
enum class FinishReason : uint8_t { kNone, kStop, kLength, kAbort, kError };

// "stop", "length", "abort", "error" (OpenAI finish_reason strings where they exist); "" for kNone.
const char* finish_reason_name(FinishReason reason);

class StopChecker {
 public:
  // eos_ids: the model's end tokens (eos, <|im_end|>, ...).
  StopChecker(const SamplingParams& params, std::span<const int32_t> eos_ids);

  // One generated token: its id, the count generated so far including it,
  // and the text it added (from the incremental detokenizer). Appends what
  // may be shown now to `emit`; returns kNone while the request goes on.
  FinishReason on_token(int32_t token, int32_t num_generated, std::string_view new_text, std::string& emit);

  // What on_token(token, num_generated, ...) will say from the token alone,
  // before its text is known: true when it finishes the request by rule 1 or
  // 3 (on_token then returns kStop or kLength, never kNone); false when only a
  // stop string in its text could (rule 2).
  bool ends_on_token(int32_t token, int32_t num_generated) const {
    return (num_generated >= min_tokens_ && is_end_token(token)) || num_generated >= max_tokens_;
  }

  // The stop string that finished the request, or empty.
  const std::string& matched_stop() const { return matched_stop_; }
  // The end token that finished the request, or -1.
  int32_t matched_token() const { return matched_token_; }
  // Text held back right now (for tests).
  const std::string& held() const { return held_; }

 private:
  bool is_end_token(int32_t token) const;
  size_t hold_length() const;

  std::vector<int32_t> end_ids_;
  std::vector<std::string> stops_;
  int32_t max_tokens_;
  int32_t min_tokens_;
  std::string held_;
  std::string matched_stop_;
  int32_t matched_token_ = -1;
};

}  // namespace nanoserve
