#include "server/structured/structured_output.h"

#include <utility>

#include "server/structured/json_constraint.h"
#include "server/structured/schema_compiler.h"

namespace nanoserve::server {

std::shared_ptr<const structured::TokenVocab> vocab_of(const ModelCodec& codec) {
  const int32_t n = static_cast<int32_t>(codec.vocab_size());
  std::vector<std::string> pieces(n);
  std::vector<bool> special(n);
  for (int32_t id = 0; id < n; ++id) {
    pieces[id] = codec.token_text(id);
    special[id] = codec.is_special(id);
  }
  return std::make_shared<structured::TokenVocab>(std::move(pieces), special, codec.eos_ids());
}

StructuredOutput::Result StructuredOutput::constraint_for(const GenerateRequest& r, const ModelCodec& codec) {
  const ResponseFormat& f = r.response_format;
  if (f.type == ResponseFormat::Type::kText) return std::shared_ptr<const TokenConstraintFactory>();
  if (r.params.ignore_eos)
    return bad_request(
        "'ignore_eos' cannot be combined with 'response_format': the output must end when the "
        "value is complete.",
        "ignore_eos");
  if (r.params.min_tokens > 0)
    return bad_request(
        "'min_tokens' cannot be combined with 'response_format': once the value is complete only "
        "its end may follow.",
        "min_tokens");
  std::string key = f.type == ResponseFormat::Type::kJsonObject ? std::string("json_object")
                                                                : "json_schema\n" + f.schema.dump();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = cache_.find(key); it != cache_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.pos);
      return it->second.factory;
    }
  }
  structured::Grammar grammar;
  if (f.type == ResponseFormat::Type::kJsonObject) {
    grammar = structured::json_object_grammar();
  } else {
    StatusOr<structured::Grammar> g = structured::compile_schema(f.schema);
    if (!g.ok())
      return bad_request("'response_format.json_schema.schema': " + g.status().message() + ".",
                         "response_format");
    grammar = std::move(*g);
  }
  std::call_once(vocab_once_, [&] { vocab_ = vocab_of(codec); });
  auto factory = std::make_shared<structured::JsonConstraintFactory>(std::move(grammar), vocab_);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second.factory;  // compiled meanwhile
  if (cache_.size() >= kMaxCachedSchemas) {
    cache_.erase(lru_.back());
    lru_.pop_back();
  }
  lru_.push_front(key);
  cache_.emplace(std::move(key), Entry{factory, lru_.begin()});
  return std::shared_ptr<const TokenConstraintFactory>(factory);
}

}  // namespace nanoserve::server
