#pragma once
// One step for many sequences, flattened over tokens in CSR form (docs/architecture.md).
// The scheduler builds it; the engine validates it once against the runner's
// StepLimits; the runner's forward, its KV pools and its kernels then read it
// and check nothing again.

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "step/sample_rows.h"

namespace nanoserve {

// What a runner takes in one step: the sizes its buffers were made for and
// the shape of its KV storage.
struct StepLimits {
  int64_t vocab_size = 0;          // token ids in [0, vocab_size)
  int32_t max_tokens = 0;          // T
  int32_t max_seqs = 0;            // B
  int32_t max_logits_rows = 0;     // R
  int64_t max_context = 0;         // any context_len
  // Paged storage (num_blocks > 0): block ids in [0, num_blocks), slots in
  // [0, num_blocks * block_size), a row stride of at most max_blocks_per_seq.
  // Storage kept per sequence (num_blocks == 0): block_tables and
  // slot_mapping are not read; seq_ids index it, in [0, max_seqs).
  int32_t num_blocks = 0;
  int32_t block_size = 0;
  int32_t max_blocks_per_seq = 0;
  int64_t max_sample_vocab = 0;  // sample_rows only where vocab_size <= this (0: never)
};

struct ForwardBatch {
  std::vector<int32_t> tokens;        // [T] input token ids of every sequence, concatenated
  std::vector<int32_t> positions;     // [T] absolute position of each token
  std::vector<int32_t> seq_starts;    // [B+1] sequence b owns tokens seq_starts[b] .. seq_starts[b+1]
  std::vector<int32_t> seq_ids;       // [B] the cache's handle for each sequence
  std::vector<int32_t> context_lens;  // [B] history length after this step's write
  int32_t max_blocks_per_seq = 0;     // row stride of block_tables
  std::vector<int32_t> block_tables;  // [B * max_blocks_per_seq] physical block ids, in order (paged only)
  std::vector<int32_t> slot_mapping;  // [T] block * block_size + offset of each token's K/V (paged only)
  std::vector<int32_t> logits_rows;   // [R] token rows that need logits, ascending
  // False when every logits row samples plain greedy: a runner that computes
  // greedy_tokens() where the logits are may then skip copying them back.
  bool need_logits = true;
  // Empty, or [R] in logits_rows order: what each row draws when the runner
  // samples on the device (ModelRunner::samples_on_device). The runner then
  // returns sampled_tokens() and copies back only ids (and logprobs).
  std::vector<SampleRowParams> sample_rows;

  // INVALID_ARGUMENT naming the first field that breaks the CSR form or the
  // limits (array lengths, ranges, positions inside their contexts, every
  // block and slot a read or write follows); OK otherwise. The one check of
  // a step: what passes can be read without a bounds check.
  Status validate(const StepLimits& limits) const;

  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t num_seqs() const { return static_cast<int32_t>(seq_ids.size()); }
  int32_t seq_len(int32_t b) const { return seq_starts[b + 1] - seq_starts[b]; }
};

}  // namespace nanoserve
