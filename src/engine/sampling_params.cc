#include "engine/sampling_params.h"

#include <cmath>
#include <string>

namespace nanoserve {

namespace {

std::string num(double v) {
  std::string s = std::to_string(v);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

Status SamplingParams::validate(int32_t vocab_size, std::string* field) const {
  // Each failure names its field, for a caller that reports it (the server's 400 `param`).
  auto bad = [field](const char* name, const std::string& message) {
    if (field != nullptr) *field = name;
    return invalid_argument(message);
  };
  if (!std::isfinite(temperature) || temperature < 0.0f || temperature > 100.0f)
    return bad("temperature", "temperature must be in [0, 100], got " + num(temperature));
  if (top_k < -1) return bad("top_k", "top_k must be -1 (off) or >= 1, got " + std::to_string(top_k));
  if (!std::isfinite(top_p) || top_p <= 0.0f || top_p > 1.0f)
    return bad("top_p", "top_p must be in (0, 1], got " + num(top_p));
  if (!std::isfinite(min_p) || min_p < 0.0f || min_p > 1.0f)
    return bad("min_p", "min_p must be in [0, 1], got " + num(min_p));
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0.0f || repetition_penalty > 100.0f)
    return bad("repetition_penalty", "repetition_penalty must be in (0, 100], got " + num(repetition_penalty));
  if (!std::isfinite(presence_penalty) || presence_penalty < -2.0f || presence_penalty > 2.0f)
    return bad("presence_penalty", "presence_penalty must be in [-2, 2], got " + num(presence_penalty));
  if (!std::isfinite(frequency_penalty) || frequency_penalty < -2.0f || frequency_penalty > 2.0f)
    return bad("frequency_penalty", "frequency_penalty must be in [-2, 2], got " + num(frequency_penalty));
  if (max_tokens < 0) return bad("max_tokens", "max_tokens must be >= 0, got " + std::to_string(max_tokens));
  if (static_cast<int32_t>(stop.size()) > kMaxStops)
    return bad("stop", "stop: at most " + std::to_string(kMaxStops) + " stop strings, got " +
                            std::to_string(stop.size()));
  for (const std::string& s : stop) {
    if (s.empty()) return bad("stop", "stop: stop strings must not be empty");
    if (static_cast<int32_t>(s.size()) > kMaxStopLength)
      return bad("stop", "stop: a stop string is longer than " + std::to_string(kMaxStopLength) +
                              " bytes");
  }
  if (static_cast<int32_t>(stop_token_ids.size()) > kMaxStops)
    return bad("stop_token_ids", "stop_token_ids: at most " + std::to_string(kMaxStops) + " ids");
  for (int32_t id : stop_token_ids) {
    if (id < 0 || id >= vocab_size)
      return bad("stop_token_ids", "stop_token_ids: id " + std::to_string(id) + " outside the vocabulary [0, " +
                              std::to_string(vocab_size) + ")");
  }
  if (min_tokens < 0 || min_tokens > max_tokens)
    return bad("min_tokens", "min_tokens must be in [0, max_tokens (" + std::to_string(max_tokens) +
                            ")], got " + std::to_string(min_tokens));
  if (static_cast<int32_t>(logit_bias.size()) > kMaxLogitBias)
    return bad("logit_bias", "logit_bias: at most " + std::to_string(kMaxLogitBias) + " entries, got " +
                            std::to_string(logit_bias.size()));
  for (size_t i = 0; i < logit_bias.size(); ++i) {
    const auto& [id, bias] = logit_bias[i];
    if (id < 0 || id >= vocab_size)
      return bad("logit_bias", "logit_bias: token id " + std::to_string(id) + " outside the vocabulary [0, " +
                              std::to_string(vocab_size) + ")");
    if (!std::isfinite(bias) || bias < -kMaxBias || bias > kMaxBias)
      return bad("logit_bias", "logit_bias: the bias of token " + std::to_string(id) +
                              " must be in [-100, 100], got " + num(bias));
    for (size_t j = 0; j < i; ++j) {
      if (logit_bias[j].first == id)
        return bad("logit_bias", "logit_bias: token id " + std::to_string(id) + " appears twice");
    }
  }
  if (top_logprobs < 0 || top_logprobs > kMaxTopLogprobs)
    return bad("top_logprobs", "top_logprobs must be in [0, " + std::to_string(kMaxTopLogprobs) + "], got " +
                            std::to_string(top_logprobs));
  if (top_logprobs > 0 && !logprobs) return bad("top_logprobs", "top_logprobs needs logprobs to be enabled");
  if (prompt_logprobs < -1 || prompt_logprobs > kMaxTopLogprobs)
    return bad("prompt_logprobs", "prompt_logprobs must be in [0, " + std::to_string(kMaxTopLogprobs) +
                                      "], got " + std::to_string(prompt_logprobs));
  if (n < 1 || n > kMaxN)
    return bad("n", "n must be in [1, " + std::to_string(kMaxN) + "], got " + std::to_string(n));
  return Status();
}

}  // namespace nanoserve
