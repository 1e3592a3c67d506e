#include "engine/stop_checker.h"

#include <algorithm>

namespace nanoserve {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone: return "";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "";
}

StopChecker::StopChecker(const SamplingParams& params, std::span<const int32_t> eos_ids)
    : stops_(params.stop), max_tokens_(params.max_tokens), min_tokens_(params.min_tokens) {
  if (!params.ignore_eos) end_ids_.assign(eos_ids.begin(), eos_ids.end());
  end_ids_.insert(end_ids_.end(), params.stop_token_ids.begin(), params.stop_token_ids.end());
}

bool StopChecker::is_end_token(int32_t token) const {
  return std::find(end_ids_.begin(), end_ids_.end(), token) != end_ids_.end();
}

size_t StopChecker::hold_length() const {
  // Longest proper prefix of any stop string that is a suffix of held_.
  size_t best = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, held_.size());
    for (size_t len = max_len; len > best; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        best = len;
        break;
      }
    }
  }
  return best;
}

FinishReason StopChecker::on_token(int32_t token, int32_t num_generated, std::string_view new_text,
                                   std::string& emit) {
  const bool stops_apply = num_generated >= min_tokens_;
  if (stops_apply && is_end_token(token)) {
    matched_token_ = token;
    emit += held_;
    held_.clear();
    return FinishReason::kStop;
  }
  // A match must end in the new text. Without min_tokens that is every match: held text that
  // held a whole stop string would have finished the request already.
  const size_t fresh_from = held_.size();
  held_ += new_text;
  if (stops_apply && !stops_.empty()) {
    // Earliest occurrence of any stop string; the longest on a tie.
    size_t cut = std::string::npos;
    for (const std::string& s : stops_) {
      const size_t pos = held_.find(s, fresh_from + 1 > s.size() ? fresh_from + 1 - s.size() : 0);
      if (pos == std::string::npos) continue;
      if (cut == std::string::npos || pos < cut || (pos == cut && s.size() > matched_stop_.size())) {
        cut = pos;
        matched_stop_ = s;
      }
    }
    if (cut != std::string::npos) {
      emit.append(held_, 0, cut);
      held_.clear();
      return FinishReason::kStop;
    }
  }
  if (num_generated >= max_tokens_) {
    emit += held_;
    held_.clear();
    return FinishReason::kLength;
  }
  const size_t keep = hold_length();
  emit.append(held_, 0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return FinishReason::kNone;
}

}  // namespace nanoserve
