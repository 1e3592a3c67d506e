#pragma once
// Structured output for the API: turns a request's response_format into the
// engine's TokenConstraintFactory. Compiled schemas are cached by their
// canonical text (a bounded LRU), so a schema sent again is not compiled
// again and its masks are already warm. The vocabulary trie is built from the
// codec on first use. Safe to call from every HTTP thread.

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <variant>

#include "engine/token_constraint.h"
#include "server/api_error.h"
#include "server/model_codec.h"
#include "server/protocol.h"
#include "server/structured/token_vocab.h"

namespace nanoserve::server {

class StructuredOutput {
 public:
  using Result = std::variant<std::shared_ptr<const TokenConstraintFactory>, ApiError>;

  // Null for free text; a 400 naming response_format (and the schema keyword) when refused.
  Result constraint_for(const GenerateRequest& request, const ModelCodec& codec);

  static constexpr size_t kMaxCachedSchemas = 32;

 private:
  std::once_flag vocab_once_;
  std::shared_ptr<const structured::TokenVocab> vocab_;
  std::mutex mu_;
  std::list<std::string> lru_;  // most recent first
  struct Entry {
    std::shared_ptr<const TokenConstraintFactory> factory;
    std::list<std::string>::iterator pos;
  };
  std::unordered_map<std::string, Entry> cache_;
};

// The vocabulary of a codec: each token's bytes, its special flag, the end tokens.
std::shared_ptr<const structured::TokenVocab> vocab_of(const ModelCodec& codec);

}  // namespace nanoserve::server
