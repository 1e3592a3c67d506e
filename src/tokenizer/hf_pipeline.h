#pragma once
// A tokenizer.json read as the pipeline it describes: normalizer, then
// pre-tokenizer, then (in Tokenizer) the BPE model on each piece; decoding by
// the decoder chain. Built by vocab_from_hf_json when the file is not one of
// the pipelines with a fast path of their own (hf_tokenizer.h).

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/hf_components.h"

namespace nanoserve {

class HfPipeline {
 public:
  // Reads the "normalizer", "pre_tokenizer" and "decoder" of a tokenizer.json
  // (absent and null are the same); errors name the path.
  static StatusOr<std::shared_ptr<const HfPipeline>> parse(const nlohmann::json& tokenizer);

  // Normalizes one run of text between added tokens (PRECOND: valid UTF-8)
  // and appends its pieces to `out`. `at_start`: the run begins the input.
  void split(std::string_view run, bool at_start, std::vector<hf::Piece>& out) const;
  // The text of `tokens` (vocab strings) after the decoder chain; without a
  // decoder they are joined by spaces. `stream`: see DecoderStep.
  std::string decode(std::vector<std::string> tokens, bool stream) const;

  bool has_normalizer() const { return normalizer_ != nullptr; }

 private:
  std::unique_ptr<hf::NormalizerStep> normalizer_;
  std::unique_ptr<hf::PreTokenizerStep> pre_tokenizer_;
  std::unique_ptr<hf::DecoderStep> decoder_;
};

}  // namespace nanoserve
