#include "server/structured_output.h"

#include <utility>
#include <vector>

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

structured::ConstraintCache& StructuredOutput::cache(const ModelCodec& codec) {
  std::call_once(once_, [&] {
    const ModelCodec* c = &codec;
    cache_ = std::make_unique<structured::ConstraintCache>([c] { return vocab_of(*c); });
  });
  return *cache_;
}

StructuredOutput::Result StructuredOutput::constraint_for(const GenerateRequest& r, const ModelCodec& codec) {
  const ResponseFormat& f = r.response_format;
  if (f.type == ResponseFormat::Type::kText) return std::shared_ptr<const TokenConstraintFactory>();
  if (r.params.ignore_eos)
    return bad_request("'ignore_eos' cannot be combined with '" + f.param +
                           "': the output must end when the value is complete.",
                       "ignore_eos");
  if (r.params.min_tokens > 0)
    return bad_request("'min_tokens' cannot be combined with '" + f.param +
                           "': once the value is complete only its end may follow.",
                       "min_tokens");
  if (f.type == ResponseFormat::Type::kJsonObject)
    return std::shared_ptr<const TokenConstraintFactory>(cache(codec).json_object());
  if (f.type == ResponseFormat::Type::kRegex || f.type == ResponseFormat::Type::kChoice) {
    auto factory =
        f.type == ResponseFormat::Type::kRegex ? cache(codec).regex(f.regex) : cache(codec).choice(f.choices);
    if (!factory.ok()) return bad_request("'" + f.param + "': " + factory.status().message() + ".", f.param);
    return std::move(*factory);
  }
  auto factory = cache(codec).json_schema(f.schema);
  if (!factory.ok()) {
    const std::string where = f.param == "response_format" ? "response_format.json_schema.schema" : f.param;
    return bad_request("'" + where + "': " + factory.status().message() + ".", f.param);
  }
  return std::shared_ptr<const TokenConstraintFactory>(std::move(*factory));
}

}  // namespace nanoserve::server
