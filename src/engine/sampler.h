#pragma once
// Turns one row of logits into one token, per request (docs/architecture.md).
//
// Order: logit_bias, penalties (repetition over prompt + generated,
// presence/frequency over generated, as vLLM defines them), the min_tokens
// mask (end tokens to -inf while fewer than min_tokens are generated),
// temperature, top-k, top-p, min-p, then one draw from the request's own Rng.
// Greedy (temperature 0) is the argmax after bias, penalties and mask, ties
// to the lowest token id, and draws nothing. A token at -inf has weight 0 and
// is never drawn.
//
// Candidates are ranked by (processed logit descending, token id ascending),
// so every filter keeps a prefix of one fixed order and the result is a pure
// function of (logits, params, history, rng state).
//
// Every sum has one fixed order, so a device sampler can reproduce it bit for
// bit (ops/sample/sample.h): weights exp(l - max) in f32 (one polynomial, no
// fused multiply-adds: sampler.cc is built with -ffp-contract=off); whole-row
// sums (the no-filter total, top-p's z over the top-k set, the logprobs'
// normaliser) per block of 1024 ids in 8 interleaved f64 lanes, then the block
// sums in block order; the top-p mass and the draw's walk in rank order, one
// f64 add at a time.
//
// The Sampler owns only scratch buffers sized to the vocabulary, allocated
// once; it keeps no state between calls. One Sampler per engine thread.

#include <cstdint>
#include <span>
#include <vector>

#include "engine/rng.h"
#include "engine/sampling_params.h"

namespace nanoserve {

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

class Sampler {
 public:
  // eos_ids: the model's end tokens, which min_tokens masks (with the request's stop_token_ids).
  explicit Sampler(int32_t vocab_size, std::vector<int32_t> eos_ids = {});

  int32_t vocab_size() const { return vocab_size_; }

  // logits: [vocab] f32, the model's raw row (left unchanged).
  // prompt / output: the request's token history so far.
  int32_t sample(std::span<const float> logits, const SamplingParams& params, std::span<const int32_t> prompt,
                 std::span<const int32_t> output, Rng& rng);

  // sample() with u in place of the Rng's next draw (u in [0, 1)): what a
  // device sampler given the same uniform must return (ops/sample/sample.h).
  int32_t sample_uniform(std::span<const float> logits, const SamplingParams& params,
                         std::span<const int32_t> prompt, std::span<const int32_t> output, double u);

  // The candidates the last sample() drew from, in the order the draw walks
  // them (ranked as above when a filter applies, else by id), and their
  // renormalised probabilities (sum 1). Greedy leaves the argmax alone with
  // probability 1. For tests and debugging.
  std::span<const int32_t> candidates() const;
  std::span<const float> candidate_probs() const;

  // Bias, penalties, the min_tokens mask, then temperature, written into out
  // ([vocab]); the first half of sample(), exposed so each step can be tested on its own.
  void process_logits(std::span<const float> logits, const SamplingParams& params,
                      std::span<const int32_t> prompt, std::span<const int32_t> output, std::span<float> out);

  // Log-softmax of the raw row: returns the logprob of `token` and writes the
  // n most likely tokens (ties to the lowest id) into top (resized to n).
  float logprobs(std::span<const float> logits, int32_t token, int32_t n, std::vector<TokenLogprob>& top);

 private:
  // rng null: draws `uniform` instead.
  int32_t sample(std::span<const float> logits, const SamplingParams& params, std::span<const int32_t> prompt,
                 std::span<const int32_t> output, Rng* rng, double uniform);
  void apply_penalties(const SamplingParams& params, std::span<const int32_t> prompt,
                       std::span<const int32_t> output, float* l);
  // True when this call changes the row before the draw (bias, penalties, mask, temperature).
  static bool modifies(const SamplingParams& params, size_t num_generated);
  // Ranks order_[begin, end) by the work_ logits; ids ascending on ties.
  void rank(int32_t begin, int32_t mid, int32_t end);

  static constexpr int32_t kBlock = 1024;  // weights per block sum (no-filter draw)

  int32_t vocab_size_;
  std::vector<int32_t> eos_ids_;
  std::vector<float> work_;             // [vocab] processed logits
  std::vector<float> weight_;           // [vocab] by token id: exp(processed logit - max)
  mutable std::vector<float> probs_;    // [vocab] by rank: candidate probabilities, built on request
  std::vector<double> block_sums_;      // [ceil(vocab / kBlock)]
  std::vector<float> lp_;               // [vocab] logprobs scratch
  std::vector<float> masked_;           // [vocab] top-k weights by id, 0 elsewhere (large k)
  std::vector<int32_t> ids_;            // [vocab] the top-k ids sorted (small k)
  mutable std::vector<int32_t> order_;  // [vocab] token ids; a ranked prefix of them are the candidates
  std::vector<int32_t> counts_;         // [vocab] occurrences in output, zero between calls
  std::vector<uint8_t> seen_;           // [vocab] in prompt or output, zero between calls
  int32_t num_candidates_ = 0;
  bool all_candidates_ = false;  // no filter: the candidates are every id, in id order
  mutable bool probs_valid_ = false;
  double total_ = 0.0;  // candidates' total weight
};

}  // namespace nanoserve
