#pragma once
// A per-request rule on which token may come next (structured output).
//
// The engine knows only this interface; the server fills it (a JSON-schema
// automaton, structured/). Each step, for a constrained request, the
// engine copies the logits row, lets the constraint set every forbidden token
// to -inf (apply), samples from that row as usual (greedy included: a
// constrained request is never plain greedy), and tells the constraint which
// token was taken (accept). The constraint keeps at least one token allowed
// in every state it can reach, so the sampler always has a finite logit.

#include <cstdint>
#include <memory>
#include <span>

namespace nanoserve {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // logits: [vocab] f32, one request's row; forbidden tokens become -inf.
  virtual void apply(std::span<float> logits) = 0;
  // Whether `token` is allowed in the current state (the one apply() saw).
  virtual bool allows(int32_t token) const = 0;
  // `token` was generated; the state advances past it.
  virtual void accept(int32_t token) = 0;
};

// Shared, immutable description (a compiled schema); start() gives each
// request its own state. Called from whichever thread admits the request.
class TokenConstraintFactory {
 public:
  virtual ~TokenConstraintFactory() = default;
  virtual std::unique_ptr<TokenConstraint> start() const = 0;
};

}  // namespace nanoserve
