#pragma once
// The CPU KV write and gather over one layer's pools, the two halves of the
// paged cache's reads that are not attention itself (docs/kvcache.md):
//   k_pool, v_pool  [num_blocks, block_size, n_kv_heads, head_dim]  f32, f16, bf16
//                   or f8e4m3 (with the layer's KvScales, core/kv_quant.h)
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

#include "core/kv_quant.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "ops/attention/attention.h"
#include "step/forward_batch.h"

namespace nanoserve {

// k_pool[slot_mapping[t]] = k[t], v likewise, rounded to the pool dtype (an
// fp8 pool: each element bf16-rounded first, as the CUDA write takes it, then
// kv_f8_quantize'd with its scale; only an fp8 pool reads `scales`).
//   k, v: [T, n_kv_heads, head_dim] f32 contiguous
void paged_kv_write(const Tensor& k, const Tensor& v, const ForwardBatch& batch, const Tensor& k_pool,
                    const Tensor& v_pool, const KvScales& scales = {});

// Every sequence's history [0, context_lens[b]), widened to f32, into
// contiguous buffers, sequence after sequence: gather_k, gather_v
// [>= sum of context_lens, n_kv_heads, head_dim] f32. Returns the history's
// view (into the buffers) in `hist`. `scratch` holds per-sequence offsets
// between calls (grown once, so a step allocates nothing).
// An fp8 pool's elements are read as kv_f8_dequantize with `scales`.
void paged_kv_gather(const Tensor& k_pool, const Tensor& v_pool, const ForwardBatch& batch,
                     const Tensor& gather_k, const Tensor& gather_v, KVHistory& hist, ThreadPool& pool,
                     std::vector<int64_t>& scratch, const KvScales& scales = {});

}  // namespace nanoserve
