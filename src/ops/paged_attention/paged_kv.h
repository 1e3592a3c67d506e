#pragma once
// The CPU KV write and gather over one layer's pools, the two halves of the
// paged cache's reads that are not attention itself (docs/kvcache.md):
//   k_pool, v_pool  [num_blocks, block_size, n_kv_heads, head_dim]  f32, f16 or bf16
// (compact GQA: n_kv_heads, never the repeated n_heads).
//
// A step writes its K/V once (paged_kv_write), then reads them back one of two
// ways: paged_attention_cpu straight through the block tables, or
// paged_kv_gather into a contiguous f32 history followed by attention()
// (ops/attention). Both leave the pools in the same state and give
// bitwise-identical outputs within one dtype.
//
// PRECOND for both: the batch passed ForwardBatch::validate against the
// pools' limits (every slot, block id and context inside the pool).

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "ops/attention/attention.h"
#include "step/forward_batch.h"

namespace nanoserve {

// k_pool[slot_mapping[t]] = k[t], v likewise, rounded to the pool dtype.
//   k, v: [T, n_kv_heads, head_dim] f32 contiguous
void paged_kv_write(const Tensor& k, const Tensor& v, const ForwardBatch& batch, const Tensor& k_pool,
                    const Tensor& v_pool);

// Every sequence's history [0, context_lens[b]), widened to f32, into
// contiguous buffers, sequence after sequence: gather_k, gather_v
// [>= sum of context_lens, n_kv_heads, head_dim] f32. Returns the history's
// view (into the buffers) in `hist`. `scratch` holds per-sequence offsets
// between calls (grown once, so a step allocates nothing).
void paged_kv_gather(const Tensor& k_pool, const Tensor& v_pool, const ForwardBatch& batch,
                     const Tensor& gather_k, const Tensor& gather_v, KVHistory& hist, ThreadPool& pool,
                     std::vector<int64_t>& scratch);

}  // namespace nanoserve
