#include "tokenizer/hf_pipeline.h"

namespace nanoserve {

using nlohmann::json;

StatusOr<std::shared_ptr<const HfPipeline>> HfPipeline::parse(const json& j) {
  auto p = std::make_shared<HfPipeline>();
  auto part = [&](const char* key) -> const json& {
    static const json kNull;
    auto it = j.find(key);
    return it == j.end() ? kNull : *it;
  };
  NS_ASSIGN_OR_RETURN(p->normalizer_, hf::parse_normalizer(part("normalizer"), "normalizer"));
  NS_ASSIGN_OR_RETURN(p->pre_tokenizer_, hf::parse_pre_tokenizer(part("pre_tokenizer"), "pre_tokenizer"));
  NS_ASSIGN_OR_RETURN(p->decoder_, hf::parse_decoder(part("decoder"), "decoder"));
  return std::shared_ptr<const HfPipeline>(std::move(p));
}

void HfPipeline::split(std::string_view run, bool at_start, std::vector<hf::Piece>& out) const {
  if (run.empty()) return;
  std::string text(run);
  size_t zero = at_start ? std::max<size_t>(utf8::sequence_length(text, 0), 1) : 0;
  if (normalizer_) normalizer_->normalize(text, zero);
  if (text.empty()) return;
  std::vector<hf::Piece> pieces;
  pieces.push_back({std::move(text), zero});
  if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(pieces);
  for (hf::Piece& p : pieces) {
    if (!p.text.empty()) out.push_back(std::move(p));
  }
}

std::string HfPipeline::decode(std::vector<std::string> tokens, bool stream) const {
  if (decoder_ == nullptr) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0 && !stream) out.push_back(' ');
      out += tokens[i];
    }
    return out;
  }
  decoder_->decode(tokens, stream);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace nanoserve
