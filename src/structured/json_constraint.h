#pragma once
// The engine's TokenConstraint for structured output: a compiled schema, the
// vocabulary trie, and a bounded cache of masks by automaton state.
//
// A mask is computed by walking the trie with the automaton (token_vocab.h);
// masks are cached per compiled schema by the state's bytes, so a state that
// recurs (inside a string, after a comma, ...) costs one lookup. The cache is
// shared by every request with the same schema.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "engine/token_constraint.h"
#include "structured/grammar.h"
#include "structured/json_automaton.h"
#include "structured/token_vocab.h"

namespace nanoserve::structured {

// The mask of `state` by the trie walk. `scratch` holds one state per trie depth.
void compute_mask(const TokenVocab& vocab, const JsonState& state, std::vector<JsonState>& scratch,
                  TokenMask& out);
// The same by feeding every token's bytes on its own: the oracle for tests.
void compute_mask_brute(const TokenVocab& vocab, const JsonState& state, TokenMask& out);

class JsonConstraintFactory final : public TokenConstraintFactory,
                                    public std::enable_shared_from_this<JsonConstraintFactory> {
 public:
  JsonConstraintFactory(Grammar grammar, std::shared_ptr<const TokenVocab> vocab);

  std::unique_ptr<TokenConstraint> start() const override;

  const Grammar& grammar() const { return grammar_; }
  const TokenVocab& vocab() const { return *vocab_; }
  // The mask of `state`, from the cache or computed (and cached).
  std::shared_ptr<const TokenMask> mask(const JsonState& state, std::string& key,
                                        std::vector<JsonState>& scratch) const;

  int64_t mask_hits() const { return hits_.load(); }
  int64_t mask_misses() const { return misses_.load(); }

  static constexpr size_t kMaxCachedMasks = 1024;  // 6 KiB each for a 49,152-token vocabulary

 private:
  Grammar grammar_;
  std::shared_ptr<const TokenVocab> vocab_;
  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, std::shared_ptr<const TokenMask>> masks_;
  mutable std::atomic<int64_t> hits_{0}, misses_{0};
};

class JsonConstraint final : public TokenConstraint {
 public:
  explicit JsonConstraint(std::shared_ptr<const JsonConstraintFactory> factory);

  void apply(std::span<float> logits) override;
  bool allows(int32_t token) const override;
  void accept(int32_t token) override;

  const JsonState& state() const { return state_; }
  // An end token was accepted: nothing more may come.
  bool ended() const { return ended_; }

 private:
  std::shared_ptr<const JsonConstraintFactory> factory_;
  JsonState state_;
  JsonState next_;
  bool ended_ = false;
  std::shared_ptr<const TokenMask> mask_;  // of state_, once apply() ran
  std::string key_;
  std::vector<JsonState> scratch_;
};

}  // namespace nanoserve::structured
