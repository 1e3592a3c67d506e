#pragma once
// Offline generation: hand a list of prompts to an Engine, step it until all
// finish, and return each completion in prompt order. Optionally draws a
// progress line on stderr (done/total, output tok/s, a bar).

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"

namespace nanoserve {

struct Completion {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish_reason = FinishReason::kNone;
  int32_t num_prompt_tokens = 0;
  int32_t num_preemptions = 0;
  double ttft_s = 0.0;     // arrival to first token
  double latency_s = 0.0;  // arrival to finish
  // (latency - ttft) / (tokens - 1); 0 for a single token.
  double tpot_s() const {
    return tokens.size() > 1 ? (latency_s - ttft_s) / static_cast<double>(tokens.size() - 1) : 0.0;
  }
};

struct GenerateOptions {
  bool progress = false;  // a progress line on stderr
};

// params holds one SamplingParams for all prompts, or one per prompt. Fails
// without running anything if any request is rejected (the error names the
// prompt's index); fails if a step fails.
StatusOr<std::vector<Completion>> generate(Engine& engine, std::span<const std::vector<int32_t>> prompts,
                                           std::span<const SamplingParams> params,
                                           const GenerateOptions& options = {});

}  // namespace nanoserve
