#include "engine/scheduler.h"

#include <algorithm>
#include <string>

#include "core/check.h"

namespace nanoserve {

Status SchedulerConfig::validate() const {
  if (max_num_seqs < 1)
    return invalid_argument("max_num_seqs must be >= 1, got " + std::to_string(max_num_seqs));
  if (max_num_batched_tokens < max_num_seqs) {
    return invalid_argument("max_num_batched_tokens (" + std::to_string(max_num_batched_tokens) +
                            ") must be >= max_num_seqs (" + std::to_string(max_num_seqs) +
                            "), so every running sequence can decode in one step");
  }
  if (max_logits_rows != 0 && max_logits_rows < max_num_seqs) {
    return invalid_argument("max_logits_rows (" + std::to_string(max_logits_rows) +
                            ") must be >= max_num_seqs (" + std::to_string(max_num_seqs) +
                            "), so every running sequence can sample in one step");
  }
  if (num_swap_slots < 0)
    return invalid_argument("num_swap_slots must be >= 0, got " + std::to_string(num_swap_slots));
  if (preemption_mode == PreemptionMode::kAuto && num_swap_slots > 0 &&
      !(swap_block_seconds > 0.0 && recompute_token_seconds > 0.0)) {
    return invalid_argument("preemption mode auto needs swap_block_seconds and recompute_token_seconds > 0");
  }
  return Status();
}

Scheduler::Scheduler(const SchedulerConfig& config, const BlockManagerConfig& blocks)
    : config_(config), blocks_(blocks), swap_(config.num_swap_slots) {
  NS_CHECK(config_.validate().ok()) << config_.validate().to_string();
  NS_CHECK(blocks_.max_num_seqs() >= config_.max_num_seqs)
      << "the block manager has fewer sequence handles than max_num_seqs";
  running_.reserve(config_.max_num_seqs);
  step_.chunks.reserve(config_.max_num_seqs);
}

void Scheduler::add(Request* r) {
  NS_CHECK(r->status == RequestStatus::kWaiting && r->seq < 0) << "request " << r->id << " is not fresh";
  waiting_.push_back(r);
}

void Scheduler::remove(Request* r) {
  if (r->seq >= 0) {
    blocks_.free_sequence(r->seq);
    r->seq = -1;
  }
  if (!r->swap_slots.empty()) {
    // Aborted while swapped out: its K/V is dropped with its slots. (Slots a
    // swap-in of this step listed were freed at the swap-in.)
    swap_.free(r->swap_slots);
    r->swap_slots.clear();
    r->swapped_len = 0;
  }
  if (auto it = std::find(running_.begin(), running_.end(), r); it != running_.end()) {
    running_.erase(it);
  } else if (auto wit = std::find(waiting_.begin(), waiting_.end(), r); wit != waiting_.end()) {
    waiting_.erase(wit);
  } else if (auto sit = std::find(swapped_.begin(), swapped_.end(), r); sit != swapped_.end()) {
    swapped_.erase(sit);
  }
}

bool Scheduler::should_swap(int64_t len, int32_t held) const {
  if (config_.preemption_mode == PreemptionMode::kRecompute || held == 0 || held > swap_.num_free_slots())
    return false;
  if (config_.preemption_mode == PreemptionMode::kSwap) return true;
  // Moving the held blocks out and back against prefilling the computed tokens again.
  return static_cast<double>(held) * config_.swap_block_seconds <
         static_cast<double>(len) * config_.recompute_token_seconds;
}

void Scheduler::preempt_newest() {
  Request* victim = running_.back();
  running_.pop_back();
  const int32_t seq = victim->seq;
  const int64_t len = blocks_.seq_len(seq);
  const int32_t held = blocks_.num_held_blocks(seq);
  // Between steps a sequence holds exactly its length's blocks, and a victim has reserved nothing in
  // this step yet (chunks are pushed in running order, and it is the newest): nothing past len is lost.
  NS_CHECK_EQ(held, blocks_.held_blocks_for(len));
  if (should_swap(len, held)) {
    victim->swap_slots.clear();
    NS_CHECK(swap_.allocate(held, victim->swap_slots)) << "swap slots after a room check";
    const std::span<const int32_t> table = blocks_.block_table(seq);
    const int32_t released = blocks_.num_released(seq);
    for (int32_t i = 0; i < held; ++i) step_.swap_out.push_back({table[released + i], victim->swap_slots[i]});
    victim->swapped_len = len;
    victim->status = RequestStatus::kSwapped;
    swapped_.push_front(victim);
    ++num_swap_preemptions_;
    swapped_out_blocks_ += held;
    ++step_.num_swapped_out;
  } else {
    victim->status = RequestStatus::kWaiting;  // recompute prompt ++ output on re-admission
    waiting_.push_front(victim);
    recomputed_tokens_ += len;
  }
  // Its cached blocks stay cached (for a re-admission by recompute, or others' prefixes); the copies
  // of a swap-out run before the step's forward, so before anything rewrites them.
  blocks_.free_sequence(seq);
  victim->seq = -1;
  victim->draft.clear();
  ++victim->num_preemptions;
  ++num_preemptions_;
  ++step_.num_preempted;
}

bool Scheduler::swap_in_swapped(int64_t& budget, int64_t max_rows) {
  const int64_t block_size = blocks_.block_size();
  while (!swapped_.empty()) {
    if (static_cast<int32_t>(running_.size()) >= config_.max_num_seqs || budget <= 0) return false;
    Request* r = swapped_.front();
    const int64_t len = r->swapped_len;
    const int32_t held = blocks_.held_blocks_for(len);
    NS_CHECK_EQ(static_cast<int32_t>(r->swap_slots.size()), held);
    const int64_t available = static_cast<int64_t>(blocks_.num_available_blocks()) - held;
    // Its next chunk, as a running request's: a decode's one token, or as much of its prompt as the
    // budget, the rows and the blocks left after its own allow.
    const int64_t table_tokens = (len + block_size - 1) / block_size * block_size;
    const int64_t room = table_tokens - len + std::max<int64_t>(available, 0) * block_size;
    int64_t want = std::min({r->num_tokens() - len, budget, room});
    want = fit_rows(r, len, want, max_rows - step_.num_rows);
    if (available < 0 || want <= 0) return false;
    StatusOr<int32_t> seq = blocks_.add_sequence();
    NS_CHECK(seq.ok()) << seq.status().to_string();
    const Status st = blocks_.restore_sequence(*seq, tokens_of(r), len);
    NS_CHECK(st.ok()) << "restore after a fit check: " << st.to_string();
    const std::span<const int32_t> table = blocks_.block_table(*seq);
    const int32_t released = blocks_.num_released(*seq);
    for (int32_t i = 0; i < held; ++i) step_.swap_in.push_back({table[released + i], r->swap_slots[i]});
    swap_.free(r->swap_slots);  // read by this step's copy, before any later swap-out writes them
    r->swap_slots.clear();
    r->swapped_len = 0;
    r->seq = *seq;
    r->status = RequestStatus::kRunning;
    swapped_.pop_front();
    running_.push_back(r);
    ++num_swap_ins_;
    swapped_in_blocks_ += held;
    ++step_.num_swapped_in;
    push_chunk(r, want);
    budget -= want;
  }
  return true;
}

void Scheduler::push_chunk(Request* r, int64_t n) {
  const int64_t computed = num_computed(r);
  const Status st = blocks_.reserve(r->seq, computed + n);
  NS_CHECK(st.ok()) << "reserve after a fit check: " << st.to_string();
  ScheduledChunk c;
  c.request = r;
  c.num_tokens = static_cast<int32_t>(n);
  c.samples = computed + n == r->num_tokens();  // a decode with proposals: set by the caller
  c.num_rows = static_cast<int32_t>(rows_of(r, computed, n));
  step_.chunks.push_back(c);
  step_.num_tokens += c.num_tokens;
  step_.num_rows += c.num_rows;
}

int64_t Scheduler::rows_of(const Request* r, int64_t computed, int64_t n) {
  const auto [lo, hi] = r->prompt_rows(computed, n);
  return (hi - lo) + (computed + n == r->num_tokens() ? 1 : 0);
}

int64_t Scheduler::fit_rows(const Request* r, int64_t computed, int64_t want, int64_t rows) {
  if (want <= 0 || rows_of(r, computed, want) <= rows) return want;
  if (rows < 0) return 0;
  // rows_of grows with n (by at most one a token): the largest n with rows_of(n) <= rows.
  int64_t lo = 0, hi = want;  // rows_of(lo) <= rows < rows_of(hi)
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (rows_of(r, computed, mid) <= rows ? lo : hi) = mid;
  }
  return lo;
}

void Scheduler::commit(const SchedulerStep& step, std::span<const int32_t> rejected) {
  NS_CHECK(rejected.empty() || rejected.size() == step.chunks.size())
      << rejected.size() << " rejection counts for " << step.chunks.size() << " chunks";
  for (size_t i = 0; i < step.chunks.size(); ++i) {
    const ScheduledChunk& c = step.chunks[i];
    Request* r = c.request;
    const int32_t dropped = rejected.empty() ? 0 : rejected[i];
    NS_CHECK(dropped >= 0 && dropped <= c.num_draft)
        << dropped << " rejected of " << c.num_draft << " proposed";
    const int64_t len = blocks_.seq_len(r->seq) + c.num_tokens - dropped;
    blocks_.commit(r->seq, tokens_of(r), len);
    if (c.num_draft > 0) blocks_.shrink_to(r->seq, len);  // the blocks reserved for rejected tokens go back
  }
}

const SchedulerStep& Scheduler::schedule() {
  step_.chunks.clear();
  step_.num_tokens = 0;
  step_.num_rows = 0;
  step_.num_preempted = 0;
  step_.num_swapped_out = 0;
  step_.num_swapped_in = 0;
  step_.swap_out.clear();
  step_.swap_in.clear();
  int64_t budget = config_.max_num_batched_tokens;
  const int64_t max_rows = config_.max_logits_rows > 0 ? config_.max_logits_rows : config_.max_num_seqs;
  int64_t draft_rows = config_.max_draft_rows;
  const int64_t block_size = blocks_.block_size();

  // 1. Running, oldest first. Decodes behind the current request keep one
  //    token of budget each, so a prefill chunk never starves them.
  int64_t decodes_behind = 0;
  for (Request* r : running_) decodes_behind += prefilling(r) ? 0 : 1;
  for (size_t i = 0; i < running_.size(); ++i) {
    Request* r = running_[i];
    const bool decode = !prefilling(r);
    if (decode) --decodes_behind;
    int64_t want = decode ? 1 : std::min(uncomputed(r), budget - decodes_behind);
    const int64_t computed = num_computed(r);
    // Every decode behind keeps its row too (decodes take one; so did every chunk before).
    want = fit_rows(r, computed, want, max_rows - step_.num_rows - decodes_behind);
    if (want <= 0) continue;
    if (!decode) {
      // Shrink a prefill chunk to the blocks it holds plus the available ones.
      const int64_t room = blocks_.seq_capacity(r->seq) - computed +
                           static_cast<int64_t>(blocks_.num_available_blocks()) * block_size;
      if (room > 0) want = std::min(want, room);
    }
    bool self_preempted = false;
    while (!blocks_.can_reserve(r->seq, computed + want)) {
      if (running_.back() == r) {
        preempt_newest();
        self_preempted = true;
        break;
      }
      if (!prefilling(running_.back())) --decodes_behind;
      preempt_newest();
    }
    if (self_preempted) break;  // r was the newest: nothing runs behind it
    want = fit_rows(r, computed, want, max_rows - step_.num_rows - decodes_behind);  // after a shrink
    if (want <= 0) continue;
    int64_t extra = 0;
    if (decode && !r->draft.empty()) {
      // Proposed tokens only from what is spare (budget, logits rows, blocks);
      // never at another's expense.
      extra = std::min({static_cast<int64_t>(r->draft.size()), budget - decodes_behind - want, draft_rows,
                        max_rows - step_.num_rows - decodes_behind - want});
      while (extra > 0 && !blocks_.can_reserve(r->seq, computed + want + extra)) --extra;
      extra = std::max<int64_t>(extra, 0);
      draft_rows -= extra;
    }
    push_chunk(r, want + extra);
    if (extra > 0) {
      // The decode's row and one for each proposed token.
      ScheduledChunk& c = step_.chunks.back();
      c.num_draft = static_cast<int32_t>(extra);
      c.samples = true;
      step_.num_rows += static_cast<int32_t>(1 + extra) - c.num_rows;
      c.num_rows = static_cast<int32_t>(1 + extra);
    }
    budget -= want + extra;
  }

  // 2. Swap the swapped requests back in, then admit from the waiting queue, in order, each from its
  //    cached prefix on.
  if (step_.num_preempted == 0 && swap_in_swapped(budget, max_rows)) {
    while (!waiting_.empty() && static_cast<int32_t>(running_.size()) < config_.max_num_seqs && budget > 0) {
      Request* r = waiting_.front();
      StatusOr<int32_t> seq = blocks_.add_sequence();
      NS_CHECK(seq.ok()) << seq.status().to_string();
      // A cached prefix has no logits: a request that still needs its prompt rows computes them all.
      const bool lookup = !r->wants_prompt_rows();
      const int64_t hit = lookup ? blocks_.attach_cached_prefix(*seq, tokens_of(r)) : 0;
      const int64_t want =
          fit_rows(r, hit, std::min(r->num_tokens() - hit, budget), max_rows - step_.num_rows);
      if (want <= 0 || !blocks_.can_reserve(*seq, hit + want)) {
        blocks_.free_sequence(*seq);  // the hit blocks go back to the cache
        break;
      }
      waiting_.pop_front();
      r->seq = *seq;
      r->status = RequestStatus::kRunning;
      running_.push_back(r);
      if (lookup) {
        prefix_queries_ += r->num_tokens();
        prefix_hits_ += hit;
      }
      push_chunk(r, want);
      budget -= want;
    }
  }
  return step_;
}

}  // namespace nanoserve
