#pragma once
// Paged attention: attention for a batch of sequences whose K/V live in
// fixed-size blocks of a shared pool, found through each sequence's block
// table. No contiguous copy of the history is ever built.
//
// Layout (one layer):
//   k_pool, v_pool  [num_blocks, block_size, n_kv_heads, head_dim] f32
//   The K row of sequence b, position p, kv head h is
//     k_pool + ((block_tables[b * max_blocks_per_seq + p / block_size] * block_size
//                + p % block_size) * n_kv_heads + h) * head_dim
//
// Causality: token t (of sequence b) attends positions [0, positions[t]] of b,
// so a prefill chunk is causal within itself and a decode token sees all.
// GQA: query head qh reads kv head qh / (n_heads / n_kv_heads), as an index.
//
// Entry points:
//   paged_attention_reference  plain loops with f64 accumulation; frozen, the
//                              truth every fast kernel (CPU, CUDA) is held to.
//   paged_attention_cpu        threads over (token tile, kv head) pairs; uses
//                              attend_tile() so it is bitwise identical to the
//                              gather path followed by ordinary CPU attention.

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace nanoserve {

class ThreadPool;

struct PagedAttentionArgs {
  const float* q = nullptr;               // [num_tokens, n_heads, head_dim]
  const float* k_pool = nullptr;          // [num_blocks, block_size, n_kv_heads, head_dim]
  const float* v_pool = nullptr;          // [num_blocks, block_size, n_kv_heads, head_dim]
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq] physical block ids
  const int32_t* context_lens = nullptr;  // [num_seqs] history length incl. this step's tokens
  const int32_t* seq_starts =
      nullptr;  // [num_seqs + 1] sequence b owns tokens [seq_starts[b], seq_starts[b+1])
  const int32_t* positions = nullptr;  // [num_tokens] absolute position; < context_lens of its sequence
  float* out = nullptr;                // [num_tokens, n_heads, head_dim]

  int32_t num_tokens = 0;
  int32_t num_seqs = 0;
  int32_t num_blocks = 0;
  int32_t block_size = 0;
  int32_t max_blocks_per_seq = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  float scale = 1.0f;  // usually 1 / sqrt(head_dim)
  // A sliding window: a token at position p attends [p + 1 - window, p]
  // (attention_window_begin); 0 attends the whole history.
  int32_t window = 0;
  // Soft-capping: each scaled score becomes softcap * tanh(score / softcap)
  // before the softmax (Gemma 2); 0: none.
  float softcap = 0.0f;
  // Attention sinks (gpt-oss), [n_heads] f32: query head h's sink logit joins
  // its softmax's denominator (attention.h); null: none. The CUDA split
  // kernel takes the same (paged_attention_cuda's sinks).
  const float* sinks = nullptr;

  // 16-bit pools, read by paged_attention_cpu only: when kv_dtype is kF16 or
  // kBF16, k_pool16/v_pool16 (same layout) are read instead of k_pool/v_pool,
  // each row widened to f32 exactly before the same reduction.
  DType kv_dtype = DType::kF32;
  const uint16_t* k_pool16 = nullptr;
  const uint16_t* v_pool16 = nullptr;
  // E4M3 pools (kv_dtype kF8E4M3), likewise: each element read as
  // f32(q) * scale (kv_f8_dequantize, core/kv_quant.h) with its pool's scale.
  const uint8_t* k_pool8 = nullptr;
  const uint8_t* v_pool8 = nullptr;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
};

// INVALID_ARGUMENT naming the first inconsistency: dims, seq_starts not
// monotone or not ending at num_tokens, a position outside its context, a
// context longer than its block table, a block id outside the pool.
// Reads every index array, so it is for tests and debug checks, not the hot path.
Status validate_paged_attention_args(const PagedAttentionArgs& args);

// The frozen reference. Aborts (NS_CHECK) on invalid args.
void paged_attention_reference(const PagedAttentionArgs& args);

// Fast CPU kernel. `scores` is scratch of pool.num_threads() rows of
// `scores_stride` floats each; PRECOND: scores_stride >=
// paged_attention_cpu_scores_stride(n_rep, the longest context).
// Each output element's reduction order is fixed (attend_tile.h), independent
// of the thread count, of how the batch is split and of the other tokens of
// a prefill chunk.
// Query rows one item of the CPU kernel attends together (several tokens of a
// sequence times the query heads of a kv head), unless one kv head has more.
inline constexpr int64_t kPagedTileRows = 24;
inline int64_t paged_attention_cpu_scores_stride(int64_t n_rep, int64_t max_context) {
  return (n_rep > kPagedTileRows ? n_rep : kPagedTileRows) * max_context;
}
void paged_attention_cpu(const PagedAttentionArgs& args, ThreadPool& pool, float* scores,
                         int64_t scores_stride);

}  // namespace nanoserve
