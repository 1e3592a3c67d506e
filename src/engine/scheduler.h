#pragma once
// Decides what runs each step (docs/architecture.md). It owns the block manager
// (kvcache/block_manager.h): asks it what fits, reserves ahead of the step,
// and frees on preemption, abort and finish. A request's computed length is
// its sequence's length in the block manager (0 while it holds no sequence).
//
// One step, under a token budget (max_num_batched_tokens) and a sequence cap
// (max_num_seqs):
//   1. Running requests, oldest first. A decode takes one token. A request
//      still in its prompt (chunked prefill) takes as much of the rest as the
//      budget allows after keeping one token for every decode behind it.
//      When the cache cannot hold the tokens, the newest running request is
//      preempted until it can; the newest may be the request itself. A
//      preempted request is swapped out (its held blocks listed for copying
//      to swap slots, front of the swapped queue) when the swap area has room
//      and the cost model prefers it (PreemptionMode), else preempted by
//      recompute (output kept, front of the waiting queue); either way its
//      blocks are freed. A prefill chunk first shrinks to what the free blocks hold.
//   2. Only in a step that preempted nothing: swapped requests, oldest
//      preempted first, are swapped back in (new blocks, listed for copying
//      from their slots) while the budget, the cap and the free blocks allow;
//      then, once none is left swapped, waiting requests, first come first
//      served. The first one that does not fit stops both, so none jumps the
//      queue. An admitted request first takes the cached blocks of its
//      longest cached prefix (prefix caching), and computes only the rest.
// A step's copies (SchedulerStep::swap_out, swap_in) run before its forward:
// swap-outs and swap-ins never share a step, so a slot freed by a swap-in is
// never written before it is read.
// Logits rows are bounded too (max_logits_rows, the runner's R): every chunk
// that samples takes one, and a request that asks for prompt logprobs takes
// one per prompt token of its chunk, so its chunk shrinks to the rows left
// after one for every decode behind it. Such a request skips the prefix cache
// until its prompt's rows are all recorded: a cached block has K/V but no logits.
// A decode that carries proposed tokens (speculative decoding) takes them
// only from what is left: budget after one token for every decode behind it,
// the step's spare logits rows, and free blocks; a proposal never preempts.
// Every admitted chunk has its blocks reserved before the step runs, so the
// forward pass never runs out.
//
// The oldest running request can always progress (it may preempt everyone
// else, and add_request refuses what the whole pool cannot hold), so the
// engine never deadlocks.

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "core/status.h"
#include "engine/request.h"
#include "kvcache/block_manager.h"
#include "kvcache/swap_space.h"
#include "model/model_runner.h"

namespace nanoserve {

// How a preempted request gives its blocks back (docs/engine.md, "Preemption:
// swap or recompute"). kAuto swaps when the swap area has room and moving its
// blocks out and back costs less than prefilling its tokens again; kSwap
// swaps whenever the area has room; kRecompute never swaps.
enum class PreemptionMode : uint8_t { kAuto, kSwap, kRecompute };

struct SchedulerConfig {
  int32_t max_num_seqs = 64;
  int32_t max_num_batched_tokens = 512;  // >= max_num_seqs, so every decode fits a step
  // Logits rows per step (the runner's StepLimits::max_logits_rows); 0: max_num_seqs.
  // >= max_num_seqs, so every sampling chunk has its row.
  int32_t max_logits_rows = 0;
  // Speculative decoding: logits rows a step may spend on proposed tokens,
  // beyond one per sequence (0: proposals never run).
  int32_t max_draft_rows = 0;
  // Preemption: the swap area's slots (0: recompute only), and kAuto's cost
  // model: one block's round trip (copied out and back in) and one token's
  // prefill, in seconds. Both > 0 when kAuto has slots.
  PreemptionMode preemption_mode = PreemptionMode::kAuto;
  int32_t num_swap_slots = 0;
  double swap_block_seconds = 0.0;
  double recompute_token_seconds = 0.0;

  Status validate() const;
};

// One request's share of a step: tokens [computed, computed + num_tokens), computed = num_computed(request).
struct ScheduledChunk {
  Request* request = nullptr;
  int32_t num_tokens = 0;
  bool samples = false;  // the chunk ends at the last known token: sample the next
  int32_t num_rows = 0;  // logits rows: its prompt rows (Request::prompt_rows), plus one if it samples
  // Speculative decoding: the chunk is a decode followed by the first
  // num_draft of the request's proposed tokens (Request::draft), all scored
  // in this step; num_tokens counts them. 0 for every other chunk.
  int32_t num_draft = 0;
};

struct SchedulerStep {
  std::vector<ScheduledChunk> chunks;  // batch order
  int32_t num_tokens = 0;
  int32_t num_rows = 0;
  int32_t num_preempted = 0;  // swapped out or recomputed
  int32_t num_swapped_out = 0;
  int32_t num_swapped_in = 0;
  // Copies to run before the step's forward, in order (never both in one step).
  std::vector<BlockCopy> swap_out;  // blocks of the requests swapped out now, to their slots
  std::vector<BlockCopy> swap_in;   // slots of the requests swapped in now, to their new blocks
  bool empty() const { return chunks.empty(); }
};

class Scheduler {
 public:
  // PRECOND: both configs validate, blocks.max_num_seqs >= config.max_num_seqs.
  Scheduler(const SchedulerConfig& config, const BlockManagerConfig& blocks);

  // Appends to the waiting queue. PRECOND: status kWaiting, holds no blocks.
  void add(Request* request);
  // Takes the request out of whichever queue holds it and frees its blocks,
  // or its swap slots (finish or abort). The caller sets its final status.
  void remove(Request* request);

  // Plans the next step and reserves its blocks. Valid until the next call.
  const SchedulerStep& schedule();
  // The last schedule()'s plan (until the next call).
  const SchedulerStep& last_step() const { return step_; }

  // Tokens of the request's prompt ++ output whose K/V is cached.
  int64_t num_computed(const Request* r) const { return r->seq >= 0 ? blocks_.seq_len(r->seq) : 0; }
  // Records that the step's chunks were computed: each sequence's length grows
  // by its chunk, and newly full blocks enter the prefix cache. After a successful forward.
  // rejected (empty, or one per chunk): proposed tokens of the chunk that were
  // not accepted; their K/V is dropped (the length grows by num_tokens -
  // rejected) and the blocks past the new length go back, so a rejected
  // token is never cached nor held.
  void commit(const SchedulerStep& step, std::span<const int32_t> rejected = {});

  // Prefix cache counters, in tokens, over admissions (vLLM's
  // prefix_cache_queries / prefix_cache_hits).
  int64_t prefix_cache_queries() const { return prefix_queries_; }
  int64_t prefix_cache_hits() const { return prefix_hits_; }

  const BlockManager& block_manager() const { return blocks_; }
  const std::deque<Request*>& waiting() const { return waiting_; }
  const std::vector<Request*>& running() const { return running_; }
  const std::deque<Request*>& swapped() const { return swapped_; }  // oldest preempted first
  const SwapSpace& swap_space() const { return swap_; }
  int64_t num_preemptions() const { return num_preemptions_; }  // of both kinds
  int64_t num_swap_preemptions() const { return num_swap_preemptions_; }
  int64_t num_swap_ins() const { return num_swap_ins_; }
  int64_t num_swapped_out_blocks() const { return swapped_out_blocks_; }
  int64_t num_swapped_in_blocks() const { return swapped_in_blocks_; }
  // Tokens whose K/V preemption by recompute dropped (to be prefilled again).
  int64_t num_recomputed_tokens() const { return recomputed_tokens_; }
  const SchedulerConfig& config() const { return config_; }

 private:
  void preempt_newest();
  // Whether a victim of len computed tokens holding `held` blocks is swapped out.
  bool should_swap(int64_t len, int32_t held) const;
  // Phase 2's swap-ins; false when the oldest swapped request did not fit (admission then waits).
  bool swap_in_swapped(int64_t& budget, int64_t max_rows);
  void push_chunk(Request* r, int64_t n);
  // Logits rows of a chunk of n tokens from `computed`, and the largest n <= want whose rows fit `rows`.
  static int64_t rows_of(const Request* r, int64_t computed, int64_t n);
  static int64_t fit_rows(const Request* r, int64_t computed, int64_t want, int64_t rows);
  int64_t uncomputed(const Request* r) const { return r->num_tokens() - num_computed(r); }
  bool prefilling(const Request* r) const { return uncomputed(r) > 1; }
  static TokenSeq tokens_of(const Request* r) { return {r->prompt, r->output}; }

  SchedulerConfig config_;
  BlockManager blocks_;
  std::deque<Request*> waiting_;
  std::vector<Request*> running_;  // admission order, oldest first
  std::deque<Request*> swapped_;   // swapped out, oldest preempted first
  SwapSpace swap_;
  SchedulerStep step_;
  int64_t num_preemptions_ = 0, num_swap_preemptions_ = 0, num_swap_ins_ = 0;
  int64_t swapped_out_blocks_ = 0, swapped_in_blocks_ = 0, recomputed_tokens_ = 0;
  int64_t prefix_queries_ = 0, prefix_hits_ = 0;
};

}  // namespace nanoserve
