#include "structured/tool_call_constraint.h"

#include <algorithm>
#include <limits>

#include "core/check.h"

namespace nanoserve::structured {

std::unique_ptr<TokenConstraint> ToolCallConstraintFactory::start() const {
  return std::make_unique<ToolCallConstraint>(*this);
}

ToolCallConstraint::ToolCallConstraint(const ToolCallConstraintFactory& f)
    : f_(f), vocab_(f.json().vocab()), state_(&f.json().grammar()) {
  if (f_.framing().automatic) {
    phase_ = Phase::kFree;
  } else if (!f_.framing().open.empty()) {
    start_forced(&f_.framing().open, 0, Phase::kJson);
  } else {
    enter_json();
  }
}

void ToolCallConstraint::start_forced(const std::vector<int32_t>* tokens, size_t from, Phase then) {
  if (from >= tokens->size()) {
    if (then == Phase::kJson) return enter_json();
    phase_ = then;
    return;
  }
  phase_ = Phase::kForced;
  tokens_ = tokens;
  pos_ = from;
  forced_then_ = then;
}

void ToolCallConstraint::enter_json() {
  phase_ = Phase::kJson;
  state_ = JsonState(&f_.json().grammar());
}

// The JSON value is complete and the next token is not part of it.
void ToolCallConstraint::after_json() {
  const CallFraming& fr = f_.framing();
  const Phase after_close =
      fr.automatic ? (fr.repeat ? Phase::kFree : Phase::kEnd) : (fr.repeat ? Phase::kBetween : Phase::kEnd);
  if (!fr.close.empty()) return start_forced(&fr.close, 0, after_close);
  phase_ = after_close;
}

void ToolCallConstraint::compute_mask() {
  const int32_t n = vocab_.size();
  const size_t words = (static_cast<size_t>(n) + 63) / 64;
  free_ = false;
  const CallFraming& fr = f_.framing();
  auto only_end = [&] {
    mask_.assign(words, 0);
    for (int32_t id : vocab_.eos_ids()) mask_set(mask_, id);
  };
  switch (phase_) {
    case Phase::kFree: free_ = true; break;
    case Phase::kForced:
      mask_.assign(words, 0);
      mask_set(mask_, (*tokens_)[pos_]);
      break;
    case Phase::kEnd: only_end(); break;
    case Phase::kBetween:
      only_end();
      if (!fr.next.empty()) mask_set(mask_, fr.next[0]);
      break;
    case Phase::kJson:
      if (state_.dead()) {  // cannot happen for tokens taken from the mask; end rather than loop
        only_end();
        break;
      }
      mask_ = *f_.json().mask(state_, key_, scratch_);
      for (int32_t id : vocab_.eos_ids()) mask_[id >> 6] &= ~(uint64_t{1} << (id & 63));
      if (state_.can_finish()) {
        if (!fr.close.empty()) {
          mask_set(mask_, fr.close[0]);
        } else if (fr.automatic && fr.repeat) {
          free_ = true;  // free text may follow the call
        } else {
          for (int32_t id : vocab_.eos_ids()) mask_set(mask_, id);
          if (fr.repeat && !fr.next.empty()) mask_set(mask_, fr.next[0]);
        }
      }
      break;
  }
  mask_valid_ = true;
}

void ToolCallConstraint::apply(std::span<float> logits) {
  NS_CHECK_EQ(static_cast<int64_t>(logits.size()), vocab_.size());
  compute_mask();
  if (free_) return;
  mask_logits(mask_, logits);
}

bool ToolCallConstraint::allows(int32_t token) const {
  if (token < 0 || token >= vocab_.size() || !mask_valid_) return false;
  return free_ || mask_has(mask_, token);
}

void ToolCallConstraint::accept(int32_t token) {
  mask_valid_ = false;
  if (token < 0 || token >= vocab_.size()) return;
  const CallFraming& fr = f_.framing();
  switch (phase_) {
    case Phase::kFree: {
      if (vocab_.is_eos(token)) return;
      const size_t before = tail_.size();
      tail_ += vocab_.piece(token);
      size_t from = std::string::npos;  // where the call's JSON starts in tail_
      if (!fr.trigger.empty()) {
        // The trigger must end within this token's bytes.
        const size_t search = before >= fr.trigger.size() ? before - fr.trigger.size() + 1 : 0;
        const size_t at = tail_.find(fr.trigger, search);
        if (at != std::string::npos) from = at + fr.trigger.size();
      }
      const size_t first_text = tail_.find_first_not_of(" \t\r\n", before);
      if (from == std::string::npos && fr.brace_opens && !any_text_ && first_text != std::string::npos &&
          tail_[first_text] == '{')
        from = first_text;
      if (first_text != std::string::npos) any_text_ = true;
      if (from != std::string::npos) {
        // Bytes of this token past the trigger belong to the call; if they cannot, it stays free.
        JsonState s(&f_.json().grammar());
        if (s.feed(std::string_view(tail_).substr(from))) {
          phase_ = Phase::kJson;
          state_ = std::move(s);
          tail_.clear();
          return;
        }
      }
      if (tail_.size() > 256) tail_.erase(0, tail_.size() - 64);
      return;
    }
    case Phase::kForced:
      if (token != (*tokens_)[pos_]) {  // only a draw outside the mask gets here; the engine prevents it
        phase_ = Phase::kEnd;
        return;
      }
      start_forced(tokens_, pos_ + 1, forced_then_);
      return;
    case Phase::kJson: {
      if (vocab_.is_text(token) && !vocab_.is_eos(token)) {
        JsonState next = state_;
        if (next.feed(vocab_.piece(token))) {
          state_ = std::move(next);
          return;
        }
      }
      if (!state_.can_finish()) {
        phase_ = Phase::kEnd;
        return;
      }
      after_json();
      // The token that ended the JSON is the first of what follows it.
      if (phase_ != Phase::kEnd) accept(token);
      return;
    }
    case Phase::kBetween:
      if (!fr.next.empty() && token == fr.next[0])
        start_forced(&fr.next, 1, Phase::kJson);
      else
        phase_ = Phase::kEnd;
      return;
    case Phase::kEnd: return;
  }
}

}  // namespace nanoserve::structured
