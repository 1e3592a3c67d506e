#pragma once
// The token constraint of tool calls: the call's JSON under the tools' schemas
// (a JsonConstraintFactory over tool_call_grammar), framed by the family's
// markup, forced token by token (docs/structured_output.md, "Tool calls").
//
//   forced (tool_choice required / a named function):
//     open  JSON  close  [next  JSON  close ...]  end
//   automatic (tool_choice auto): free text until the model writes the call's
//     opening marker (or, `brace_opens`, a '{' as its first non-blank byte);
//     from there the call is constrained as above, then free text again.
//
// The JSON part allows exactly what the automaton allows, less the end
// tokens; once the value is complete the first token of what follows is
// allowed too (close, or next / an end token when there is no close).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/token_constraint.h"
#include "structured/json_automaton.h"
#include "structured/json_constraint.h"

namespace nanoserve::structured {

struct CallFraming {
  std::vector<int32_t> open;   // tokens forced before each call's JSON (forced mode)
  std::vector<int32_t> close;  // tokens forced after it
  std::vector<int32_t> next;   // tokens forced before another call (with `repeat`)
  bool repeat = false;         // another call may follow (parallel_tool_calls)
  bool automatic = false;      // tool_choice auto: free text until the call opens
  std::string trigger;         // automatic: the bytes that open a call
  bool brace_opens = false;    // automatic: a '{' as the output's first non-blank byte opens one
};

class ToolCallConstraintFactory final : public TokenConstraintFactory {
 public:
  ToolCallConstraintFactory(std::shared_ptr<const JsonConstraintFactory> json, CallFraming framing)
      : json_(std::move(json)), framing_(std::move(framing)) {}
  std::unique_ptr<TokenConstraint> start() const override;

  const JsonConstraintFactory& json() const { return *json_; }
  const CallFraming& framing() const { return framing_; }

 private:
  std::shared_ptr<const JsonConstraintFactory> json_;
  CallFraming framing_;
};

class ToolCallConstraint final : public TokenConstraint {
 public:
  explicit ToolCallConstraint(const ToolCallConstraintFactory& factory);

  void apply(std::span<float> logits) override;
  bool allows(int32_t token) const override;
  void accept(int32_t token) override;

  enum class Phase { kFree, kForced, kJson, kBetween, kEnd };
  Phase phase() const { return phase_; }

 private:
  void after_json();
  void start_forced(const std::vector<int32_t>* tokens, size_t from, Phase then);
  void enter_json();
  void compute_mask();

  const ToolCallConstraintFactory& f_;
  const TokenVocab& vocab_;
  Phase phase_ = Phase::kFree;
  // kForced: tokens_[pos_..] still to come, then forced_then_.
  const std::vector<int32_t>* tokens_ = nullptr;
  size_t pos_ = 0;
  Phase forced_then_ = Phase::kJson;
  JsonState state_;
  std::string tail_;       // kFree: the last bytes generated (trigger search)
  bool any_text_ = false;  // kFree: a non-blank byte was generated
  TokenMask mask_;         // of the current state, once apply() ran
  bool mask_valid_ = false;
  bool free_ = false;  // the mask allows everything
  std::string key_;
  std::vector<JsonState> scratch_;
};

}  // namespace nanoserve::structured
