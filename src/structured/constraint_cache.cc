#include "structured/constraint_cache.h"

#include <utility>
#include <vector>

#include "structured/regex_constraint.h"
#include "structured/schema_compiler.h"

namespace nanoserve::structured {

std::shared_ptr<const TokenVocab> ConstraintCache::vocab() {
  std::call_once(vocab_once_, [&] { vocab_ = make_vocab_(); });
  return vocab_;
}

StatusOr<ConstraintCache::Factory> ConstraintCache::get(const std::string& key,
                                                        const std::function<StatusOr<Grammar>()>& build) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = cache_.find(key); it != cache_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.pos);
      return it->second.factory;
    }
  }
  // Compiled outside the lock: two threads may compile the same key; the first one in wins.
  StatusOr<Grammar> grammar = build();
  if (!grammar.ok()) return grammar.status();
  auto factory = std::make_shared<JsonConstraintFactory>(std::move(*grammar), vocab());
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second.factory;
  if (cache_.size() >= capacity_) {
    cache_.erase(lru_.back());
    lru_.pop_back();
  }
  lru_.push_front(key);
  cache_.emplace(key, Entry{factory, lru_.begin()});
  return Factory(factory);
}

ConstraintCache::Factory ConstraintCache::json_object() {
  auto f = get("json_object", [] { return StatusOr<Grammar>(json_object_grammar()); });
  return *f;  // the object grammar always compiles
}

StatusOr<ConstraintCache::Factory> ConstraintCache::json_schema(const nlohmann::ordered_json& schema) {
  return get("json_schema\n" + schema.dump(), [&] { return compile_schema(schema); });
}

StatusOr<std::shared_ptr<const TokenConstraintFactory>> ConstraintCache::regex(const std::string& pattern) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = regexes_.find(pattern); it != regexes_.end()) return it->second;
  }
  NS_ASSIGN_OR_RETURN(std::shared_ptr<const ByteDfa> dfa, compile_regex(pattern, RegexOptions{}));
  auto factory = std::make_shared<RegexConstraintFactory>(std::move(dfa), vocab());
  std::lock_guard<std::mutex> lock(mu_);
  if (regexes_.size() >= capacity_) regexes_.clear();
  return regexes_.emplace(pattern, std::move(factory)).first->second;
}

StatusOr<std::shared_ptr<const TokenConstraintFactory>> ConstraintCache::choice(
    const std::vector<std::string>& choices) {
  if (choices.empty()) return invalid_argument("at least one choice is required");
  std::string pattern;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (choices[i].empty()) return invalid_argument("choice " + std::to_string(i) + " is empty");
    if (i > 0) pattern.push_back('|');
    pattern.append("(?:");
    pattern.append(regex_escape(choices[i]));
    pattern.push_back(')');
  }
  return regex(pattern);
}

std::shared_ptr<const TokenVocab> vocab_of(const Tokenizer& tokenizer) {
  const int32_t n = tokenizer.n_vocab();
  std::vector<std::string> pieces(n);
  std::vector<bool> special(n);
  for (int32_t id = 0; id < n; ++id) {
    pieces[id] = tokenizer.token_to_piece(id);
    special[id] = tokenizer.is_special(id);
  }
  return std::make_shared<TokenVocab>(std::move(pieces), special, tokenizer.eos_ids());
}

}  // namespace nanoserve::structured
