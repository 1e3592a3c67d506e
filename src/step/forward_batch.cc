#include "step/forward_batch.h"

#include <string>

namespace nanoserve {

namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

std::string str(int64_t v) {
  return std::to_string(v);
}

}  // namespace

Status ForwardBatch::validate(const StepLimits& lim) const {
  auto bad = [](const std::string& what) { return invalid_argument("forward batch: " + what); };
  const int64_t T = static_cast<int64_t>(tokens.size()), B = static_cast<int64_t>(seq_ids.size());
  const int64_t R = static_cast<int64_t>(logits_rows.size());
  const bool paged = lim.num_blocks > 0;
  if (T < 1 || B < 1) return bad("empty (" + str(T) + " tokens, " + str(B) + " sequences)");
  if (T > lim.max_tokens) return bad(str(T) + " tokens exceed the runner's " + str(lim.max_tokens));
  if (B > lim.max_seqs) return bad(str(B) + " sequences exceed the runner's " + str(lim.max_seqs));
  if (R > lim.max_logits_rows)
    return bad(str(R) + " logits rows exceed the runner's " + str(lim.max_logits_rows));
  if (static_cast<int64_t>(positions.size()) != T)
    return bad("positions has " + str(positions.size()) + " entries for " + str(T) + " tokens");
  if (static_cast<int64_t>(seq_starts.size()) != B + 1)
    return bad("seq_starts has " + str(seq_starts.size()) + " entries for " + str(B) + " sequences");
  if (static_cast<int64_t>(context_lens.size()) != B)
    return bad("context_lens has " + str(context_lens.size()) + " entries for " + str(B) + " sequences");
  if (seq_starts[0] != 0 || seq_starts[B] != T) return bad("seq_starts must run from 0 to " + str(T));
  if (paged) {
    if (max_blocks_per_seq < 1 || max_blocks_per_seq > lim.max_blocks_per_seq) {
      return bad("max_blocks_per_seq " + str(max_blocks_per_seq) + " outside [1, " +
                 str(lim.max_blocks_per_seq) + "]");
    }
    if (static_cast<int64_t>(slot_mapping.size()) != T)
      return bad("slot_mapping has " + str(slot_mapping.size()) + " entries for " + str(T) + " tokens");
    if (static_cast<int64_t>(block_tables.size()) != B * max_blocks_per_seq) {
      return bad("block_tables has " + str(block_tables.size()) + " entries for " + str(B) + " x " +
                 str(max_blocks_per_seq));
    }
  }
  for (int64_t t = 0; t < T; ++t) {
    if (tokens[t] < 0 || tokens[t] >= lim.vocab_size) {
      return bad("token " + str(t) + " has id " + str(tokens[t]) + " outside the vocabulary of " +
                 str(lim.vocab_size));
    }
  }
  const int64_t num_slots = int64_t{lim.num_blocks} * lim.block_size;
  for (int64_t b = 0; b < B; ++b) {
    const std::string seq = "sequence " + str(b) + ": ";
    const int64_t begin = seq_starts[b], end = seq_starts[b + 1], ctx = context_lens[b];
    if (end < begin || end > T) return bad(seq + "seq_starts not ascending");
    if (ctx < end - begin || ctx > lim.max_context) {
      return bad(seq + "context_len " + str(ctx) + " outside [" + str(end - begin) + ", " +
                 str(lim.max_context) + "]");
    }
    if (!paged && (seq_ids[b] < 0 || seq_ids[b] >= lim.max_seqs))
      return bad(seq + "seq_id " + str(seq_ids[b]) + " outside [0, " + str(lim.max_seqs) + ")");
    for (int64_t t = begin; t < end; ++t) {
      if (positions[t] < 0 || positions[t] >= ctx) {
        return bad(seq + "token " + str(t) + " at position " + str(positions[t]) + " outside its context of " +
                   str(ctx));
      }
    }
    if (!paged) continue;
    if (ceil_div(ctx, lim.block_size) > max_blocks_per_seq)
      return bad(seq + "context " + str(ctx) + " longer than its block table");
    for (int64_t i = 0; i < ceil_div(ctx, lim.block_size); ++i) {
      const int32_t id = block_tables[b * max_blocks_per_seq + i];
      if (id < 0 || id >= lim.num_blocks) {
        return bad(seq + "block_tables[" + str(i) + "] = " + str(id) + " outside the pool of " +
                   str(lim.num_blocks));
      }
    }
    for (int64_t t = begin; t < end; ++t) {
      if (slot_mapping[t] < 0 || slot_mapping[t] >= num_slots) {
        return bad(seq + "slot_mapping[" + str(t) + "] = " + str(slot_mapping[t]) + " outside the pool's " +
                   str(num_slots) + " slots");
      }
    }
  }
  for (int32_t r : logits_rows) {
    if (r < 0 || r >= T) return bad("logits row " + str(r) + " outside the " + str(T) + " tokens");
  }
  if (!sample_rows.empty()) {
    if (static_cast<int64_t>(sample_rows.size()) != R)
      return bad("sample_rows has " + str(sample_rows.size()) + " entries for " + str(R) + " logits rows");
    if (lim.vocab_size > lim.max_sample_vocab) {
      return bad("sample_rows: the runner samples on the device a vocabulary of at most " +
                 str(lim.max_sample_vocab));
    }
  }
  return Status::ok_status();
}

}  // namespace nanoserve
