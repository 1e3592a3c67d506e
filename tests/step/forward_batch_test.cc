// ForwardBatch::validate, the step's one check: a well-formed batch passes,
// and each broken field is refused by name, paged and per sequence.

#include "step/forward_batch.h"

#include <gtest/gtest.h>

#include <string>

namespace nanoserve {
namespace {

StepLimits paged_limits() {
  StepLimits l;
  l.vocab_size = 100;
  l.max_tokens = 16;
  l.max_seqs = 4;
  l.max_logits_rows = 4;
  l.max_context = 64;
  l.num_blocks = 8;
  l.block_size = 4;
  l.max_blocks_per_seq = 16;
  return l;
}

// Two sequences: a 3-token prefill in blocks {2}, and a decode at position 5 in blocks {0, 1}.
ForwardBatch good_batch() {
  ForwardBatch b;
  b.tokens = {5, 6, 7, 8};
  b.positions = {0, 1, 2, 5};
  b.seq_starts = {0, 3, 4};
  b.seq_ids = {0, 1};
  b.context_lens = {3, 6};
  b.max_blocks_per_seq = 2;
  b.block_tables = {2, -1, 0, 1};
  b.slot_mapping = {8, 9, 10, 5};
  b.logits_rows = {2, 3};
  return b;
}

void expect_refused(const ForwardBatch& b, const StepLimits& l, const std::string& what) {
  const Status st = b.validate(l);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << what;
  EXPECT_NE(st.message().find(what), std::string::npos) << "wanted '" << what << "' in: " << st.message();
}

TEST(ForwardBatch, AWellFormedBatchPasses) {
  EXPECT_TRUE(good_batch().validate(paged_limits()).ok());
}

TEST(ForwardBatch, EachBrokenFieldIsRefusedByName) {
  const StepLimits l = paged_limits();
  ForwardBatch b = good_batch();
  b.tokens[1] = 100;
  expect_refused(b, l, "outside the vocabulary");
  b = good_batch();
  b.tokens[1] = -1;
  expect_refused(b, l, "outside the vocabulary");
  b = good_batch();
  b.positions.pop_back();
  expect_refused(b, l, "positions has 3 entries");
  b = good_batch();
  b.seq_starts = {0, 4, 3};
  expect_refused(b, l, "seq_starts");
  b = good_batch();
  b.context_lens[1] = 65;
  expect_refused(b, l, "context_len 65");
  b = good_batch();
  b.context_lens[0] = 2;  // fewer than its 3 tokens
  expect_refused(b, l, "context_len 2");
  b = good_batch();
  b.positions[3] = 6;
  expect_refused(b, l, "position 6 outside its context");
  b = good_batch();
  b.block_tables[2] = 8;
  expect_refused(b, l, "block_tables[0] = 8");
  b = good_batch();
  b.slot_mapping[0] = 32;
  expect_refused(b, l, "slot_mapping[0] = 32");
  b = good_batch();
  b.slot_mapping[0] = -1;
  expect_refused(b, l, "slot_mapping[0] = -1");
  b = good_batch();
  b.block_tables.pop_back();
  expect_refused(b, l, "block_tables has 3 entries");
  b = good_batch();
  b.context_lens[1] = 9;  // needs 3 blocks, the table holds 2
  b.positions[3] = 8;
  expect_refused(b, l, "longer than its block table");
  b = good_batch();
  b.max_blocks_per_seq = 17;
  expect_refused(b, l, "max_blocks_per_seq 17");
  b = good_batch();
  b.logits_rows = {4};
  expect_refused(b, l, "logits row 4");
  b = good_batch();
  b.sample_rows.resize(1);
  expect_refused(b, l, "sample_rows has 1 entries");
  b = good_batch();
  b.sample_rows.resize(2);
  expect_refused(b, l, "samples on the device a vocabulary of at most 0");
}

TEST(ForwardBatch, SizesBeyondTheRunnersAreRefused) {
  StepLimits l = paged_limits();
  l.max_tokens = 3;
  expect_refused(good_batch(), l, "4 tokens exceed the runner's 3");
  l = paged_limits();
  l.max_seqs = 1;
  expect_refused(good_batch(), l, "2 sequences exceed the runner's 1");
  l = paged_limits();
  l.max_logits_rows = 1;
  expect_refused(good_batch(), l, "2 logits rows exceed the runner's 1");
  ForwardBatch empty;
  empty.seq_starts = {0};
  expect_refused(empty, paged_limits(), "empty");
}

// Storage kept per sequence reads neither block tables nor slots; its rows are the seq_ids.
TEST(ForwardBatch, PerSequenceStorageChecksSeqIdsNotBlocks) {
  StepLimits l = paged_limits();
  l.num_blocks = 0;
  ForwardBatch b = good_batch();
  b.block_tables.clear();
  b.slot_mapping.clear();
  EXPECT_TRUE(b.validate(l).ok());
  b.seq_ids[1] = 4;
  expect_refused(b, l, "seq_id 4 outside [0, 4)");
}

}  // namespace
}  // namespace nanoserve
