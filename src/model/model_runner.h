#pragma once
// What the engine needs of a model (docs/engine.md): the shape, the size of
// one KV block, the KV storage created once, and one forward per step.
//
// The runner owns its KV storage, since only it knows the layers, heads, dtype
// and device. The engine's block manager decides which blocks a sequence
// holds; every ForwardBatch carries that (block_tables, slot_mapping), so a
// forward needs nothing but the batch. Runners are named by device: CpuRunner
// (model/runner_cpu.h) and CudaRunner (model/runner_cuda.h), both over the
// family table (model/arch.h); tests use a small fake with the same contract.

#include <cstdint>
#include <optional>
#include <span>

#include "core/status.h"
#include "core/tensor.h"
#include "model/config.h"
#include "step/forward_batch.h"

namespace nanoserve {

// One block's K/V (every layer) moved between the KV pool and the swap area.
struct BlockCopy {
  int32_t block = 0;  // KV pool block id
  int32_t slot = 0;   // swap area slot id
};

// What the engine's cost model assumes of a runner's swap (docs/engine.md,
// "Preemption: swap or recompute"): the rate of one copy direction between
// its KV pool and its swap area, and the rate at which it prefills.
struct SwapCostRates {
  double copy_bytes_per_s = 0.0;
  double prefill_tokens_per_s = 0.0;
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  virtual const ModelConfig& config() const = 0;

  // K+V bytes of one block of block_size tokens over all layers, in the
  // runner's KV dtype.
  virtual int64_t kv_bytes_per_block(int32_t block_size) const = 0;

  // Bytes the runner can give its KV storage when the engine is not told a
  // size (a GPU runner: what --gpu-memory-utilization leaves after the
  // weights and activations); 0 when it has no such budget. See
  // kv_cache_num_blocks (engine/engine.h), the one place the pool is sized.
  virtual int64_t kv_cache_budget_bytes() const { return 0; }

  // False when the storage keeps K/V per sequence rather than per block (the
  // naive storage): blocks cannot be shared, so the engine turns the prefix
  // cache off.
  virtual bool kv_blocks_shareable() const { return true; }

  // Positions before a sliding window's first that this runner's attention may
  // still read (and mask): 0 when it reads exactly the window (the CPU); a
  // kernel that starts at a tile boundary reads up to that much before. The
  // engine releases only blocks wholly before window start - margin
  // (docs/kvcache.md), so everything a kernel reads stays held.
  virtual int64_t window_read_margin() const { return 0; }

  // Creates the runner's KV storage: num_blocks blocks of block_size tokens.
  // Called once by the engine, before the first forward.
  virtual Status init_kv_cache(int32_t num_blocks, int32_t block_size) = 0;

  // ---- Swap area (docs/kvcache.md, "Swapping") ----
  // True when the runner's KV storage is paged and it can swap blocks (false:
  // the engine preempts by recompute only).
  virtual bool can_swap() const { return false; }
  // Creates the swap area: num_slots slots of one block each (kv_bytes_per_block),
  // in host memory. Once, after init_kv_cache; not called when the area is empty.
  virtual Status init_swap_space(int32_t /*num_slots*/) {
    return unimplemented("this runner has no swap area");
  }
  // Copies each listed block's K/V, every layer, out to its slot (swap_out)
  // or from its slot into the listed block (swap_in). Asynchronous where the
  // device has a stream, but ordered before the next forward and every later
  // copy: a block swapped out may be rewritten by the next forward, and a
  // block swapped in is read by it. PRECOND: ids inside the pool and the area.
  virtual Status swap_out(std::span<const BlockCopy> /*copies*/) {
    return unimplemented("this runner has no swap area");
  }
  virtual Status swap_in(std::span<const BlockCopy> /*copies*/) {
    return unimplemented("this runner has no swap area");
  }
  // The rates the engine's choice between swap and recompute assumes.
  virtual SwapCostRates swap_cost_rates() const { return {}; }
  // The swap area's size when the engine is not told one (vLLM's --swap-space default).
  virtual int64_t default_swap_space_bytes() const { return 0; }

  // What one step may hold: the engine validates every batch against these
  // (ForwardBatch::validate) before forward(), once. After init_kv_cache.
  virtual StepLimits step_limits() const = 0;

  // One step. PRECOND: the batch passed validate(step_limits()). Everything
  // it needs is in the batch: tokens, positions, seq_starts, seq_ids,
  // context_lens, block_tables / max_blocks_per_seq, slot_mapping and
  // logits_rows. Returns the logits of batch.logits_rows:
  // [R, vocab] f32 on the host, valid until the next call.
  virtual StatusOr<Tensor> forward(const ForwardBatch& batch) = 0;

  // ---- Overlapped steps (the engine's asynchronous scheduling, docs/engine.md) ----
  // launch() queues one step and may return before it is done; wait() blocks
  // until it is, and returns what forward() would have, with greedy_tokens()
  // and the rest valid from then on. Between the two the caller may do host
  // work but must not call the runner, nor change the batch. Every launch()
  // that returned OK is followed by one wait() before the next launch() (or
  // a swap); one that failed launched nothing. The
  // default runs forward() inside launch(): nothing overlaps, the contract
  // holds.
  virtual Status launch(const ForwardBatch& batch);
  virtual StatusOr<Tensor> wait();
  // True when launch() returns while the device still computes the step: the
  // engine then makes the last step's text and outputs during the next one.
  virtual bool overlaps_steps() const { return false; }

  // The greedy token of each logits row of the last forward (argmax, ties to
  // the lowest id), computed where the logits are; empty when the runner has
  // none. When the batch said need_logits = false, a runner with these may
  // leave the returned logits unwritten.
  virtual std::span<const int32_t> greedy_tokens() const { return {}; }

  // True when the runner draws tokens where the logits are (ops/sample/sample.h).
  // The engine then fills ForwardBatch::sample_rows for a step whose every row
  // the device sampler takes (SamplingParams::device_sampleable), and that
  // step copies back only ids and the logprobs asked for.
  virtual bool samples_on_device() const { return false; }
  // [R] the device's token of each row of the last forward that had
  // sample_rows; kSampleOnHost marks a row the host must draw. Empty otherwise.
  virtual std::span<const int32_t> sampled_tokens() const { return {}; }
  // [R] those rows' logprobs (for rows that asked and were drawn on the device).
  virtual std::span<const SampleRowLogprobs> sampled_logprobs() const { return {}; }
  // Row `row` of the last forward's logits on the host, fetched now, for a row
  // that the device handed back ([vocab], valid until the next forward).
  virtual std::span<const float> logits_row(int32_t /*row*/) { return {}; }

 private:
  std::optional<StatusOr<Tensor>> launched_;  // the default launch()'s result, until wait()
};

}  // namespace nanoserve
