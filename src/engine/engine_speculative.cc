// The Engine's speculative decoding (docs/speculative.md): proposing before
// the schedule, sampling a chunk's rows with the verification of its
// proposals, and the acceptance counters. The rest of the step is engine.cc.

#include <algorithm>

#include "core/check.h"
#include "core/logging.h"
#include "engine/engine.h"

namespace nanoserve {

size_t Engine::spec_cost_class(size_t num_seqs) {
  size_t c = 0;
  while (c + 1 < std::tuple_size_v<decltype(step_cost_)> && (size_t{2} << c) <= num_seqs) ++c;
  return c;
}

void Engine::init_speculative(std::unique_ptr<Proposer> proposer) {
  proposer_ = std::move(proposer);
  if (proposer_ == nullptr) return;
  const SpeculativeConfig& spec = config_.speculative;
  const size_t B = config_.max_num_seqs, k = spec.num_speculative_tokens;
  spec_reqs_.reserve(B);
  spec_cap_.reserve(B);
  spec_k_.reserve(B);
  spec_alpha_.reserve(B);
  step_accepted_per_pos_.assign(k, 0);
  stats_.spec_accepted_per_pos.assign(k, 0);
  step_cost_.fill(StepCostModel(spec.step_overhead_prior));
}

void Engine::propose() {
  const SpeculativeConfig& sc = config_.speculative;
  spec_reqs_.clear();
  spec_cap_.clear();
  const std::vector<Request*>& running = scheduler_->running();
  const bool off =
      sc.disable_by_batch_size > 0 && static_cast<int32_t>(running.size()) >= sc.disable_by_batch_size;
  for (Request* r : running) {
    r->draft.clear();
    spec_observe_unsent(*r);
    if (off || r->constraint != nullptr) continue;
    const int64_t n = r->num_tokens();
    if (scheduler_->num_computed(r) != n - 1) continue;  // still in its prompt
    // Tokens past max_tokens or max_model_len could never be kept.
    const int64_t left = std::min<int64_t>(r->params.max_tokens - static_cast<int64_t>(r->output.size()) - 1,
                                           max_model_len_ - n);
    const int32_t cap = static_cast<int32_t>(std::min<int64_t>(sc.num_speculative_tokens, left));
    if (cap <= 0) continue;
    spec_reqs_.push_back(r);
    spec_cap_.push_back(cap);
  }
  if (spec_reqs_.empty()) return;
  const size_t n = spec_reqs_.size();
  spec_k_.resize(n);
  spec_alpha_.resize(n);
  // A fixed overhead if the configuration gives one, else the engine's measurement.
  const double overhead = sc.step_overhead_tokens >= 0
                              ? sc.step_overhead_tokens
                              : step_cost_[spec_cost_class(running.size())].overhead();
  const int32_t base_rows = static_cast<int32_t>(running.size());
  auto size = [&] {
    for (size_t i = 0; i < n; ++i) spec_alpha_[i] = spec_alpha(*spec_reqs_[i]);
    if (sc.adaptive) {
      size_proposals(spec_alpha_, spec_cap_, overhead, base_rows, spec_k_);
    } else {
      std::copy(spec_cap_.begin(), spec_cap_.end(), spec_k_.begin());
    }
  };
  Status st;
  if (proposer_->cheap()) {
    // Ask for the most, then keep what pays.
    st = proposer_->propose(spec_reqs_, spec_cap_);
    for (size_t i = 0; i < n; ++i)
      spec_cap_[i] = std::min<int32_t>(spec_cap_[i], static_cast<int32_t>(spec_reqs_[i]->draft.size()));
    size();
    for (size_t i = 0; i < n; ++i) {
      Request* r = spec_reqs_[i];
      if (spec_k_[i] == 0 && !r->draft.empty()) spec_note_unsent(*r, r->draft[0]);
      r->draft.resize(spec_k_[i]);
    }
  } else {
    size();
    for (size_t i = 0; i < n; ++i) {
      if (spec_k_[i] == 0 && spec_fade(*spec_reqs_[i])) spec_k_[i] = 1;  // a probe
    }
    st = proposer_->propose(spec_reqs_, spec_k_);
  }
  if (!st.ok()) {
    // Proposals only ever speed things up: without them the step is still right.
    NS_LOG(WARNING) << "speculative proposals failed this step: " << st.to_string();
    for (Request* r : spec_reqs_) r->draft.clear();
  }
}

// A plain decode or prefill has one row; a decode with k proposals has
// k + 1, checked one by one until the target's token differs from the
// proposal (that token is kept: it is what decoding without proposals gives
// here) or all k agree (then the last row adds one more).
FinishReason Engine::sample_chunk(const ScheduledChunk& c, size_t first_row, RequestOutput& out,
                                  const Tensor& logits, const RowSources& src, int64_t& prompt_tokens,
                                  int64_t& generation_tokens, int32_t& rejected) {
  Request* r = c.request;
  int32_t accepted = 0;
  FinishReason reason = FinishReason::kNone;
  for (int32_t j = 0; j <= c.num_draft; ++j) {
    const int32_t proposed = j < c.num_draft ? r->draft[j] : -1;
    const int32_t token = sample_row(first_row + j, r, out, logits, src);
    reason = emit(r, token, out, prompt_tokens);
    ++generation_tokens;
    if (reason != FinishReason::kNone || token != proposed) break;
    ++accepted;
  }
  // The device drew a uniform for every row; the Rng goes on from the first row not used, so the
  // request draws exactly one uniform per token, as without proposals.
  if (src.use_sampled && accepted < c.num_draft && !r->params.greedy())
    r->rng = row_rng_[first_row + accepted + 1];
  rejected = c.num_draft - accepted;
  if (c.num_draft > 0) {
    spec_observe(*r, c.num_draft, accepted);
    for (int32_t j = 0; j < accepted; ++j) ++step_accepted_per_pos_[j];
  }
  return reason;
}

void Engine::record_spec_stats(const SchedulerStep& plan) {
  int64_t drafts = 0, draft_tokens = 0, accepted = 0;
  for (size_t ci = 0; ci < plan.chunks.size(); ++ci) {
    if (plan.chunks[ci].num_draft == 0) continue;
    ++drafts;
    draft_tokens += plan.chunks[ci].num_draft;
    accepted += plan.chunks[ci].num_draft - rejected_[ci];
  }
  const double fixed = config_.speculative.step_overhead_tokens;
  std::lock_guard<std::mutex> lock(mu_);
  stats_.spec_step_overhead_rows =
      fixed >= 0 ? fixed : step_cost_[spec_cost_class(std::max<size_t>(1, plan.chunks.size()))].overhead();
  if (drafts == 0) return;
  stats_.spec_num_drafts += drafts;
  stats_.spec_num_draft_tokens += draft_tokens;
  stats_.spec_num_accepted_tokens += accepted;
  for (size_t j = 0; j < step_accepted_per_pos_.size(); ++j) {
    stats_.spec_accepted_per_pos[j] += step_accepted_per_pos_[j];
    step_accepted_per_pos_[j] = 0;
  }
}

}  // namespace nanoserve
