#pragma once
// The device batch: a step's ForwardBatch in fixed-capacity device buffers,
// which every CUDA kernel of the step reads (and a captured CUDA graph
// replays against). Plain C++ declarations (no CUDA header); defined in
// device_batch.cu.

#include <cstdint>

#include "core/cuda/device_memory.cuh"
#include "core/tensor.h"
#include "step/forward_batch.h"

namespace nanoserve {

// A step's metadata on the device: what the CUDA kernels read of a ForwardBatch. upload()
// packs every array into one pinned host buffer and queues one copy, so a step
// costs one transfer; every layer's kernels then read it. The host buffer is
// reused, so the caller must not upload again before the previous step's copy
// has run (the model synchronises at the end of each step).
class DeviceBatch {
 public:
  // Capacity: up to max_tokens tokens and max_seqs sequences of up to max_blocks_per_seq blocks.
  DeviceBatch(int32_t max_tokens, int32_t max_seqs, int32_t max_blocks_per_seq);
  ~DeviceBatch();
  DeviceBatch(const DeviceBatch&) = delete;
  DeviceBatch& operator=(const DeviceBatch&) = delete;

  // Queues the copy on `stream`. PRECOND: the batch passed ForwardBatch::validate
  // against limits within this capacity (the engine validates every step once;
  // only the capacity, which guards this buffer, is asserted here).
  void upload(const ForwardBatch& batch, cuda::Stream stream = nullptr);

  int32_t num_tokens() const { return num_tokens_; }
  int32_t num_seqs() const { return num_seqs_; }
  int32_t num_logits_rows() const { return num_logits_rows_; }
  int32_t max_blocks_per_seq() const { return max_blocks_per_seq_; }
  int32_t max_context_len() const { return max_context_len_; }  // over the sequences

  // [T][2]: each token's sequence, and the first position of that sequence in
  // this step (positions before it were written by earlier steps).
  const int32_t* row_meta() const { return dev_ + off_row_meta_; }
  const int32_t* positions() const { return dev_ + off_positions_; }        // [T]
  const int32_t* block_tables() const { return dev_ + off_block_tables_; }  // [B, max_blocks_per_seq]
  const int32_t* slot_mapping() const { return dev_ + off_slot_mapping_; }  // [T]
  const int32_t* tokens() const { return dev_ + off_tokens_; }              // [T]
  const int32_t* logits_rows() const { return dev_ + off_logits_rows_; }    // [R]
  // The rows of the sequences with one row in this step (decode rows), in
  // row order: num_decode_rows() of them.
  const int32_t* decode_rows() const { return dev_ + off_decode_rows_; }
  int32_t num_decode_rows() const { return num_decode_rows_; }
  // The host's (pinned) copies of row_meta and positions, as of the last upload.
  const int32_t* host_row_meta() const { return host_ + off_row_meta_; }
  const int32_t* host_positions() const { return host_ + off_positions_; }

 private:
  int32_t cap_tokens_, cap_seqs_, cap_blocks_;
  int32_t num_tokens_ = 0, num_seqs_ = 0, num_logits_rows_ = 0, num_decode_rows_ = 0, max_blocks_per_seq_ = 0,
          max_context_len_ = 0;
  // One device allocation and one pinned host buffer of the same layout: the
  // arrays at fixed offsets (in int32 elements) sized for the capacity.
  int64_t off_row_meta_ = 0, off_positions_ = 0, off_block_tables_ = 0, off_slot_mapping_ = 0,
          off_tokens_ = 0, off_logits_rows_ = 0, off_decode_rows_ = 0, total_ = 0;
  Tensor dev_buf_;
  int32_t* dev_ = nullptr;
  int32_t* host_ = nullptr;  // pinned
};

}  // namespace nanoserve
