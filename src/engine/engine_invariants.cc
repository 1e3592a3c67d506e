// Engine::check_invariants: the consistency of queues, requests and blocks
// that the randomized tests check after every step (docs/engine.md).

#include <string>
#include <unordered_set>

#include "engine/engine.h"

namespace nanoserve {

Status Engine::check_invariants() const {
  const BlockManager& bm = block_manager();
  NS_RETURN_IF_ERROR(bm.check_invariants());
  std::unordered_set<int32_t> seqs;
  for (const Request* r : scheduler_->running()) {
    if (r->status != RequestStatus::kRunning)
      return internal_error("a running request is not marked running");
    if (r->seq < 0 || !bm.is_live(r->seq))
      return internal_error("running request " + std::to_string(r->id) + " has no sequence");
    if (!seqs.insert(r->seq).second)
      return internal_error("two running requests share sequence " + std::to_string(r->seq));
    if (bm.seq_len(r->seq) > r->num_tokens())
      return internal_error("request " + std::to_string(r->id) + " computed past its known tokens");
    // No block is held past a sequence's length between steps (past the launched step's tokens,
    // while one is in flight): the blocks reserved for rejected proposals went back within their step.
    const int64_t bs = bm.block_size();
    // Nor any behind its window: it holds exactly the blocks from its window's first read to its length.
    const int64_t len = bm.seq_len(r->seq), end = len + (in_flight_ ? r->launched_tokens : 0);
    const int64_t want = (end + bs - 1) / bs - bm.releasable_blocks(len);
    if (static_cast<int64_t>(bm.block_table(r->seq).size()) != (end + bs - 1) / bs ||
        bm.num_held_blocks(r->seq) != want)
      return internal_error("request " + std::to_string(r->id) + " holds " +
                            std::to_string(bm.num_held_blocks(r->seq)) + " of " +
                            std::to_string(bm.block_table(r->seq).size()) + " blocks for " +
                            std::to_string(len) + " tokens (" + std::to_string(want) + " expected)");
  }
  for (const Request* r : scheduler_->waiting()) {
    if (r->status != RequestStatus::kWaiting || r->seq >= 0 || !r->swap_slots.empty())
      return internal_error("waiting request " + std::to_string(r->id) + " holds cache state");
  }
  // Swapped out: no sequence, and exactly one slot for each block its length held; no slot held twice,
  // and none used that no swapped request holds (SwapSpace recounts).
  std::unordered_set<int32_t> slots;
  for (const Request* r : scheduler_->running()) {
    if (!r->swap_slots.empty())
      return internal_error("running request " + std::to_string(r->id) + " holds swap slots");
  }
  for (const Request* r : scheduler_->swapped()) {
    const std::string req = "swapped request " + std::to_string(r->id);
    if (r->status != RequestStatus::kSwapped || r->seq >= 0)
      return internal_error(req + " is not marked swapped, or holds a sequence");
    if (r->swapped_len < 1 || r->swapped_len > r->num_tokens())
      return internal_error(req + " swapped " + std::to_string(r->swapped_len) + " of " +
                            std::to_string(r->num_tokens()) + " tokens");
    if (static_cast<int64_t>(r->swap_slots.size()) != bm.held_blocks_for(r->swapped_len))
      return internal_error(req + " holds " + std::to_string(r->swap_slots.size()) + " slots for " +
                            std::to_string(r->swapped_len) + " tokens (" +
                            std::to_string(bm.held_blocks_for(r->swapped_len)) + " expected)");
    for (int32_t s : r->swap_slots) {
      if (s < 0 || s >= scheduler_->swap_space().num_slots())
        return internal_error(req + " holds slot " + std::to_string(s) + " outside the swap area");
      if (!scheduler_->swap_space().is_used(s))
        return internal_error(req + " holds free slot " + std::to_string(s));
      if (!slots.insert(s).second) return internal_error("swap slot " + std::to_string(s) + " held twice");
    }
  }
  NS_RETURN_IF_ERROR(scheduler_->swap_space().check_invariants(static_cast<int64_t>(slots.size())));
  if (bm.num_live_seqs() != static_cast<int32_t>(seqs.size()))
    return internal_error("the block manager has " + std::to_string(bm.num_live_seqs()) +
                          " live sequences for " + std::to_string(seqs.size()) + " running requests");
  for (const auto& [id, r] : requests_) {
    if (r->is_finished()) return internal_error("finished request " + std::to_string(id) + " still tracked");
    if (r->text_pending) return internal_error("request " + std::to_string(id) + " left with its text unmade");
    // Stopped (its finish reported) but tracked: only while the launched step still writes its blocks.
    if (r->finish_reason != FinishReason::kNone && !(in_flight_ && r->launched_tokens > 0))
      return internal_error("stopped request " + std::to_string(id) + " outlived its last step");
  }
  if (static_cast<int64_t>(requests_.size()) !=
      static_cast<int64_t>(scheduler_->running().size() + scheduler_->waiting().size() +
                           scheduler_->swapped().size()))
    return internal_error("tracked requests disagree with the queues");
  return Status();
}

}  // namespace nanoserve
