#include "structured/regex_constraint.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "core/check.h"

namespace nanoserve::structured {

void compute_regex_mask(const TokenVocab& vocab, const ByteDfa& dfa, int32_t state,
                        std::vector<int32_t>& scratch, TokenMask& out) {
  out.assign((static_cast<size_t>(vocab.size()) + 63) / 64, 0);
  scratch.resize(static_cast<size_t>(vocab.max_piece_length()) + 1);
  scratch[0] = state;
  const std::span<const TokenVocab::TrieNode> nodes = vocab.trie();
  const std::span<const int32_t> tokens = vocab.trie_tokens();
  const auto n = static_cast<int32_t>(nodes.size());
  for (int32_t i = 0; i < n;) {
    const TokenVocab::TrieNode& node = nodes[i];
    const int32_t next = dfa.next(scratch[node.depth - 1], node.byte);
    if (next == ByteDfa::kDead) {
      i = node.end;  // no token under this prefix can be taken
      continue;
    }
    scratch[node.depth] = next;
    for (int32_t t = node.tok_begin; t < node.tok_end; ++t) mask_set(out, tokens[t]);
    ++i;
  }
  if (dfa.accepting(state)) {
    for (int32_t id : vocab.eos_ids()) mask_set(out, id);
  }
}

RegexConstraintFactory::RegexConstraintFactory(std::shared_ptr<const ByteDfa> dfa,
                                               std::shared_ptr<const TokenVocab> vocab)
    : dfa_(std::move(dfa)), vocab_(std::move(vocab)), masks_(dfa_->num_states()) {
  NS_CHECK(vocab_ != nullptr) << "a constraint without a vocabulary";
}

std::unique_ptr<TokenConstraint> RegexConstraintFactory::start() const {
  return std::make_unique<RegexConstraint>(shared_from_this());
}

std::shared_ptr<const TokenMask> RegexConstraintFactory::mask(int32_t state,
                                                              std::vector<int32_t>& scratch) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (masks_[state] != nullptr) return masks_[state];
  }
  auto m = std::make_shared<TokenMask>();
  compute_regex_mask(*vocab_, *dfa_, state, scratch, *m);
  std::lock_guard<std::mutex> lock(mu_);
  if (masks_[state] == nullptr) masks_[state] = m;
  return masks_[state];
}

RegexConstraint::RegexConstraint(std::shared_ptr<const RegexConstraintFactory> factory)
    : factory_(std::move(factory)), state_(factory_->dfa().start()) {}

void RegexConstraint::apply(std::span<float> logits) {
  const TokenVocab& vocab = factory_->vocab();
  NS_CHECK_EQ(static_cast<int64_t>(logits.size()), vocab.size());
  if (ended_ || state_ == ByteDfa::kDead) {
    // Nothing may follow: only an end token (the engine stops on it).
    auto m = std::make_shared<TokenMask>((static_cast<size_t>(vocab.size()) + 63) / 64, 0);
    for (int32_t id : vocab.eos_ids()) mask_set(*m, id);
    mask_ = std::move(m);
  } else {
    mask_ = factory_->mask(state_, scratch_);
  }
  const TokenMask& m = *mask_;
  mask_logits(m, logits);
}

bool RegexConstraint::allows(int32_t token) const {
  return mask_ != nullptr && token >= 0 && token < factory_->vocab().size() && mask_has(*mask_, token);
}

void RegexConstraint::accept(int32_t token) {
  mask_.reset();
  const TokenVocab& vocab = factory_->vocab();
  if (ended_) return;
  if (token < 0 || token >= vocab.size() || vocab.is_eos(token) || !vocab.is_text(token)) {
    ended_ = true;
    return;
  }
  for (char c : vocab.piece(token)) {
    if (state_ == ByteDfa::kDead) break;
    state_ = factory_->dfa().next(state_, static_cast<uint8_t>(c));
  }
}

}  // namespace nanoserve::structured
