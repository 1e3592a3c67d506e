#pragma once
// One step for many sequences, flattened over tokens in CSR form (docs/architecture.md).
// The scheduler builds it; the model and the KV cache read it.

#include <cstdint>
#include <vector>

#include "ops/sample/sample.h"

namespace nanoserve {

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

  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t num_seqs() const { return static_cast<int32_t>(seq_ids.size()); }
  int32_t seq_len(int32_t b) const { return seq_starts[b + 1] - seq_starts[b]; }
};

}  // namespace nanoserve
