#pragma once
// PagedKVCache: the KV cache in fixed-size blocks (docs/architecture.md).
//
// Per layer one K pool and one V pool, shared by every sequence:
//   k_pool(layer), v_pool(layer)  [num_blocks, block_size, n_kv_heads, head_dim] f32
// (compact GQA: n_kv_heads, never the repeated n_heads). Each sequence owns a
// block table, the physical blocks that hold its positions in order; it grows
// in begin_step when the step's tokens cross into a new block.
//
// A step: begin_step(batch) allocates blocks and computes the slot of every
// token (block * block_size + offset) from seq_ids and positions; then, per
// layer, exactly one of the two reads, both starting with the same write:
//   append()           scatter K/V to their slots, then gather every sequence's
//                      history into a contiguous workspace (allocated up front)
//                      for the model's ordinary attention;
//   paged_attention()  scatter K/V, then attend through the block tables
//                      (paged_attention_cpu); no contiguous copy is built.
// Both leave the cache in the same state and give bitwise-identical outputs.
//
// Sequence lifecycle (the engine drives it): add_sequence() returns a handle
// for ForwardBatch::seq_ids; reserve() grows a sequence ahead of a step and
// fails with RESOURCE_EXHAUSTED, changing nothing, when blocks run out (the
// scheduler then preempts); free_sequence() returns every block.
// Invariant: num_free_blocks() + num_used_blocks() == num_blocks().

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kvcache/block_allocator.h"
#include "kvcache/kv_cache.h"
#include "model/config.h"
#include "model/forward_batch.h"

namespace nanoserve {

struct PagedKVCacheOptions {
  int32_t block_size = 16;  // tokens per block
  // Pool size: the first of these that is > 0 decides.
  int32_t num_blocks = 0;                 // blocks per layer
  int64_t max_tokens = 0;                 // token budget, rounded up to whole blocks
  int64_t max_bytes = 0;                  // byte budget for K+V of all layers, rounded down to whole blocks
  int32_t max_num_seqs = 64;              // live sequences (handles 0 .. max_num_seqs-1)
  int32_t max_num_batched_tokens = 4096;  // tokens in one step
  int64_t max_seq_len = 0;  // longest sequence; 0 = the model's context length, capped by the pool
  bool fused_read = true;   // has_fused_read(); false builds the gather workspace instead
};

class PagedKVCache final : public KVCache {
 public:
  // INVALID_ARGUMENT naming the option when the options or the model shape
  // cannot make a cache. `pool` runs the fused read's threads and must outlive
  // the cache; null means single-threaded.
  static StatusOr<std::unique_ptr<PagedKVCache>> create(const ModelConfig& config,
                                                        const PagedKVCacheOptions& options, ThreadPool* pool);

  // ---- KVCache ----
  Status begin_step(const ForwardBatch& batch) override;
  const KVHistory& append(int layer, const Tensor& k, const Tensor& v) override;
  bool has_fused_read() const override { return fused_read_; }
  void paged_attention(int layer, const Tensor& q, const Tensor& k, const Tensor& v, int n_rep, float scale,
                       Tensor& out) override;

  // ---- Sequence lifecycle ----
  // A new empty sequence's handle; RESOURCE_EXHAUSTED when max_num_seqs are live.
  StatusOr<int32_t> add_sequence();
  // Makes `seq` hold at least n_tokens positions. RESOURCE_EXHAUSTED, with
  // nothing allocated, when the pool lacks the blocks; INVALID_ARGUMENT past max_seq_len.
  Status reserve(int32_t seq, int64_t n_tokens);
  // Returns all of seq's blocks; the handle may be handed out again.
  void free_sequence(int32_t seq);

  // Blocks `seq` still needs to hold n_tokens positions (0 if it already does).
  int32_t blocks_needed(int32_t seq, int64_t n_tokens) const;
  bool can_reserve(int32_t seq, int64_t n_tokens) const;
  // Would a new sequence of n_tokens fit in the free blocks now?
  bool can_allocate(int64_t n_tokens) const;
  bool is_live(int32_t seq) const;
  int64_t seq_len(int32_t seq) const;       // positions written (after the last begin_step)
  int64_t seq_capacity(int32_t seq) const;  // positions its blocks can hold
  std::span<const int32_t> block_table(int32_t seq) const;

  // ---- Usage ----
  int32_t block_size() const { return block_size_; }
  int32_t num_blocks() const { return allocator_.num_blocks(); }
  int32_t num_free_blocks() const { return allocator_.num_free(); }
  int32_t num_used_blocks() const { return allocator_.num_used(); }
  int32_t num_live_seqs() const { return max_num_seqs_ - static_cast<int32_t>(free_handles_.size()); }
  int32_t max_num_seqs() const { return max_num_seqs_; }
  int32_t max_blocks_per_seq() const { return max_blocks_per_seq_; }
  int64_t max_seq_len() const { return max_seq_len_; }
  int64_t pool_bytes() const;                                                     // K+V pools of all layers
  static int64_t bytes_per_block(const ModelConfig& config, int32_t block_size);  // all layers, K+V
  const BlockAllocator& allocator() const { return allocator_; }

  // ---- The current step, after begin_step ----
  const Tensor& k_pool(int layer) const { return k_pools_[layer]; }
  const Tensor& v_pool(int layer) const { return v_pools_[layer]; }
  std::span<const int32_t> slot_mapping() const;       // [T]
  std::span<const int32_t> step_block_tables() const;  // [B * max_blocks_per_seq], -1 past each table's end
  // Copies the step's block tables and slot mapping into the batch (for
  // kernels that read them from the ForwardBatch). Allocates: not for the CPU hot path.
  void fill_batch_tables(ForwardBatch& batch) const;

 private:
  PagedKVCache() = default;
  // Scatters this step's K/V rows of `layer` to their slots; the one write both reads share.
  void write(int layer, const Tensor& k, const Tensor& v);
  int32_t* table_row(int32_t seq) { return tables_.data() + static_cast<int64_t>(seq) * max_blocks_per_seq_; }
  const int32_t* table_row(int32_t seq) const {
    return tables_.data() + static_cast<int64_t>(seq) * max_blocks_per_seq_;
  }
  void check_live(int32_t seq, const char* what) const;

  // Shape.
  int64_t n_layers_ = 0, n_heads_ = 0, n_kv_heads_ = 0, head_dim_ = 0;
  int32_t block_size_ = 0;
  int32_t max_num_seqs_ = 0, max_num_batched_tokens_ = 0, max_blocks_per_seq_ = 0;
  int64_t max_seq_len_ = 0;
  bool fused_read_ = true;
  ThreadPool* pool_ = nullptr;
  std::unique_ptr<ThreadPool> own_pool_;  // single thread when none was given

  // Storage.
  BlockAllocator allocator_{0};
  std::vector<Tensor> k_pools_, v_pools_;  // [n_layers] of [num_blocks, block_size, n_kv_heads, head_dim]

  // Sequences, indexed by handle.
  std::vector<int32_t> tables_;        // [max_num_seqs, max_blocks_per_seq] physical block ids
  std::vector<int32_t> n_blocks_;      // [max_num_seqs] blocks in each table
  std::vector<int64_t> lens_;          // [max_num_seqs] positions written
  std::vector<uint8_t> live_;          // [max_num_seqs]
  std::vector<int32_t> free_handles_;  // stack of unused handles

  // The current step (buffers sized at create, never grown).
  bool in_step_ = false;
  int32_t step_tokens_ = 0, step_seqs_ = 0;
  std::vector<int32_t> step_slots_;         // [max_num_batched_tokens]
  std::vector<int32_t> step_tables_;        // [max_num_seqs * max_blocks_per_seq]
  std::vector<int32_t> step_context_lens_;  // [max_num_seqs]
  std::vector<int32_t> step_seq_starts_;    // [max_num_seqs + 1]
  std::vector<int32_t> step_positions_;     // [max_num_batched_tokens]
  std::vector<int64_t>
      step_gather_offsets_;  // [max_num_seqs + 1] token offset of each sequence in the gather buffers
  std::vector<int32_t> step_block_starts_;  // [max_num_seqs + 1] prefix sum of blocks to gather

  // Workspaces.
  std::vector<float> scores_;  // fused read: [n_threads, scores_stride_]
  int64_t scores_stride_ = 0;  // n_rep * max_seq_len
  Tensor gather_k_,
      gather_v_;       // gather path: [num_blocks * block_size, n_kv_heads, head_dim]; empty if fused
  KVHistory history_;  // reused by append()
};

}  // namespace nanoserve
