#pragma once
// Speculative decoding (docs/speculative.md): a request that decodes may
// carry k proposed tokens into a step; the target scores all k + 1 positions
// in one forward, the engine keeps the longest prefix of proposals that the
// target's own choice agrees with, plus one token of the target's, and the
// K/V of the rest is rolled back within the step. The output is exactly what
// decoding without proposals gives, token for token, greedy or sampled:
// every row is sampled as it would be without proposals (one uniform of the
// request's Rng per token), and a proposal is kept when the token is the
// proposal. For a proposal that is a point mass on d this is rejection
// sampling: d is kept with probability p(d), and a rejected draw is
// distributed as the residual, p without d renormalised.
//
// This file holds what does not depend on a model: the configuration (as
// vLLM's --speculative-config spells it), the n-gram proposer, the sizing of
// proposals from each request's acceptance, and the counters. The draft-model
// proposer is engine/draft_proposer.h.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/request.h"

namespace nanoserve {

enum class SpecMethod : uint8_t { kNone, kNgram, kDraftModel };

struct SpeculativeConfig {
  SpecMethod method = SpecMethod::kNone;
  int32_t num_speculative_tokens = 0;  // k: most tokens proposed per request and step
  // n-gram: the longest and shortest suffix of the sequence that is looked up
  // earlier in it (vLLM: both default to the other, or to 5 when neither is given).
  int32_t prompt_lookup_max = 0;
  int32_t prompt_lookup_min = 0;
  std::string model;  // draft model: a GGUF file or HF folder with the target's vocabulary
  // vLLM's disable_by_batch_size: no proposals while this many requests or
  // more are running (0: never disabled).
  int32_t disable_by_batch_size = 0;
  // Size the proposals from the measured acceptance (true), or always
  // propose up to k (false).
  bool adaptive = true;
  // The step's fixed cost in units of one token row: a step of T token rows
  // costs about (overhead + T). Large on a GPU (a decode step is bound by the
  // weights' bytes, so extra rows are nearly free), a few rows on the CPU (the
  // matmuls read each weight once for all rows, but attention and the
  // elementwise ops cost per row). >= 0: fixed at that value. < 0 (default):
  // measured by the engine over its own decode steps (StepCostModel),
  // starting from step_overhead_prior.
  double step_overhead_tokens = -1.0;
  // The measurement's starting point: the device's typical value (load_engine
  // sets it), used until the decode steps have varied enough in rows to fit.
  double step_overhead_prior = 1.0;

  bool enabled() const { return method != SpecMethod::kNone; }
  // INVALID_ARGUMENT naming the field.
  Status validate() const;
};

// Parses --speculative-config: a JSON object with vLLM's keys "method"
// ("ngram" or "draft_model"; absent with "model": a draft model),
// "num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min",
// "model", "disable_by_batch_size", and ours: "adaptive" (bool),
// "step_overhead_tokens" (number). An unknown key, a wrong type or a method
// we do not run is INVALID_ARGUMENT naming it. "" or "null": off.
StatusOr<SpeculativeConfig> parse_speculative_config(const std::string& json);

// The n-gram (prompt lookup) proposal for `tokens`: for n from n_max down to
// n_min, the most recent earlier occurrence of the last n tokens; the up to
// k tokens that followed it are appended to `out` (cleared first). Nothing
// when no suffix of length >= n_min recurs.
void ngram_propose(std::span<const int32_t> prompt, std::span<const int32_t> output, int32_t n_max,
                   int32_t n_min, int32_t k, std::vector<int32_t>& out);

// How many tokens each request proposes this step. Request i's proposed
// tokens are each accepted with probability alpha[i] (geometric: the j-th is
// kept only if all before it were), so k tokens yield (1 - a^(k+1)) / (1 - a)
// tokens; a step of T rows costs (overhead + T). Adds proposal slots one at a
// time, always the one with the best chance of acceptance, while that raises
// the step's expected tokens per cost. k[i] in [0, cap[i]]; base_rows: the rows
// of the step without proposals (>= 1).
void size_proposals(std::span<const double> alpha, std::span<const int32_t> cap, double overhead,
                    int32_t base_rows, std::span<int32_t> k);

// The cost of a decode step by its token rows, learnt from the engine's own
// decode steps: a least-squares line seconds = a + b rows over decayed sums
// (the last ~50 steps weigh most), and overhead() = a / b, the fixed part of a
// step in rows, which is what size_proposals needs, kept within a factor of 4
// of the prior. Until the observed rows have varied enough to fit a slope (or
// after a fit that makes no sense, a negative intercept), overhead() keeps its
// last good value, at first the prior. The output never depends on it: only
// the speed does.
class StepCostModel {
 public:
  explicit StepCostModel(double prior) : prior_(prior), overhead_(prior) {}
  void observe(int64_t rows, double seconds);
  double overhead() const { return overhead_; }
  // For tests and logs: the weight of the observations so far.
  double weight() const { return s0_; }

 private:
  double s0_ = 0.0, s1_ = 0.0, s2_ = 0.0, sy_ = 0.0, sxy_ = 0.0;  // decayed sums of 1, x, x^2, y, xy
  double prior_, overhead_;
};

// A request's estimated acceptance rate per proposed token, from its decayed
// counts and a prior of 3 accepted to 1 rejected (an optimistic start that a
// few rejections overturn).
inline double spec_alpha(const Request& r) {
  return (r.spec_accepted + 3.0) / (r.spec_accepted + r.spec_rejected + 4.0);
}
// After verifying k proposed tokens of which a were accepted.
void spec_observe(Request& r, int32_t k, int32_t a);
// A step in which a draft model was sized to nothing for the request: its
// history fades toward the prior, and every kSpecProbeEvery such steps it
// proposes one token anyway (returns true), since a proposer that is not run
// learns nothing (n-gram proposals learn for free: spec_note_unsent).
inline constexpr int32_t kSpecProbeEvery = 16;
bool spec_fade(Request& r);
// A cheap proposer's proposal that sizing gave no room (Request::spec_unsent):
// once its position is sampled, it counts as one proposed token, kept when it
// equals the token there. Since the output is the same with or without
// proposals this is exactly what sending it would have given, so a request
// learns its acceptance without paying for rows (and batch sizes where the
// prior alone would never propose still start when proposals are good).
void spec_note_unsent(Request& r, int32_t proposed);
void spec_observe_unsent(Request& r);

// What proposes tokens. The engine calls propose() before each step's
// schedule with the running requests that will decode.
class Proposer {
 public:
  virtual ~Proposer() = default;
  // True when proposing is cheap next to a forward (n-gram): the engine then
  // asks for the most tokens and sizes afterwards; else (a draft model) it
  // sizes first and asks for exactly that many.
  virtual bool cheap() const = 0;
  // Writes up to k[i] tokens into reqs[i]->draft (cleared first).
  virtual Status propose(std::span<Request* const> reqs, std::span<const int32_t> k) = 0;
  // The request left the engine (finished or aborted): its state goes.
  virtual void release(RequestId /*id*/) {}
};

class NgramProposer final : public Proposer {
 public:
  explicit NgramProposer(const SpeculativeConfig& c)
      : n_max_(c.prompt_lookup_max), n_min_(c.prompt_lookup_min) {}
  bool cheap() const override { return true; }
  Status propose(std::span<Request* const> reqs, std::span<const int32_t> k) override;

 private:
  int32_t n_max_, n_min_;
};

}  // namespace nanoserve
