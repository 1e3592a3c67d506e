#pragma once
// BlockManager: the host-side bookkeeping of the paged KV cache, owned by the
// scheduler (docs/kvcache.md). It never touches K/V bytes; the model runner's
// KV storage holds those, addressed by the block ids handed out here.
//
// It holds:
//   - block ids and a reference count per block;
//   - each sequence's block table and length (tokens whose K/V is written):
//     the one source of truth for both;
//   - the prefix cache: a full block is found by the hash chain over its
//     tokens, h_i = hash(h_{i-1}, tokens of block i), so a hit on block i means
//     the whole prefix up to it matches. Sequences share a cached block by
//     reference; a block whose last holder leaves stays cached (evictable),
//     and such blocks are evicted least recently used first, only when a block
//     is needed and the free list is empty.
//
// Every block is in exactly one of three states, so after every operation
//   num_free_blocks() + num_in_use_blocks() + num_evictable_blocks() == num_blocks()
// free: on the free list, no contents; in use: ref_count > 0 (cached or not);
// evictable: ref_count == 0, cached, on the LRU list.
//
// A sequence only writes positions >= its length, and a cached prefix is only
// ever whole blocks that end before the last token (attach_cached_prefix), so
// a shared block is never written: no copy-on-write is needed.
//
// Sliding windows (config.sliding_window > 0, every layer of the model slides):
// a token at position p reads positions [p + 1 - W - margin, p], W the window
// and margin what the runner's kernel may read before it (window_read_margin).
// Once a sequence's next positions are all >= its length q, every block
// wholly before q + 1 - W - margin is released: commit and
// attach_cached_prefix do it, so a sequence's table is a released prefix
// (entries -1, num_released(seq) of them) followed by the blocks it holds, and
// num_released(seq) == releasable_blocks(seq_len(seq)) after every operation.
// fill_batch writes the sequence's oldest held block into the released
// entries: a valid id the kernels never read (they start at the window).
//
// Running out of blocks is a normal event (the scheduler preempts), so reserve()
// reports it; a bad handle or block id is a caller bug and aborts (NS_CHECK).
// Nothing here allocates after construction.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "step/forward_batch.h"

namespace nanoserve {

// A sequence's tokens as two pieces (a request's prompt, then its output).
struct TokenSeq {
  std::span<const int32_t> head, tail;
  int64_t size() const { return static_cast<int64_t>(head.size() + tail.size()); }
  int32_t operator[](int64_t i) const {
    const int64_t nh = static_cast<int64_t>(head.size());
    return i < nh ? head[i] : tail[i - nh];
  }
};

struct BlockManagerConfig {
  int32_t num_blocks = 0;   // >= 1
  int32_t block_size = 16;  // tokens per block, >= 1
  int32_t max_num_seqs = 64;
  int64_t max_seq_len = 0;  // longest sequence (sets max_blocks_per_seq); >= 1
  bool enable_prefix_caching = true;
  // Release blocks behind the window: every layer's window in tokens (0:
  // keep everything, as a model with any global layer must), and the
  // positions before a window's start that the runner still reads.
  int64_t sliding_window = 0;
  int64_t window_read_margin = 0;

  // INVALID_ARGUMENT naming the field.
  Status validate() const;
};

class BlockManager {
 public:
  // PRECOND: config.validate() is ok (NS_CHECK).
  explicit BlockManager(const BlockManagerConfig& config);

  // ---- Sequences (handles in [0, max_num_seqs), for ForwardBatch::seq_ids) ----
  // A new empty sequence; RESOURCE_EXHAUSTED when max_num_seqs are live.
  StatusOr<int32_t> add_sequence();
  // Drops the sequence's hold on its blocks: cached ones become evictable
  // (the last block first, so a prefix outlives its tail), the rest free.
  // Blocks it released behind its window went back already.
  void free_sequence(int32_t seq);
  bool is_live(int32_t seq) const;
  int64_t seq_len(int32_t seq) const;       // tokens whose K/V is written
  int64_t seq_capacity(int32_t seq) const;  // tokens its table covers, released prefix included
  // The table, num_released(seq) entries of -1 (released behind the window) then held block ids.
  std::span<const int32_t> block_table(int32_t seq) const;
  int32_t num_released(int32_t seq) const;  // leading table entries released behind the window
  int32_t num_held_blocks(int32_t seq) const;
  // Blocks wholly before what positions >= next_pos read (the window and the
  // margin before it): the released prefix of a sequence of next_pos tokens.
  // 0 without a window.
  int32_t releasable_blocks(int64_t next_pos) const;
  int64_t sliding_window() const { return window_; }
  int64_t window_read_margin() const { return window_margin_; }
  int32_t num_live_seqs() const { return max_num_seqs_ - static_cast<int32_t>(free_handles_.size()); }

  // ---- Prefix cache ----
  // Tokens of `tokens` held by cached blocks: whole blocks of the longest
  // cached prefix, at most size() - 1 tokens (the last token is always
  // computed, since its logits are needed). 0 when caching is off. Changes nothing.
  int64_t cached_prefix_len(const TokenSeq& tokens) const;
  // Gives an empty sequence the blocks of that prefix (one more reference
  // each) and sets its length to cached_prefix_len(tokens), which it returns.
  // With a window, the blocks of the prefix behind it are released at once
  // (touched in the LRU order, so a matched prefix stays young).
  int64_t attach_cached_prefix(int32_t seq, const TokenSeq& tokens);

  // ---- Growth ----
  // Blocks `seq` needs beyond its table to hold n_tokens.
  int32_t blocks_needed(int32_t seq, int64_t n_tokens) const;
  // Blocks a reserve can take: free plus evictable.
  int32_t num_available_blocks() const { return num_free_blocks() + num_evictable_blocks(); }
  bool can_reserve(int32_t seq, int64_t n_tokens) const;
  // Grows seq's table to hold n_tokens, evicting LRU cached blocks when the
  // free list is empty. RESOURCE_EXHAUSTED, changing nothing, when too few
  // blocks are available; INVALID_ARGUMENT past max_seq_len.
  Status reserve(int32_t seq, int64_t n_tokens);
  // After a step wrote tokens [seq_len, new_len) of `tokens`: sets the length
  // and puts the blocks that became full into the prefix cache (a block whose
  // hash another block already holds stays private); then releases the
  // blocks behind the window of new_len.
  // PRECOND: seq_len <= new_len <= seq_capacity, tokens.size() >= new_len.
  void commit(int32_t seq, const TokenSeq& tokens, int64_t new_len);
  // Rolls a sequence back to new_len tokens and gives back the blocks past
  // them (speculative decoding: the K/V of rejected proposals is dropped
  // within the step, and a draft model's cache follows the target's). Slots
  // in [new_len, capacity) of the kept last block are simply rewritten later.
  // PRECOND: new_len <= seq_len, and no cached block is cut: new_len covers
  // every block that entered the prefix cache (only committed, full blocks
  // do), so a shared block is never written; and new_len's window needs no
  // released block (releasable_blocks(new_len) >= num_released).
  void shrink_to(int32_t seq, int64_t new_len);

  // ---- Swapping (docs/kvcache.md, "Swapping") ----
  // Blocks a sequence of len tokens holds between steps: its table less the released prefix.
  int32_t held_blocks_for(int64_t len) const;
  // Gives an empty sequence the state of a swapped-out one of len tokens:
  // the released prefix of len (-1 entries), then held_blocks_for(len) fresh
  // private blocks, whose K/V the caller copies in from the swap area before
  // the next forward; the length len; and the chain hashes of the full blocks
  // of `tokens`, whose held blocks enter the prefix cache where no block holds
  // their hash yet (as commit would). RESOURCE_EXHAUSTED, changing nothing,
  // when too few blocks are available; INVALID_ARGUMENT past max_seq_len.
  // PRECOND: tokens.size() >= len.
  Status restore_sequence(int32_t seq, const TokenSeq& tokens, int64_t len);

  // ---- The step ----
  // Fills batch.max_blocks_per_seq (the step's longest table rounded up to a
  // power of two, at most max_blocks_per_seq()), block_tables ([B *
  // batch.max_blocks_per_seq], -1 past each table's end, the oldest held
  // block in released entries)
  // and slot_mapping ([T], block * block_size + offset) from batch.seq_ids
  // and positions. PRECOND: every position is inside its sequence's held
  // blocks. No allocation once the batch's capacity is reserved.
  void fill_batch(ForwardBatch& batch) const;

  // ---- Counts ----
  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  int32_t max_num_seqs() const { return max_num_seqs_; }
  int32_t max_blocks_per_seq() const { return max_blocks_per_seq_; }
  int64_t max_seq_len() const { return max_seq_len_; }
  bool prefix_caching() const { return prefix_caching_; }
  int32_t num_free_blocks() const { return static_cast<int32_t>(free_list_.size()); }
  int32_t num_in_use_blocks() const { return num_in_use_; }
  int32_t num_evictable_blocks() const { return num_evictable_; }
  int32_t num_cached_blocks() const { return num_cached_; }  // in the hash table, in use or not
  int64_t num_evictions() const { return num_evictions_; }
  int64_t num_window_releases() const { return num_window_releases_; }  // blocks released behind windows
  int32_t ref_count(int32_t block) const;
  bool is_cached(int32_t block) const;

  // Recounts every state from scratch against the counters and the tables;
  // INTERNAL naming the first disagreement. For tests.
  Status check_invariants() const;

 private:
  static constexpr uint64_t kNoHash = 0;  // hash values are never 0 (block_hash forces bit 0)
  static uint64_t block_hash(uint64_t parent, const TokenSeq& tokens, int64_t begin, int64_t n);

  // Lookup of the cached block with chain hash h whose parent and tokens match; -1 if none.
  int32_t find_cached(uint64_t h, uint64_t parent, const TokenSeq& tokens, int64_t begin) const;
  void map_insert(uint64_t h, int32_t block);
  void map_erase(uint64_t h);
  int64_t map_find(uint64_t h) const;  // slot index, or -1

  void lru_push_back(int32_t block);
  void lru_remove(int32_t block);
  int32_t take_block();  // a free block, else the LRU evictable one; ref 1
  void release(int32_t block);
  // Puts seq's blocks that became full into the prefix cache (commit).
  void hash_full_blocks(int32_t seq, const TokenSeq& tokens);
  // Releases seq's blocks behind the window of its length, newest first.
  void release_behind_window(int32_t seq);
  void check_live(int32_t seq, const char* what) const;
  int32_t* row(int32_t seq) { return tables_.data() + static_cast<int64_t>(seq) * max_blocks_per_seq_; }
  const int32_t* row(int32_t seq) const {
    return tables_.data() + static_cast<int64_t>(seq) * max_blocks_per_seq_;
  }

  int32_t num_blocks_ = 0, block_size_ = 0, max_num_seqs_ = 0, max_blocks_per_seq_ = 0;
  int64_t max_seq_len_ = 0;
  bool prefix_caching_ = true;
  int64_t window_ = 0, window_margin_ = 0;

  // Blocks.
  std::vector<int32_t> ref_counts_;           // [num_blocks]
  std::vector<int32_t> free_list_;            // stack; the next take is the back
  std::vector<uint64_t> block_hash_;          // [num_blocks] chain hash if cached, else kNoHash
  std::vector<uint64_t> block_parent_;        // [num_blocks] chain hash of the block before it (cached only)
  std::vector<int32_t> block_tokens_;         // [num_blocks * block_size] tokens of each cached block
  std::vector<int32_t> lru_prev_, lru_next_;  // [num_blocks] evictable list; -1 ends
  int32_t lru_head_ = -1, lru_tail_ = -1;     // head: least recently used
  int32_t num_in_use_ = 0, num_evictable_ = 0, num_cached_ = 0;
  int64_t num_evictions_ = 0;
  int64_t num_window_releases_ = 0;

  // Hash table, open addressing with linear probing: capacity a power of two
  // >= 2 * num_blocks, so it never fills (a block is cached under one hash).
  std::vector<uint64_t> map_keys_;  // kNoHash: empty
  std::vector<int32_t> map_blocks_;
  uint64_t map_mask_ = 0;

  // Sequences, by handle.
  std::vector<int32_t> tables_;        // [max_num_seqs, max_blocks_per_seq]
  std::vector<int32_t> n_blocks_;      // [max_num_seqs] table length, released prefix included
  std::vector<int32_t> n_released_;    // [max_num_seqs] leading entries released behind the window
  std::vector<int64_t> lens_;          // [max_num_seqs]
  std::vector<uint64_t> seq_hashes_;   // [max_num_seqs, max_blocks_per_seq] chain hash of each full block
  std::vector<int32_t> n_hashed_;      // [max_num_seqs] leading full blocks with a chain hash
  std::vector<uint8_t> live_;          // [max_num_seqs]
  std::vector<int32_t> free_handles_;  // stack
};

}  // namespace nanoserve
