#pragma once
// One generation request and its life in the engine.
//
//   WAITING ──admit──► RUNNING ──stop/length──► FINISHED
//      ▲                  │ ▲ └─────abort──────► FINISHED (abort)
//      └─preempt (front)──┘ │
//        (recompute)        │ swap in
//                   preempt │ (front)      abort
//                    (swap) ▼
//                        SWAPPED ──────────────► FINISHED (abort)
//
// Tokens are prompt ++ output. How many leading tokens have their K/V in the
// cache is the block manager's to say (Scheduler::num_computed, by `seq`);
// preemption by recompute frees the sequence and keeps the output, so
// re-admission prefills prompt ++ output (from its cached prefix) and carries on.
// Preemption by swap copies the K/V of the sequence's held blocks to swap
// slots and frees the sequence; swapping in restores that length into new
// blocks, so it carries on without recomputing anything.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/rng.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"
#include "engine/stop_checker.h"
#include "engine/text_stream.h"
#include "engine/token_constraint.h"

namespace nanoserve {

using RequestId = uint64_t;
using Clock = std::chrono::steady_clock;

enum class RequestStatus : uint8_t { kWaiting, kRunning, kSwapped, kFinished };

struct Request {
  Request(RequestId id, std::vector<int32_t> prompt, SamplingParams params, uint64_t seed,
          std::span<const int32_t> eos_ids, std::unique_ptr<TextStream> text);

  RequestId id;
  std::vector<int32_t> prompt;
  SamplingParams params;
  std::vector<int32_t> output;  // generated tokens, in order

  RequestStatus status = RequestStatus::kWaiting;
  FinishReason finish_reason = FinishReason::kNone;
  int32_t seq = -1;  // block manager handle while the request holds blocks, else -1
  int32_t num_preemptions = 0;
  // While swapped out (kSwapped): the tokens whose K/V the slots hold (the
  // sequence's length at swap-out), and the swap slot of each block it held,
  // in table order (BlockManager::held_blocks_for(swapped_len) of them).
  int64_t swapped_len = 0;
  std::vector<int32_t> swap_slots;

  Rng rng;
  StopChecker stop;
  std::unique_ptr<TextStream> text;             // null: no detokenizer, no text
  std::unique_ptr<TokenConstraint> constraint;  // from params.constraint; null: unconstrained

  // Prompt logprobs (params.prompt_logprobs >= 0): the logits row at prompt
  // position p scores prompt token p + 1. Rows come in position order, over
  // as many steps as the prefill takes; positions below prompt_logprobs_next
  // are recorded, and the lists move to the output that ends the prefill.
  std::vector<float> prompt_logprobs;                     // [prompt_logprobs_next] while prefilling
  std::vector<std::vector<TokenLogprob>> prompt_top_logprobs;  // same, the top params.prompt_logprobs of each
  std::vector<int32_t> prompt_ranks;  // same, each token's rank at its position (1: the most likely)
  int64_t prompt_logprobs_next = 0;
  // Speculative decoding (engine/speculative.h): the tokens proposed to
  // follow the last known one, verified in the next step and then cleared;
  // and the request's acceptance so far (decayed counts of accepted proposed
  // tokens and of rejections), which sizes its next proposals.
  std::vector<int32_t> draft;
  double spec_accepted = 0.0, spec_rejected = 0.0;
  // A cheap proposal that was not sent (sizing gave it no room): its first
  // token, and the position it was for. The output does not depend on
  // proposals, so whether it would have been kept is known once that position
  // is sampled, at no cost (engine/speculative.h, spec_observe_unsent).
  int32_t spec_unsent = -1;
  int64_t spec_unsent_at = -1;
  // Steps in a row that a draft model was sized to nothing (it probes at kSpecProbeEvery).
  int32_t spec_idle = 0;

  // Asynchronous scheduling (docs/engine.md, "Asynchronous scheduling"): the
  // tokens of this request in the launched step, not yet committed (0 when it
  // has none); and whether its last token's text is still to be made, after
  // the next step's launch (Engine::finish_text).
  int32_t launched_tokens = 0;
  bool text_pending = false;
  // Its entry in the outputs of step() call output_step (Engine::output_for).
  uint64_t output_step = 0;
  size_t output_index = 0;

  Clock::time_point arrival_time;
  Clock::time_point first_scheduled_time;  // the start of the first step that ran it; {} before
  Clock::time_point first_token_time;  // valid once output is non-empty
  Clock::time_point finish_time;       // valid once finished

  int64_t num_tokens() const { return static_cast<int64_t>(prompt.size() + output.size()); }
  int32_t token_at(int64_t i) const {
    const int64_t np = static_cast<int64_t>(prompt.size());
    return i < np ? prompt[i] : output[i - np];
  }
  // True while prompt rows still need logits: such a request computes its
  // prompt from position 0 (no cached prefix) and asks a logits row of each.
  bool wants_prompt_rows() const {
    return params.prompt_logprobs >= 0 && prompt_logprobs_next + 1 < static_cast<int64_t>(prompt.size());
  }
  // The prompt positions of tokens [start, start + n) that need a logits row for the prompt's logprobs.
  std::pair<int64_t, int64_t> prompt_rows(int64_t start, int64_t n) const {
    if (params.prompt_logprobs < 0) return {start, start};
    const int64_t lo = std::max(start, prompt_logprobs_next);
    const int64_t hi = std::min(start + n, static_cast<int64_t>(prompt.size()) - 1);
    return lo < hi ? std::pair<int64_t, int64_t>{lo, hi} : std::pair<int64_t, int64_t>{start, start};
  }
  bool is_finished() const { return status == RequestStatus::kFinished; }
};

}  // namespace nanoserve
