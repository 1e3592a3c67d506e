#include "structured/json_constraint.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "core/check.h"

namespace nanoserve::structured {

void compute_mask(const TokenVocab& vocab, const JsonState& state, std::vector<JsonState>& scratch,
                  TokenMask& out) {
  out.assign((static_cast<size_t>(vocab.size()) + 63) / 64, 0);
  const size_t levels = static_cast<size_t>(vocab.max_piece_length()) + 1;
  while (scratch.size() < levels) scratch.emplace_back(&state.grammar());
  scratch[0] = state;
  const std::span<const TokenVocab::TrieNode> nodes = vocab.trie();
  const std::span<const int32_t> tokens = vocab.trie_tokens();
  const int32_t n = static_cast<int32_t>(nodes.size());
  for (int32_t i = 0; i < n;) {
    const TokenVocab::TrieNode& node = nodes[i];
    if (!JsonState::step(scratch[node.depth - 1], node.byte, scratch[node.depth])) {
      i = node.end;  // no token under this prefix can be taken
      continue;
    }
    for (int32_t t = node.tok_begin; t < node.tok_end; ++t) mask_set(out, tokens[t]);
    ++i;
  }
  if (state.can_finish()) {
    for (int32_t id : vocab.eos_ids()) mask_set(out, id);
  }
}

void compute_mask_brute(const TokenVocab& vocab, const JsonState& state, TokenMask& out) {
  out.assign((static_cast<size_t>(vocab.size()) + 63) / 64, 0);
  for (int32_t id = 0; id < vocab.size(); ++id) {
    if (vocab.is_eos(id)) {
      if (state.can_finish()) mask_set(out, id);
      continue;
    }
    if (!vocab.is_text(id)) continue;
    JsonState s = state;
    if (s.feed(vocab.piece(id))) mask_set(out, id);
  }
}

JsonConstraintFactory::JsonConstraintFactory(Grammar grammar, std::shared_ptr<const TokenVocab> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)) {
  NS_CHECK(vocab_ != nullptr) << "a constraint without a vocabulary";
}

std::unique_ptr<TokenConstraint> JsonConstraintFactory::start() const {
  return std::make_unique<JsonConstraint>(shared_from_this());
}

std::shared_ptr<const TokenMask> JsonConstraintFactory::mask(const JsonState& state, std::string& key,
                                                             std::vector<JsonState>& scratch) const {
  state.key(key);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = masks_.find(key);
    if (it != masks_.end()) {
      hits_.fetch_add(1, std::memory_order_relaxed);
      return it->second;
    }
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  auto m = std::make_shared<TokenMask>();
  compute_mask(*vocab_, state, scratch, *m);
  std::lock_guard<std::mutex> lock(mu_);
  if (masks_.size() >= kMaxCachedMasks) masks_.clear();  // bounded: start over rather than grow
  masks_.emplace(key, m);
  return m;
}

JsonConstraint::JsonConstraint(std::shared_ptr<const JsonConstraintFactory> factory)
    : factory_(std::move(factory)), state_(&factory_->grammar()), next_(&factory_->grammar()) {}

void JsonConstraint::apply(std::span<float> logits) {
  const TokenVocab& vocab = factory_->vocab();
  NS_CHECK_EQ(static_cast<int64_t>(logits.size()), vocab.size());
  if (ended_ || state_.dead()) {
    // Nothing may follow: only an end token (the engine stops on it).
    auto m = std::make_shared<TokenMask>((static_cast<size_t>(vocab.size()) + 63) / 64, 0);
    for (int32_t id : vocab.eos_ids()) mask_set(*m, id);
    mask_ = std::move(m);
  } else {
    mask_ = factory_->mask(state_, key_, scratch_);
  }
  const TokenMask& m = *mask_;
  mask_logits(m, logits);
}

bool JsonConstraint::allows(int32_t token) const {
  return mask_ != nullptr && token >= 0 && token < factory_->vocab().size() && mask_has(*mask_, token);
}

void JsonConstraint::accept(int32_t token) {
  mask_.reset();
  const TokenVocab& vocab = factory_->vocab();
  if (ended_) return;
  if (token < 0 || token >= vocab.size() || vocab.is_eos(token) || !vocab.is_text(token)) {
    ended_ = true;
    return;
  }
  state_.feed(vocab.piece(token));  // a refused token leaves the state dead: only an end may follow
}

}  // namespace nanoserve::structured
