#pragma once
// NaiveKVCache: the simplest KV cache, and the reference the paged cache is
// held to. A fixed number of sequence slots, each with room for max_seq_len
// positions, contiguous per layer:
//   k(layer), v(layer)  [max_seqs, n_kv_heads, max_seq_len, head_dim] f32
// ForwardBatch::seq_ids are slot indices in [0, max_seqs). Only the gather read
// (append) is offered; it returns views straight into the slots, no copy.
//
// It is the reference storage behind the same engine loop (--kv-cache naive):
// the engine's block manager still counts blocks, but the naive cache ignores
// the batch's block tables and slots, and keeps each sequence's K/V in slot
// seq_id, so blocks cannot be shared (no prefix caching).
//
// Positions must follow what the slot holds: a step's tokens for slot s sit at
// first, first+1, ..., context_len-1 with first <= seq_len(s) (first < seq_len
// restarts the slot, as a new sequence in a reused slot does from 0).
// free_sequence(s) empties a slot.

#include <cstdint>
#include <vector>

#include "kvcache/kv_cache.h"
#include "model/config.h"

namespace nanoserve {

class NaiveKVCache final : public KVCache {
 public:
  // PRECOND: max_seqs >= 1, max_seq_len >= 1 (NS_CHECK). Allocates
  // 2 * n_layers * max_seqs * n_kv_heads * max_seq_len * head_dim floats.
  NaiveKVCache(const ModelConfig& config, int32_t max_seqs, int64_t max_seq_len);

  // INVALID_ARGUMENT naming the sequence when the batch does not fit: unknown
  // or repeated slot, context past max_seq_len, positions that skip or rewind.
  Status begin_step(const ForwardBatch& batch) override;
  //   k, v: [T, n_kv_heads, head_dim] f32, this step's rows
  const KVHistory& append(int layer, const Tensor& k, const Tensor& v) override;

  void free_sequence(int32_t seq);  // back to length 0
  int64_t seq_len(int32_t seq) const { return lens_.at(static_cast<size_t>(seq)); }
  int32_t max_seqs() const { return max_seqs_; }
  int64_t max_seq_len() const { return max_seq_len_; }

 private:
  int64_t n_layers_, n_kv_heads_, head_dim_;
  int32_t max_seqs_;
  int64_t max_seq_len_;
  std::vector<Tensor> k_, v_;  // [n_layers] of [max_seqs, n_kv_heads, max_seq_len, head_dim]
  std::vector<int64_t> lens_;  // [max_seqs] positions written

  // The current step, copied at begin_step (capacity kept across steps).
  std::vector<int32_t> step_seq_ids_, step_seq_starts_, step_positions_;
  KVHistory history_;  // reused by append()
};

}  // namespace nanoserve
