#pragma once
// Server-wide sampling defaults: what `--generation-config auto|FOLDER` reads
// from a model's generation_config.json, applied to the fields a request
// leaves out (vLLM's rule). A request's own value always wins; max_tokens is
// the exception: the file's max_new_tokens caps every request's.

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "engine/sampling_params.h"

namespace nanoserve::server {

class Fields;

struct SamplingDefaults {
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int32_t> top_k;  // -1: off
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
  std::optional<int64_t> max_tokens;  // generation_config's max_new_tokens

  bool empty() const {
    return !temperature && !top_p && !top_k && !min_p && !repetition_penalty && !max_tokens;
  }
  // "temperature=0.6 top_p=0.9", for the start-up log.
  std::string describe() const;
};

// The defaults a generation_config.json object sets. As vLLM reads it (through Hugging Face's
// GenerationConfig diff), a value equal to Hugging Face's own default (temperature 1, top_p 1,
// top_k 50, repetition_penalty 1) is no default; null is none. INVALID_ARGUMENT naming the key
// for a value of the wrong type or out of the request field's range.
StatusOr<SamplingDefaults> sampling_defaults_from_generation_config(const nlohmann::json& config);

// Sets each default whose request field is absent or null from `fields` (the request body).
void apply_sampling_defaults(const SamplingDefaults& defaults, const Fields& fields, SamplingParams* params);

}  // namespace nanoserve::server
