#pragma once
// Structured output for the API: turns a request's response_format into the
// engine's TokenConstraintFactory, through the model's ConstraintCache
// (structured/constraint_cache.h). The vocabulary trie is built from the
// codec on first use. Safe to call from every HTTP thread.

#include <memory>
#include <mutex>
#include <string>
#include <variant>

#include "engine/token_constraint.h"
#include "server/api_error.h"
#include "server/model_codec.h"
#include "server/protocol.h"
#include "structured/constraint_cache.h"

namespace nanoserve::server {

class StructuredOutput {
 public:
  using Result = std::variant<std::shared_ptr<const TokenConstraintFactory>, ApiError>;

  // Null for free text; a 400 naming response_format (and the schema keyword) when refused.
  Result constraint_for(const GenerateRequest& request, const ModelCodec& codec);

  // The cache itself, once a codec has been seen (tool calls build their own grammars in it).
  structured::ConstraintCache& cache(const ModelCodec& codec);

  static constexpr size_t kMaxCachedSchemas = structured::ConstraintCache::kDefaultCapacity;

 private:
  std::once_flag once_;
  std::unique_ptr<structured::ConstraintCache> cache_;
};

// The vocabulary of a codec: each token's bytes, its special flag, the end tokens.
std::shared_ptr<const structured::TokenVocab> vocab_of(const ModelCodec& codec);

}  // namespace nanoserve::server
