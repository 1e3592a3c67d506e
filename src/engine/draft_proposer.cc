#include "engine/draft_proposer.h"

#include <algorithm>

#include "core/check.h"
#include "core/logging.h"
#include "engine/engine.h"

namespace nanoserve {

StatusOr<std::unique_ptr<DraftProposer>> DraftProposer::create(std::unique_ptr<ModelRunner> runner,
                                                               int64_t target_vocab, int32_t num_blocks,
                                                               int32_t block_size, int32_t max_num_seqs,
                                                               int64_t max_seq_len, std::shared_ptr<void> keep,
                                                               bool release_window_blocks) {
  NS_CHECK(runner != nullptr) << "DraftProposer without a runner";
  if (runner->config().vocab_size != target_vocab) {
    return invalid_argument("speculative_config.model: the draft model's vocabulary has " +
                            std::to_string(runner->config().vocab_size) + " tokens, the target's " +
                            std::to_string(target_vocab) + "; a draft must share the target's tokenizer");
  }
  if (!runner->kv_blocks_shareable())
    return invalid_argument("speculative_config.model: the draft runner needs paged KV storage");
  BlockManagerConfig bc;
  bc.num_blocks = num_blocks;
  bc.block_size = block_size;
  bc.max_num_seqs = max_num_seqs;
  bc.max_seq_len = max_seq_len;
  bc.enable_prefix_caching = false;  // its cache follows one request each, rolled back often
  bc.sliding_window = release_window_blocks ? kv_window_to_release(runner->config()) : 0;
  bc.window_read_margin = runner->window_read_margin();
  NS_RETURN_IF_ERROR(bc.validate());
  NS_RETURN_IF_ERROR(runner->init_kv_cache(num_blocks, block_size));
  return std::unique_ptr<DraftProposer>(new DraftProposer(std::move(runner), bc, std::move(keep)));
}

DraftProposer::DraftProposer(std::unique_ptr<ModelRunner> runner, const BlockManagerConfig& bc,
                             std::shared_ptr<void> keep)
    : keep_(std::move(keep)), runner_(std::move(runner)), limits_(runner_->step_limits()), blocks_(bc) {
  batch_.tokens.reserve(limits_.max_tokens);
  batch_.positions.reserve(limits_.max_tokens);
  batch_.slot_mapping.reserve(limits_.max_tokens);
  batch_.seq_starts.reserve(limits_.max_seqs + 1);
  batch_.seq_ids.reserve(limits_.max_seqs);
  batch_.context_lens.reserve(limits_.max_seqs);
  batch_.logits_rows.reserve(limits_.max_seqs);
}

void DraftProposer::release(RequestId id) {
  auto it = states_.find(id);
  if (it == states_.end()) return;
  if (it->second.seq >= 0) blocks_.free_sequence(it->second.seq);
  states_.erase(it);
}

void DraftProposer::evict_except(std::span<Request* const> keep) {
  for (auto it = states_.begin(); it != states_.end();) {
    const bool kept =
        std::any_of(keep.begin(), keep.end(), [&](const Request* r) { return r->id == it->first; });
    if (kept) {
      ++it;
      continue;
    }
    blocks_.free_sequence(it->second.seq);
    it = states_.erase(it);
  }
}

DraftProposer::State* DraftProposer::state_for(Request* r, std::span<Request* const> all) {
  if (auto it = states_.find(r->id); it != states_.end()) return &it->second;
  StatusOr<int32_t> seq = blocks_.add_sequence();
  if (!seq.ok()) {
    evict_except(all);  // requests that are not decoding now (preempted) give their handles back
    seq = blocks_.add_sequence();
    if (!seq.ok()) return nullptr;
  }
  State& s = states_[r->id];
  s.seq = *seq;
  return &s;
}

Status DraftProposer::propose(std::span<Request* const> reqs, std::span<const int32_t> k) {
  pending_.clear();
  for (size_t i = 0; i < reqs.size(); ++i) {
    Request* r = reqs[i];
    r->draft.clear();
    if (k[i] <= 0) continue;
    State* s = state_for(r, reqs);
    if (s == nullptr) continue;
    // Roll the cache back to what still agrees with the request (the
    // proposals the target rejected go), and always recompute the last
    // token: its logits give the first proposal.
    const int64_t n = r->num_tokens();
    int64_t agree = 0;
    const int64_t held = std::min<int64_t>(static_cast<int64_t>(s->tokens.size()), n);
    while (agree < held && s->tokens[agree] == r->token_at(agree)) ++agree;
    agree = std::min(agree, n - 1);
    if (blocks_.releasable_blocks(agree) < blocks_.num_released(s->seq)) {
      // Behind a window: what agrees would read blocks already released.
      blocks_.free_sequence(s->seq);
      s->seq = blocks_.add_sequence().value();  // the handle just freed
      agree = 0;
    }
    blocks_.shrink_to(s->seq, agree);
    s->tokens.resize(agree);
    const int64_t need = n + k[i] - 1;  // the request's tokens and all proposals but the last
    if (!blocks_.can_reserve(s->seq, need)) {
      evict_except(reqs);
      if (!blocks_.can_reserve(s->seq, need)) continue;
    }
    NS_RETURN_IF_ERROR(blocks_.reserve(s->seq, need));
    pending_.push_back({r, s, k[i], agree});
  }

  for (;;) {
    ForwardBatch& b = batch_;
    b.tokens.clear();
    b.positions.clear();
    b.seq_starts.assign(1, 0);
    b.seq_ids.clear();
    b.context_lens.clear();
    b.logits_rows.clear();
    b.need_logits = false;  // the argmax is enough; a runner without greedy_tokens() writes logits anyway
    row_of_.assign(pending_.size(), -1);
    int64_t budget = limits_.max_tokens;
    for (size_t j = 0; j < pending_.size() && budget > 0 && b.num_seqs() < limits_.max_seqs; ++j) {
      Pending& p = pending_[j];
      Request* r = p.request;
      if (static_cast<int32_t>(r->draft.size()) >= p.want) continue;
      // Fed in order: the request's tokens, then its proposals so far; the
      // logits of the newest give the next proposal.
      const int64_t n = r->num_tokens();
      const int64_t end = n + static_cast<int64_t>(r->draft.size());
      const int64_t count = std::min(end - p.fed, budget);
      for (int64_t t = p.fed; t < p.fed + count; ++t) {
        b.tokens.push_back(t < n ? r->token_at(t) : r->draft[t - n]);
        b.positions.push_back(static_cast<int32_t>(t));
      }
      b.seq_starts.push_back(b.num_tokens());
      b.seq_ids.push_back(p.state->seq);
      b.context_lens.push_back(static_cast<int32_t>(p.fed + count));
      if (p.fed + count == end) {
        row_of_[j] = static_cast<int32_t>(b.logits_rows.size());
        b.logits_rows.push_back(b.num_tokens() - 1);
      }
      budget -= count;
    }
    if (b.num_seqs() == 0) break;
    blocks_.fill_batch(b);
    Status st = b.validate(limits_);
    StatusOr<Tensor> logits = st.ok() ? runner_->forward(b) : StatusOr<Tensor>(st);
    if (!logits.ok()) {
      // Nothing the cache holds can be trusted now: start every request afresh.
      for (Request* r : reqs) {
        r->draft.clear();
        release(r->id);
      }
      return logits.status();
    }
    ++num_forwards_;
    tokens_computed_ += b.num_tokens();
    const std::span<const int32_t> greedy = runner_->greedy_tokens();
    const int64_t vocab = runner_->config().vocab_size;
    int32_t seq_index = 0;
    for (size_t j = 0; j < pending_.size(); ++j) {
      Pending& p = pending_[j];
      if (seq_index >= b.num_seqs() || b.seq_ids[seq_index] != p.state->seq) continue;
      Request* r = p.request;
      const int64_t n = r->num_tokens();
      const int32_t count = b.seq_len(seq_index);
      for (int64_t t = p.fed; t < p.fed + count; ++t)
        p.state->tokens.push_back(t < n ? r->token_at(t) : r->draft[t - n]);
      p.fed += count;
      blocks_.commit(p.state->seq, TokenSeq{p.state->tokens, {}}, p.fed);
      ++seq_index;
      const int32_t row = row_of_[j];
      if (row < 0) continue;
      int32_t token;
      if (greedy.size() == b.logits_rows.size()) {
        token = greedy[row];
      } else {
        const float* l = logits->data_as<const float>() + row * vocab;
        token =
            static_cast<int32_t>(std::max_element(l, l + vocab) - l);  // the first max: ties to the lowest id
      }
      r->draft.push_back(token);
    }
  }
  return Status();
}

}  // namespace nanoserve
