#include "kvcache/naive_kv_cache.h"

#include <cstring>
#include <string>

namespace nanoserve {

NaiveKVCache::NaiveKVCache(const ModelConfig& config, int32_t max_seqs, int64_t max_seq_len)
    : n_layers_(config.n_layers),
      n_kv_heads_(config.n_kv_heads),
      head_dim_(config.head_dim),
      max_seqs_(max_seqs),
      max_seq_len_(max_seq_len),
      lens_(static_cast<size_t>(max_seqs), 0) {
  NS_CHECK(max_seqs >= 1 && max_seq_len >= 1) << "naive kv cache of " << max_seqs << " x " << max_seq_len;
  for (int64_t l = 0; l < n_layers_; ++l) {
    k_.push_back(Tensor::empty(DType::kF32, {max_seqs_, n_kv_heads_, max_seq_len_, head_dim_}));
    v_.push_back(Tensor::empty(DType::kF32, {max_seqs_, n_kv_heads_, max_seq_len_, head_dim_}));
  }
  history_.k.reserve(static_cast<size_t>(max_seqs));
  history_.v.reserve(static_cast<size_t>(max_seqs));
  history_.pos_stride = head_dim_;
  history_.head_stride = max_seq_len_ * head_dim_;
}

Status NaiveKVCache::begin_step(const ForwardBatch& batch) {
  const int32_t T = batch.num_tokens(), B = batch.num_seqs();
  if (static_cast<int32_t>(batch.positions.size()) != T ||
      static_cast<int32_t>(batch.seq_starts.size()) != B + 1 ||
      static_cast<int32_t>(batch.context_lens.size()) != B || batch.seq_starts[0] != 0 ||
      batch.seq_starts[B] != T) {
    return invalid_argument("naive kv cache: batch arrays disagree (tokens " + std::to_string(T) +
                            ", positions " + std::to_string(batch.positions.size()) + ", seq_starts " +
                            std::to_string(batch.seq_starts.size()) + ", seq_ids " + std::to_string(B) +
                            ", context_lens " + std::to_string(batch.context_lens.size()) + ")");
  }
  // Validate everything before changing anything.
  for (int32_t b = 0; b < B; ++b) {
    const int32_t seq = batch.seq_ids[b];
    auto where = [&] {
      return "naive kv cache: batch sequence " + std::to_string(b) + " (slot " + std::to_string(seq) + "): ";
    };
    if (seq < 0 || seq >= max_seqs_) return invalid_argument(where() + "no such slot");
    for (int32_t c = 0; c < b; ++c) {
      if (batch.seq_ids[c] == seq) return invalid_argument(where() + "appears twice in one step");
    }
    const int32_t begin = batch.seq_starts[b], end = batch.seq_starts[b + 1];
    if (end < begin) return invalid_argument(where() + "seq_starts not monotone");
    const int64_t ctx = batch.context_lens[b];
    if (ctx > max_seq_len_) {
      return invalid_argument(where() + "context_len " + std::to_string(ctx) + " exceeds max_seq_len " +
                              std::to_string(max_seq_len_));
    }
    const int64_t first = ctx - (end - begin);
    // A step continues the sequence, or restarts it from an earlier position
    // (a new sequence in a reused slot starts at 0): everything before `first` was written.
    if (first < 0 || first > lens_[seq]) {
      return invalid_argument(where() + "context_len " + std::to_string(ctx) + " with " +
                              std::to_string(end - begin) + " new tokens does not continue the " +
                              std::to_string(lens_[seq]) + " positions written");
    }
    for (int32_t t = begin; t < end; ++t) {
      if (batch.positions[t] != first + (t - begin)) {
        return invalid_argument(where() + "token " + std::to_string(t) + " has position " +
                                std::to_string(batch.positions[t]) + ", expected " +
                                std::to_string(first + (t - begin)));
      }
    }
  }
  for (int32_t b = 0; b < B; ++b) lens_[batch.seq_ids[b]] = batch.context_lens[b];
  step_seq_ids_.assign(batch.seq_ids.begin(), batch.seq_ids.end());
  step_seq_starts_.assign(batch.seq_starts.begin(), batch.seq_starts.end());
  step_positions_.assign(batch.positions.begin(), batch.positions.end());
  return Status::ok_status();
}

const KVHistory& NaiveKVCache::append(int layer, const Tensor& k, const Tensor& v) {
  NS_CHECK(layer >= 0 && layer < n_layers_) << "layer " << layer;
  const int64_t T = static_cast<int64_t>(step_positions_.size());
  NS_CHECK(k.numel() == T * n_kv_heads_ * head_dim_ && v.numel() == k.numel())
      << "k" << k.shape_string() << " v" << v.shape_string() << " for " << T << " tokens";
  const int64_t slot_stride = n_kv_heads_ * max_seq_len_ * head_dim_;
  float* kc = k_[layer].data_as<float>();
  float* vc = v_[layer].data_as<float>();
  const float* ks = k.data_as<const float>();
  const float* vs = v.data_as<const float>();
  const size_t row_bytes = static_cast<size_t>(head_dim_) * sizeof(float);
  history_.k.clear();
  history_.v.clear();
  for (size_t b = 0; b < step_seq_ids_.size(); ++b) {
    const int64_t base = step_seq_ids_[b] * slot_stride;
    for (int32_t t = step_seq_starts_[b]; t < step_seq_starts_[b + 1]; ++t) {
      for (int64_t h = 0; h < n_kv_heads_; ++h) {
        const int64_t dst = base + (h * max_seq_len_ + step_positions_[t]) * head_dim_;
        const int64_t src = (t * n_kv_heads_ + h) * head_dim_;
        std::memcpy(kc + dst, ks + src, row_bytes);
        std::memcpy(vc + dst, vs + src, row_bytes);
      }
    }
    history_.k.push_back(kc + base);
    history_.v.push_back(vc + base);
  }
  return history_;
}

void NaiveKVCache::free_sequence(int32_t seq) {
  NS_CHECK(seq >= 0 && seq < max_seqs_) << "slot " << seq;
  lens_[seq] = 0;
}

}  // namespace nanoserve
