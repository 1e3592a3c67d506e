#include "step/device_batch.cuh"

#include <algorithm>

#include "core/cuda/cuda_check.cuh"

namespace nanoserve {

// ---- DeviceBatch ------------------------------------------------------------

DeviceBatch::DeviceBatch(int32_t max_tokens, int32_t max_seqs, int32_t max_blocks_per_seq)
    : cap_tokens_(max_tokens), cap_seqs_(max_seqs), cap_blocks_(max_blocks_per_seq) {
  NS_CHECK(max_tokens > 0 && max_seqs > 0 && max_blocks_per_seq > 0) << "DeviceBatch capacity";
  // Each array starts on a 16-byte boundary (4 elements).
  auto take = [&](int64_t n) {
    const int64_t at = total_;
    total_ += (n + 3) / 4 * 4;
    return at;
  };
  // The block tables last: a step copies only the B x max_blocks_per_seq
  // entries it has, not the capacity's.
  off_row_meta_ = take(2 * int64_t{max_tokens});
  off_positions_ = take(max_tokens);
  off_slot_mapping_ = take(max_tokens);
  off_tokens_ = take(max_tokens);
  off_logits_rows_ = take(max_tokens);
  off_decode_rows_ = take(max_tokens);
  off_block_tables_ = take(int64_t{max_seqs} * max_blocks_per_seq);
  dev_buf_ = cuda::empty(DType::kI32, {total_});
  dev_ = dev_buf_.data_as<int32_t>();
  NS_CUDA_CHECK(
      cudaMallocHost(reinterpret_cast<void**>(&host_), static_cast<size_t>(total_) * sizeof(int32_t)));
}

DeviceBatch::~DeviceBatch() {
  if (host_ != nullptr) cudaFreeHost(host_);
}

void DeviceBatch::upload(const ForwardBatch& batch, cuda::Stream stream) {
  const int32_t b = static_cast<int32_t>(batch.seq_starts.size()) - 1;
  const int32_t t = b >= 0 ? batch.seq_starts[b] : 0;
  const int32_t r = static_cast<int32_t>(batch.logits_rows.size());
  NS_CHECK(b >= 1 && b <= cap_seqs_) << "batch of " << b << " sequences, capacity " << cap_seqs_;
  NS_CHECK(t <= cap_tokens_) << t << " tokens, capacity " << cap_tokens_;
  NS_CHECK(r <= cap_tokens_) << r << " logits rows, capacity " << cap_tokens_;
  NS_CHECK(batch.max_blocks_per_seq > 0 && batch.max_blocks_per_seq <= cap_blocks_)
      << "max_blocks_per_seq " << batch.max_blocks_per_seq << ", capacity " << cap_blocks_;
  NS_CHECK(static_cast<int64_t>(batch.block_tables.size()) <= int64_t{b} * batch.max_blocks_per_seq)
      << batch.block_tables.size() << " block-table entries for " << b << " x " << batch.max_blocks_per_seq;
  int32_t* row_meta = host_ + off_row_meta_;
  int32_t* decode_rows = host_ + off_decode_rows_;
  int32_t max_ctx = 0, n_decode = 0;
  for (int32_t i = 0; i < b; ++i) {
    if (batch.seq_starts[i + 1] - batch.seq_starts[i] == 1) decode_rows[n_decode++] = batch.seq_starts[i];
    int32_t first = batch.context_lens[i];
    for (int32_t j = batch.seq_starts[i]; j < batch.seq_starts[i + 1]; ++j) {
      first = std::min(first, batch.positions[j]);
    }
    for (int32_t j = batch.seq_starts[i]; j < batch.seq_starts[i + 1]; ++j) {
      row_meta[2 * j] = i;
      row_meta[2 * j + 1] = first;
    }
    max_ctx = std::max(max_ctx, batch.context_lens[i]);
  }
  num_seqs_ = b;
  num_tokens_ = t;
  num_logits_rows_ = r;
  num_decode_rows_ = n_decode;
  max_blocks_per_seq_ = batch.max_blocks_per_seq;
  max_context_len_ = max_ctx;
  auto put = [&](int64_t off, const std::vector<int32_t>& v) { std::copy(v.begin(), v.end(), host_ + off); };
  put(off_positions_, batch.positions);
  put(off_block_tables_, batch.block_tables);
  put(off_slot_mapping_, batch.slot_mapping);
  put(off_tokens_, batch.tokens);
  put(off_logits_rows_, batch.logits_rows);
  // One copy: everything up to the end of the block tables in use (B rows of
  // the step's max_blocks_per_seq). The token arrays sit at fixed offsets
  // before them, so the copy spans their unused tails too (at most 7 x
  // max_tokens entries); one transfer costs less than several.
  const int64_t end = off_block_tables_ + static_cast<int64_t>(batch.block_tables.size());
  NS_CUDA_CHECK(cudaMemcpyAsync(dev_, host_, static_cast<size_t>(end) * sizeof(int32_t),
                                cudaMemcpyHostToDevice, stream));
}

}  // namespace nanoserve
