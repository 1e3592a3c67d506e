// A step's outputs per row (docs/engine.md): the prompt logprobs a request
// asked for, the sampling of a row (on the host, or taking the device's draw),
// constrained sampling, and emitting a token with its stop checks. The step
// itself is engine.cc.

#include <algorithm>
#include <limits>

#include "core/check.h"
#include "core/logging.h"
#include "engine/engine.h"

namespace nanoserve {

void Engine::record_prompt_logprobs(const Tensor& logits) {
  for (size_t row = 0; row < row_owner_.size(); ++row) {
    const int64_t p = row_prompt_pos_[row];
    if (p < 0) continue;
    Request* r = row_owner_[row];
    NS_CHECK_EQ(p, r->prompt_logprobs_next);  // rows come in position order, each once
    const std::span<const float> row_logits(logits.data_as<const float>() + row * vocab_size_, vocab_size_);
    std::vector<TokenLogprob>& top = r->prompt_top_logprobs.emplace_back();
    const int32_t token = r->prompt[p + 1];
    r->prompt_logprobs.push_back(sampler_->logprobs(row_logits, token, r->params.prompt_logprobs, top));
    int32_t above = 0;
    for (const float l : row_logits) above += l > row_logits[token] ? 1 : 0;
    r->prompt_ranks.push_back(above + 1);
    r->prompt_logprobs_next = p + 1;
  }
}

void Engine::take_prompt_logprobs(Request& r, RequestOutput& out) {
  if (r.params.prompt_logprobs < 0) return;
  out.prompt_logprobs = std::move(r.prompt_logprobs);
  out.prompt_top_logprobs = std::move(r.prompt_top_logprobs);
  out.prompt_ranks = std::move(r.prompt_ranks);
  r.prompt_logprobs.clear();
  r.prompt_top_logprobs.clear();
  r.prompt_ranks.clear();
}

int32_t Engine::sample_row(size_t row, Request* r, RequestOutput& out, const Tensor& logits,
                           const RowSources& src) {
  std::span<const float> row_logits(logits.data_as<const float>() + row * vocab_size_, vocab_size_);
  const bool on_device = src.use_sampled && src.sampled[row] != kSampleOnHost;
  if (src.use_sampled && !on_device) {
    // Handed back (its walk ran past the device's window): the CPU Sampler
    // draws it from the same Rng state, so the same uniform.
    row_logits = model_->logits_row(static_cast<int32_t>(row));
    r->rng = row_rng_[row];
  }
  // A row with a proposal is sampled exactly as without it (docs/speculative.md): the
  // proposal is kept when the token is the proposal. Constrained requests never propose.
  const int32_t token = on_device                  ? src.sampled[row]
                        : r->constraint != nullptr ? sample_constrained(*r, row_logits)
                        : src.use_greedy && r->params.plain_greedy()
                            ? src.greedy[row]
                            : sampler_->sample(row_logits, r->params, r->prompt, r->output, r->rng);
  if (r->params.logprobs) {
    std::vector<TokenLogprob>& top = out.top_logprobs.emplace_back();
    if (on_device) {
      const SampleRowLogprobs& lp = src.sampled_lp[row];
      top.resize(static_cast<size_t>(lp.n));
      for (int32_t j = 0; j < lp.n; ++j) top[j] = {lp.top_ids[j], lp.top_logprobs[j]};
      out.logprobs.push_back(lp.logprob);
    } else {
      out.logprobs.push_back(sampler_->logprobs(row_logits, token, r->params.top_logprobs, top));
    }
  }
  return token;
}

FinishReason Engine::emit(Request* r, int32_t token, RequestOutput& out, int64_t& prompt_tokens) {
  if (r->output.empty()) {
    r->first_token_time = Clock::now();
    prompt_tokens += static_cast<int64_t>(r->prompt.size());
    take_prompt_logprobs(*r, out);
  }
  r->output.push_back(token);
  if (r->constraint != nullptr) r->constraint->accept(token);
  out.new_tokens.push_back(token);
  out.num_output_tokens = static_cast<int32_t>(r->output.size());
  out.num_preemptions = r->num_preemptions;
  out.first_token_time = r->first_token_time;
  if (async_) {
    // The text waits until the next step is launched (finish_text); what the token alone decides is
    // known now, so that a request it ends is not planned again.
    r->text_pending = true;
    const bool ends = r->stop.ends_on_token(token, static_cast<int32_t>(r->output.size()));
    return ends ? FinishReason::kStop : FinishReason::kNone;  // the reason itself comes with the text
  }
  new_text_.clear();
  if (r->text != nullptr) r->text->push(token, new_text_);
  return r->stop.on_token(token, static_cast<int32_t>(r->output.size()), new_text_, out.text);
}

int32_t Engine::sample_constrained(Request& r, std::span<const float> logits) {
  std::copy(logits.begin(), logits.end(), masked_row_.begin());
  r.constraint->apply(masked_row_);
  int32_t token = sampler_->sample(masked_row_, r.params, r.prompt, r.output, r.rng);
  if (!r.constraint->allows(token)) {
    // The draw gives a masked (-inf) token a weight of 2^-126, not 0: in the
    // rare case that rounding lands on one, take the most likely allowed token.
    int32_t best = -1;
    for (int32_t i = 0; i < vocab_size_; ++i) {
      if (r.constraint->allows(i) && (best < 0 || masked_row_[i] > masked_row_[best])) best = i;
    }
    NS_CHECK(best >= 0) << "a token constraint allowed no token";
    token = best;
  }
  return token;
}

}  // namespace nanoserve
