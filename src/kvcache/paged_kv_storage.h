#pragma once
// PagedKVStorage: the K/V bytes of the paged cache on the CPU (docs/kvcache.md).
// The model runner creates it (it knows the layers, heads and dtype); the
// block manager (kvcache/block_manager.h) decides which blocks hold what, and
// the engine passes that in every ForwardBatch (block_tables, slot_mapping).
//
// Per layer one K pool and one V pool, shared by every sequence:
//   k_pool(layer), v_pool(layer)  [num_blocks, block_size, n_kv_heads, head_dim]  f32, f16 or bf16
// (compact GQA: n_kv_heads, never the repeated n_heads). The pools are not
// zero-filled: a slot is always written before any read reaches it.
//
// A step: begin_step(batch) takes the batch's slots and tables and checks them
// against the pool (ids in range, positions inside their contexts), then per
// layer exactly one of the two reads, both starting with the same write
// (this step's f32 K/V rounded to the pool dtype at their slots):
//   append()           then gather every sequence's history, widened to f32,
//                      into a contiguous workspace, for the ordinary attention;
//   paged_attention()  then attend through the block tables (paged_attention_cpu,
//                      which widens each row as it reads it); no copy is built.
// Both leave the pools in the same state and give bitwise-identical outputs
// within one dtype.

#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kvcache/kv_cache.h"
#include "model/config.h"
#include "model/forward_batch.h"

namespace nanoserve {

struct PagedKVStorageOptions {
  int32_t num_blocks = 0;     // >= 1
  int32_t block_size = 16;    // tokens per block
  DType dtype = DType::kF32;  // kF32, kF16 or kBF16
  int64_t max_seq_len = 0;    // longest context a step may attend (sizes the score scratch); >= 1
  int32_t max_num_seqs = 64;  // sequences in one step (sizes the step's arrays)
  bool fused_read = true;     // has_fused_read(); false builds the gather workspace instead
};

class PagedKVStorage final : public KVCache {
 public:
  // INVALID_ARGUMENT naming the option when the options or the model shape
  // cannot make a pool. `pool` runs the reads' threads and must outlive the
  // storage; null means single-threaded.
  static StatusOr<std::unique_ptr<PagedKVStorage>> create(const ModelConfig& config,
                                                          const PagedKVStorageOptions& options,
                                                          ThreadPool* pool);
  // K+V bytes of one block over all layers.
  static int64_t bytes_per_block(const ModelConfig& config, int32_t block_size, DType dtype);

  // ---- KVCache ----
  Status begin_step(const ForwardBatch& batch) override;
  const KVHistory& append(int layer, const Tensor& k, const Tensor& v) override;
  bool has_fused_read() const override { return fused_read_; }
  void paged_attention(int layer, const Tensor& q, const Tensor& k, const Tensor& v, int n_rep, float scale,
                       Tensor& out) override;

  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  DType dtype() const { return dtype_; }
  int64_t pool_bytes() const;  // K+V pools of all layers
  const Tensor& k_pool(int layer) const { return k_pools_[layer]; }
  const Tensor& v_pool(int layer) const { return v_pools_[layer]; }

 private:
  PagedKVStorage() = default;
  // Writes this step's K/V rows of `layer` to their slots; the one write both reads share.
  void write(int layer, const Tensor& k, const Tensor& v);

  int64_t n_layers_ = 0, n_heads_ = 0, n_kv_heads_ = 0, head_dim_ = 0;
  int32_t num_blocks_ = 0, block_size_ = 0;
  int64_t max_seq_len_ = 0;
  DType dtype_ = DType::kF32;
  bool fused_read_ = true;
  ThreadPool* pool_ = nullptr;
  std::unique_ptr<ThreadPool> own_pool_;  // single thread when none was given

  std::vector<Tensor> k_pools_, v_pools_;  // [n_layers] of [num_blocks, block_size, n_kv_heads, head_dim]

  // The current step: the batch itself (it outlives the forward) and what is derived from it.
  const ForwardBatch* step_ = nullptr;
  std::vector<int64_t> gather_offsets_;  // [B + 1] token offset of each sequence in the gather buffers
  std::vector<int32_t> block_starts_;    // [B + 1] prefix sum of blocks to gather

  // Workspaces.
  std::vector<float> scores_;  // fused read: [n_threads, scores_stride_]
  int64_t scores_stride_ = 0;  // n_rep * max_seq_len
  // Gather path: [tokens, n_kv_heads, head_dim] f32, sized to the pool's
  // capacity; grown (once) if shared prefix blocks make a step's histories
  // longer than that. Empty when fused.
  Tensor gather_k_, gather_v_;
  KVHistory history_;  // reused by append()
};

}  // namespace nanoserve
