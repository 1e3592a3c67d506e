#pragma once
// The engine's TokenConstraint for a regular language over the whole output
// (vLLM's guided_regex and guided_choice): a ByteDfa (regex.h) walked over the
// vocabulary trie, one cached mask per DFA state. The output is raw text, not
// JSON; the end tokens are allowed exactly where the DFA accepts.

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/token_constraint.h"
#include "structured/regex.h"
#include "structured/token_vocab.h"

namespace nanoserve::structured {

// The mask of DFA state `state` by the trie walk. `scratch` holds one state per trie depth.
void compute_regex_mask(const TokenVocab& vocab, const ByteDfa& dfa, int32_t state,
                        std::vector<int32_t>& scratch, TokenMask& out);

class RegexConstraintFactory final : public TokenConstraintFactory,
                                     public std::enable_shared_from_this<RegexConstraintFactory> {
 public:
  RegexConstraintFactory(std::shared_ptr<const ByteDfa> dfa, std::shared_ptr<const TokenVocab> vocab);

  std::unique_ptr<TokenConstraint> start() const override;

  const ByteDfa& dfa() const { return *dfa_; }
  const TokenVocab& vocab() const { return *vocab_; }
  // The mask of `state`, computed once and shared by every request of this pattern.
  std::shared_ptr<const TokenMask> mask(int32_t state, std::vector<int32_t>& scratch) const;

 private:
  std::shared_ptr<const ByteDfa> dfa_;
  std::shared_ptr<const TokenVocab> vocab_;
  mutable std::mutex mu_;
  mutable std::vector<std::shared_ptr<const TokenMask>> masks_;  // [dfa states], filled on first use
};

class RegexConstraint final : public TokenConstraint {
 public:
  explicit RegexConstraint(std::shared_ptr<const RegexConstraintFactory> factory);

  void apply(std::span<float> logits) override;
  bool allows(int32_t token) const override;
  void accept(int32_t token) override;

  int32_t state() const { return state_; }

 private:
  std::shared_ptr<const RegexConstraintFactory> factory_;
  int32_t state_;
  bool ended_ = false;
  std::shared_ptr<const TokenMask> mask_;
  std::vector<int32_t> scratch_;
};

}  // namespace nanoserve::structured
