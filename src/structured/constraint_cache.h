#pragma once
// Compiled constraints by their canonical text, shared by every request that
// asks for the same one: a schema sent again is not compiled again, and its
// mask cache is already warm. A bounded LRU; safe to call from any thread.
// The server, the offline API and the CLI each hold one per model.

#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "structured/grammar.h"
#include "structured/json_constraint.h"
#include "structured/token_vocab.h"
#include "tokenizer/tokenizer.h"

namespace nanoserve::structured {

class ConstraintCache {
 public:
  using Factory = std::shared_ptr<const JsonConstraintFactory>;

  // `vocab` may be null until first use: `make_vocab` builds it then (once).
  explicit ConstraintCache(std::function<std::shared_ptr<const TokenVocab>()> make_vocab,
                           size_t capacity = kDefaultCapacity)
      : make_vocab_(std::move(make_vocab)), capacity_(capacity) {}

  // Any JSON object.
  Factory json_object();
  // One value valid against `schema`; the error says which keyword was refused and where.
  // Keys in their order: the same schema with another property order is another constraint.
  StatusOr<Factory> json_schema(const nlohmann::ordered_json& schema);
  // Raw text that the whole pattern (structured/regex.h) matches: guided_regex.
  StatusOr<std::shared_ptr<const TokenConstraintFactory>> regex(const std::string& pattern);
  // Exactly one of `choices` (guided_choice). At least one, each non-empty.
  StatusOr<std::shared_ptr<const TokenConstraintFactory>> choice(const std::vector<std::string>& choices);
  // A grammar built by the caller, cached under `key` (its canonical description).
  StatusOr<Factory> get(const std::string& key, const std::function<StatusOr<Grammar>()>& build);

  std::shared_ptr<const TokenVocab> vocab();

  static constexpr size_t kDefaultCapacity = 32;

 private:
  std::function<std::shared_ptr<const TokenVocab>()> make_vocab_;
  size_t capacity_;
  std::once_flag vocab_once_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::mutex mu_;
  std::list<std::string> lru_;  // most recent first
  struct Entry {
    Factory factory;
    std::list<std::string>::iterator pos;
  };
  std::unordered_map<std::string, Entry> cache_;
  // Regular-language constraints by pattern; cleared when full (they are cheap to rebuild).
  std::unordered_map<std::string, std::shared_ptr<const TokenConstraintFactory>> regexes_;
};

// The vocabulary of a tokenizer: each token's bytes, its special flag, the end tokens.
std::shared_ptr<const TokenVocab> vocab_of(const Tokenizer& tokenizer);

}  // namespace nanoserve::structured
