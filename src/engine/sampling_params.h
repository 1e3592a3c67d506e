#pragma once
// What a request asks of the sampler and of the stop checker. Field meanings
// follow the OpenAI / vLLM definitions so the server maps JSON one to one.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/token_constraint.h"

namespace nanoserve {

struct SamplingParams {
  // 0 means greedy: argmax after penalties, ties to the lowest token id.
  float temperature = 1.0f;
  int32_t top_k = -1;  // keep the k most likely tokens; -1 (or 0) = off
  float top_p = 1.0f;  // keep the smallest prefix whose mass reaches top_p; 1 = off
  float min_p = 0.0f;  // drop tokens with prob < min_p * max prob; 0 = off

  // vLLM definitions. repetition: over prompt + generated tokens, a logit l
  // becomes l / r if l > 0 else l * r. presence / frequency: over generated
  // tokens only, l -= presence * [count > 0] + frequency * count.
  float repetition_penalty = 1.0f;  // 1 = off, must be > 0
  float presence_penalty = 0.0f;    // in [-2, 2]
  float frequency_penalty = 0.0f;   // in [-2, 2]

  // The request's own RNG seed. Without one the engine picks a seed at
  // admission, so output is still a function of (logits, seed) only.
  std::optional<uint64_t> seed;

  // Generated tokens, >= 0. 0 generates nothing: the request ends (kLength)
  // once its prompt is computed, for scoring a prompt (prompt_logprobs).
  int32_t max_tokens = 16;
  std::vector<std::string> stop;        // stop strings, matched on detokenized text, not emitted
  std::vector<int32_t> stop_token_ids;  // extra end tokens besides the model's eos ids
  bool ignore_eos = false;              // keep going past eos (benchmarks)
  // vLLM's min_tokens: until this many tokens are generated, the end tokens
  // (eos unless ignore_eos, and stop_token_ids) are masked out of sampling
  // and stop strings are not applied. In [0, max_tokens].
  int32_t min_tokens = 0;

  // OpenAI's logit_bias: (token id, bias) pairs added to the raw logits before
  // the penalties. Ids unique and in the vocabulary, biases in [-100, 100].
  std::vector<std::pair<int32_t, float>> logit_bias;

  // Log-probabilities of the model's own (unprocessed) distribution, as vLLM
  // returns by default: the chosen token's, plus the top_logprobs most likely.
  bool logprobs = false;
  int32_t top_logprobs = 0;  // 0..kMaxTopLogprobs, needs logprobs

  // vLLM's prompt_logprobs: -1 off; k in [0, kMaxTopLogprobs]: the logprob of
  // every prompt token after the first (under the raw distribution at the
  // position before it), plus the k most likely there. The request needs the
  // logits of every prompt row, so it skips the prefix cache (docs/engine.md).
  int32_t prompt_logprobs = -1;

  int32_t n = 1;  // completions per prompt; the server fans out n requests

  // The text leaves special tokens out (as OpenAI servers do); false keeps their text, for
  // tool-call markers that are special tokens ([TOOL_CALLS], <|python_tag|>). End tokens never show.
  bool skip_special_tokens = true;

  // Structured output: which tokens may come next (each request starts its own state). Null: any.
  std::shared_ptr<const TokenConstraintFactory> constraint;

  static constexpr int32_t kMaxTopLogprobs = 20;
  static constexpr int32_t kMaxStops = 16;
  static constexpr int32_t kMaxStopLength = 256;
  static constexpr int32_t kMaxN = 16;
  static constexpr int32_t kMaxLogitBias = 300;
  static constexpr float kMaxBias = 100.0f;

  // Below this a temperature is greedy (vLLM's rule): logit / T would overflow
  // f32 for the smallest temperatures, and the draw is the argmax well before.
  static constexpr float kGreedyBelow = 1e-5f;
  bool greedy() const { return temperature < kGreedyBelow; }
  // Greedy over the raw logits: no penalty, bias or mask changes them and no
  // logprobs are read, so the argmax may come from wherever the logits are (the device).
  bool plain_greedy() const {
    return greedy() && repetition_penalty == 1.0f && presence_penalty == 0.0f && frequency_penalty == 0.0f &&
           !logprobs && logit_bias.empty() && min_tokens == 0 && constraint == nullptr;
  }

  // What the device sampler (ops/sample) does alone: temperature, top-k,
  // top-p, min-p and logprobs. A row with a logit bias, a penalty, an active
  // min_tokens mask (fewer than min_tokens generated) or a constraint is
  // drawn by the CPU Sampler from copied-back logits.
  bool device_sampleable(size_t num_generated) const {
    return repetition_penalty == 1.0f && presence_penalty == 0.0f && frequency_penalty == 0.0f &&
           logit_bias.empty() && num_generated >= static_cast<size_t>(std::max(0, min_tokens)) &&
           constraint == nullptr;
  }

  // Checks every field's range; the message names the field.
  // When `field` is given, a failure sets it to the offending field's name.
  Status validate(int32_t vocab_size, std::string* field = nullptr) const;
};

}  // namespace nanoserve
