#include "kvcache/paged_kv_cache.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "core/check.h"
#include "ops/paged_attention/paged_attention.h"

namespace nanoserve {

namespace {
int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

int64_t PagedKVCache::bytes_per_block(const ModelConfig& c, int32_t block_size) {
  return c.n_layers * 2 * static_cast<int64_t>(block_size) * c.n_kv_heads * c.head_dim *
         static_cast<int64_t>(sizeof(float));
}

StatusOr<std::unique_ptr<PagedKVCache>> PagedKVCache::create(const ModelConfig& config,
                                                             const PagedKVCacheOptions& o, ThreadPool* pool) {
  if (config.n_layers <= 0 || config.n_kv_heads <= 0 || config.head_dim <= 0 || config.n_heads <= 0 ||
      config.n_heads % config.n_kv_heads != 0) {
    return invalid_argument("paged kv cache: bad model shape (n_layers " + std::to_string(config.n_layers) +
                            ", n_heads " + std::to_string(config.n_heads) + ", n_kv_heads " +
                            std::to_string(config.n_kv_heads) + ", head_dim " +
                            std::to_string(config.head_dim) + ")");
  }
  if (o.block_size <= 0 || o.block_size > 4096) {
    return invalid_argument("paged kv cache: block_size " + std::to_string(o.block_size) +
                            " outside [1, 4096]");
  }
  if (o.max_num_seqs <= 0) return invalid_argument("paged kv cache: max_num_seqs must be > 0");
  if (o.max_num_batched_tokens <= 0)
    return invalid_argument("paged kv cache: max_num_batched_tokens must be > 0");
  if (o.num_blocks < 0 || o.max_tokens < 0 || o.max_bytes < 0 || o.max_seq_len < 0) {
    return invalid_argument("paged kv cache: negative num_blocks/max_tokens/max_bytes/max_seq_len");
  }
  int64_t num_blocks = 0;
  if (o.num_blocks > 0) {
    num_blocks = o.num_blocks;
  } else if (o.max_tokens > 0) {
    num_blocks = ceil_div(o.max_tokens, o.block_size);
  } else if (o.max_bytes > 0) {
    num_blocks = o.max_bytes / bytes_per_block(config, o.block_size);
    if (num_blocks == 0) {
      return invalid_argument("paged kv cache: max_bytes " + std::to_string(o.max_bytes) +
                              " is less than one block (" +
                              std::to_string(bytes_per_block(config, o.block_size)) + " bytes)");
    }
  } else {
    return invalid_argument("paged kv cache: set one of num_blocks, max_tokens, max_bytes");
  }
  // Slots are int32 (slot_mapping), so the pool must have fewer than 2^31 of them.
  if (num_blocks * o.block_size > std::numeric_limits<int32_t>::max()) {
    return invalid_argument("paged kv cache: " + std::to_string(num_blocks) + " blocks of " +
                            std::to_string(o.block_size) + " tokens exceed 2^31 slots");
  }
  const int64_t capacity = num_blocks * o.block_size;
  int64_t max_seq_len =
      o.max_seq_len > 0 ? o.max_seq_len : (config.context_length > 0 ? config.context_length : capacity);
  max_seq_len = std::min(max_seq_len, capacity);

  auto c = std::unique_ptr<PagedKVCache>(new PagedKVCache());
  c->n_layers_ = config.n_layers;
  c->n_heads_ = config.n_heads;
  c->n_kv_heads_ = config.n_kv_heads;
  c->head_dim_ = config.head_dim;
  c->block_size_ = o.block_size;
  c->max_num_seqs_ = o.max_num_seqs;
  c->max_num_batched_tokens_ = o.max_num_batched_tokens;
  c->max_seq_len_ = max_seq_len;
  c->max_blocks_per_seq_ = static_cast<int32_t>(ceil_div(max_seq_len, o.block_size));
  c->fused_read_ = o.fused_read;
  if (pool == nullptr) {
    c->own_pool_ = std::make_unique<ThreadPool>(1);
    pool = c->own_pool_.get();
  }
  c->pool_ = pool;

  c->allocator_ = BlockAllocator(static_cast<int32_t>(num_blocks));
  const std::vector<int64_t> pool_shape = {num_blocks, o.block_size, config.n_kv_heads, config.head_dim};
  for (int64_t l = 0; l < config.n_layers; ++l) {
    c->k_pools_.push_back(Tensor::zeros(DType::kF32, pool_shape));
    c->v_pools_.push_back(Tensor::zeros(DType::kF32, pool_shape));
  }

  const int64_t n_seqs = o.max_num_seqs;
  c->tables_.assign(n_seqs * c->max_blocks_per_seq_, -1);
  c->n_blocks_.assign(n_seqs, 0);
  c->lens_.assign(n_seqs, 0);
  c->live_.assign(n_seqs, 0);
  for (int32_t s = o.max_num_seqs - 1; s >= 0; --s) c->free_handles_.push_back(s);

  c->step_slots_.assign(o.max_num_batched_tokens, -1);
  c->step_positions_.assign(o.max_num_batched_tokens, 0);
  c->step_tables_.assign(n_seqs * c->max_blocks_per_seq_, -1);
  c->step_context_lens_.assign(n_seqs, 0);
  c->step_seq_starts_.assign(n_seqs + 1, 0);
  c->step_gather_offsets_.assign(n_seqs + 1, 0);
  c->step_block_starts_.assign(n_seqs + 1, 0);

  if (o.fused_read) {
    c->scores_stride_ = paged_attention_cpu_scores_stride(config.n_heads / config.n_kv_heads, max_seq_len);
    c->scores_.assign(static_cast<size_t>(pool->num_threads()) * c->scores_stride_, 0.0f);
  } else {
    c->gather_k_ = Tensor::empty(DType::kF32, {capacity, config.n_kv_heads, config.head_dim});
    c->gather_v_ = Tensor::empty(DType::kF32, {capacity, config.n_kv_heads, config.head_dim});
    c->history_.k.reserve(n_seqs);
    c->history_.v.reserve(n_seqs);
  }
  return c;
}

int64_t PagedKVCache::pool_bytes() const {
  int64_t total = 0;
  for (size_t l = 0; l < k_pools_.size(); ++l) total += k_pools_[l].nbytes() + v_pools_[l].nbytes();
  return total;
}

// ---- Sequence lifecycle ----

void PagedKVCache::check_live(int32_t seq, const char* what) const {
  NS_CHECK(seq >= 0 && seq < max_num_seqs_ && live_[seq]) << what << " of unknown sequence handle " << seq;
}

bool PagedKVCache::is_live(int32_t seq) const {
  return seq >= 0 && seq < max_num_seqs_ && live_[seq];
}

StatusOr<int32_t> PagedKVCache::add_sequence() {
  if (free_handles_.empty()) {
    return resource_exhausted("paged kv cache: all " + std::to_string(max_num_seqs_) +
                              " sequence slots in use");
  }
  const int32_t seq = free_handles_.back();
  free_handles_.pop_back();
  live_[seq] = 1;
  n_blocks_[seq] = 0;
  lens_[seq] = 0;
  return seq;
}

int32_t PagedKVCache::blocks_needed(int32_t seq, int64_t n_tokens) const {
  check_live(seq, "blocks_needed");
  const int64_t need = ceil_div(n_tokens, block_size_) - n_blocks_[seq];
  return need > 0 ? static_cast<int32_t>(std::min<int64_t>(need, std::numeric_limits<int32_t>::max())) : 0;
}

bool PagedKVCache::can_reserve(int32_t seq, int64_t n_tokens) const {
  return n_tokens <= max_seq_len_ && blocks_needed(seq, n_tokens) <= num_free_blocks();
}

bool PagedKVCache::can_allocate(int64_t n_tokens) const {
  return n_tokens <= max_seq_len_ && ceil_div(n_tokens, block_size_) <= num_free_blocks();
}

Status PagedKVCache::reserve(int32_t seq, int64_t n_tokens) {
  check_live(seq, "reserve");
  if (n_tokens > max_seq_len_) {
    return invalid_argument("paged kv cache: sequence of " + std::to_string(n_tokens) +
                            " tokens exceeds max_seq_len " + std::to_string(max_seq_len_));
  }
  const int32_t need = blocks_needed(seq, n_tokens);
  if (need > num_free_blocks()) {
    return resource_exhausted("paged kv cache: " + std::to_string(need) + " blocks needed, " +
                              std::to_string(num_free_blocks()) + " free");
  }
  int32_t* row = table_row(seq);
  for (int32_t i = 0; i < need; ++i) {
    const std::optional<int32_t> blk = allocator_.allocate();
    NS_CHECK(blk.has_value()) << "allocator ran dry after a free-count check";
    row[n_blocks_[seq]++] = *blk;
  }
  return Status();
}

void PagedKVCache::free_sequence(int32_t seq) {
  check_live(seq, "free_sequence");
  int32_t* row = table_row(seq);
  // Freed last block first, so a sequence re-added at once gets its blocks back in order.
  for (int32_t i = n_blocks_[seq] - 1; i >= 0; --i) {
    allocator_.free(row[i]);
    row[i] = -1;
  }
  n_blocks_[seq] = 0;
  lens_[seq] = 0;
  live_[seq] = 0;
  free_handles_.push_back(seq);
}

int64_t PagedKVCache::seq_len(int32_t seq) const {
  check_live(seq, "seq_len");
  return lens_[seq];
}

int64_t PagedKVCache::seq_capacity(int32_t seq) const {
  check_live(seq, "seq_capacity");
  return static_cast<int64_t>(n_blocks_[seq]) * block_size_;
}

std::span<const int32_t> PagedKVCache::block_table(int32_t seq) const {
  check_live(seq, "block_table");
  return {table_row(seq), static_cast<size_t>(n_blocks_[seq])};
}

// ---- The step ----

Status PagedKVCache::begin_step(const ForwardBatch& batch) {
  in_step_ = false;
  const int32_t T = batch.num_tokens();
  const int32_t B = batch.num_seqs();
  if (T > max_num_batched_tokens_) {
    return invalid_argument("paged kv cache: step of " + std::to_string(T) +
                            " tokens exceeds max_num_batched_tokens " +
                            std::to_string(max_num_batched_tokens_));
  }
  if (B > max_num_seqs_) {
    return invalid_argument("paged kv cache: step of " + std::to_string(B) +
                            " sequences exceeds max_num_seqs " + std::to_string(max_num_seqs_));
  }
  if (static_cast<int32_t>(batch.positions.size()) != T ||
      static_cast<int32_t>(batch.seq_starts.size()) != B + 1 ||
      static_cast<int32_t>(batch.context_lens.size()) != B) {
    return invalid_argument("paged kv cache: batch arrays disagree (tokens " + std::to_string(T) +
                            ", positions " + std::to_string(batch.positions.size()) + ", seq_starts " +
                            std::to_string(batch.seq_starts.size()) + ", seq_ids " + std::to_string(B) +
                            ", context_lens " + std::to_string(batch.context_lens.size()) + ")");
  }
  if (batch.seq_starts[0] != 0 || batch.seq_starts[B] != T) {
    return invalid_argument("paged kv cache: seq_starts must run from 0 to num_tokens");
  }
  // Validate everything before changing anything, so a failed step leaves no trace.
  int64_t new_blocks = 0, total_ctx = 0;
  for (int32_t b = 0; b < B; ++b) {
    const int32_t seq = batch.seq_ids[b];
    // Built only on failure: the happy path allocates nothing.
    auto where = [&] {
      return "paged kv cache: batch sequence " + std::to_string(b) + " (handle " + std::to_string(seq) +
             "): ";
    };
    if (!is_live(seq)) return invalid_argument(where() + "not a live sequence");
    for (int32_t c = 0; c < b; ++c) {
      if (batch.seq_ids[c] == seq) return invalid_argument(where() + "appears twice in one step");
    }
    const int32_t begin = batch.seq_starts[b], end = batch.seq_starts[b + 1];
    if (end < begin) return invalid_argument(where() + "seq_starts not monotone");
    const int64_t ctx = batch.context_lens[b];
    // Positions continue the sequence: lens_, lens_+1, ..., context_len-1.
    const int64_t first = ctx - (end - begin);
    if (first != lens_[seq]) {
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
    if (ctx > max_seq_len_) {
      return invalid_argument(where() + "context_len " + std::to_string(ctx) + " exceeds max_seq_len " +
                              std::to_string(max_seq_len_));
    }
    new_blocks += blocks_needed(seq, ctx);
    total_ctx += ctx;
  }
  if (new_blocks > num_free_blocks()) {
    return resource_exhausted("paged kv cache: step needs " + std::to_string(new_blocks) + " new blocks, " +
                              std::to_string(num_free_blocks()) + " free");
  }
  if (!fused_read_ && total_ctx > gather_k_.dim(0)) {
    return resource_exhausted("paged kv cache: histories of " + std::to_string(total_ctx) +
                              " tokens exceed the gather workspace of " + std::to_string(gather_k_.dim(0)));
  }

  // Commit: grow tables, then lay out the step.
  for (int32_t b = 0; b < B; ++b) {
    const Status st = reserve(batch.seq_ids[b], batch.context_lens[b]);
    NS_CHECK(st.ok()) << st.to_string();
  }
  step_tokens_ = T;
  step_seqs_ = B;
  std::copy(batch.positions.begin(), batch.positions.end(), step_positions_.begin());
  std::copy(batch.seq_starts.begin(), batch.seq_starts.end(), step_seq_starts_.begin());
  std::copy(batch.context_lens.begin(), batch.context_lens.end(), step_context_lens_.begin());
  step_gather_offsets_[0] = 0;
  step_block_starts_[0] = 0;
  for (int32_t b = 0; b < B; ++b) {
    const int32_t seq = batch.seq_ids[b];
    const int32_t* row = table_row(seq);
    int32_t* dst = step_tables_.data() + static_cast<int64_t>(b) * max_blocks_per_seq_;
    std::copy(row, row + n_blocks_[seq], dst);
    std::fill(dst + n_blocks_[seq], dst + max_blocks_per_seq_, -1);
    for (int32_t t = batch.seq_starts[b]; t < batch.seq_starts[b + 1]; ++t) {
      const int32_t p = batch.positions[t];
      step_slots_[t] = row[p / block_size_] * block_size_ + p % block_size_;
    }
    const int32_t ctx = batch.context_lens[b];
    step_gather_offsets_[b + 1] = step_gather_offsets_[b] + ctx;
    step_block_starts_[b + 1] = step_block_starts_[b] + static_cast<int32_t>(ceil_div(ctx, block_size_));
    lens_[seq] = ctx;
  }
  in_step_ = true;
  return Status();
}

void PagedKVCache::write(int layer, const Tensor& k, const Tensor& v) {
  NS_CHECK(in_step_) << "KV write outside a step (begin_step not called or failed)";
  NS_CHECK(layer >= 0 && layer < n_layers_) << "layer " << layer;
  const int64_t row = n_kv_heads_ * head_dim_;
  NS_CHECK(k.dtype() == DType::kF32 && v.dtype() == DType::kF32 && k.is_contiguous() && v.is_contiguous() &&
           k.numel() == step_tokens_ * row && v.numel() == step_tokens_ * row)
      << "k " << k.shape_string() << " v " << v.shape_string() << ": expected [" << step_tokens_ << ", "
      << n_kv_heads_ << ", " << head_dim_ << "] f32";
  float* kp = k_pools_[layer].data_as<float>();
  float* vp = v_pools_[layer].data_as<float>();
  const float* ks = k.data_as<const float>();
  const float* vs = v.data_as<const float>();
  for (int32_t t = 0; t < step_tokens_; ++t) {
    const int64_t slot = step_slots_[t];
    std::memcpy(kp + slot * row, ks + t * row, row * sizeof(float));
    std::memcpy(vp + slot * row, vs + t * row, row * sizeof(float));
  }
}

const KVHistory& PagedKVCache::append(int layer, const Tensor& k, const Tensor& v) {
  NS_CHECK(gather_k_.defined()) << "append() on a paged cache built for the fused read (no gather workspace)";
  write(layer, k, v);
  const int64_t row = n_kv_heads_ * head_dim_;
  const int64_t block_floats = static_cast<int64_t>(block_size_) * row;
  const float* kp = k_pools_[layer].data_as<const float>();
  const float* vp = v_pools_[layer].data_as<const float>();
  float* gk = gather_k_.data_as<float>();
  float* gv = gather_v_.data_as<float>();
  const int32_t* block_starts = step_block_starts_.data();
  const int32_t B = step_seqs_;
  // One work item per (sequence, logical block): a block's slots are contiguous
  // in the pool, so each item is one memcpy for K and one for V.
  pool_->parallel_for(block_starts[B], [&](int64_t begin, int64_t end, int) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = std::upper_bound(block_starts, block_starts + B + 1, item) - block_starts - 1;
      const int64_t i = item - block_starts[b];
      const int64_t ctx = step_context_lens_[b];
      const int64_t n = std::min<int64_t>(block_size_, ctx - i * block_size_);
      const int64_t src = step_tables_[b * max_blocks_per_seq_ + i] * block_floats;
      const int64_t dst = (step_gather_offsets_[b] + i * block_size_) * row;
      std::memcpy(gk + dst, kp + src, n * row * sizeof(float));
      std::memcpy(gv + dst, vp + src, n * row * sizeof(float));
    }
  });
  history_.k.resize(B);
  history_.v.resize(B);
  for (int32_t b = 0; b < B; ++b) {
    history_.k[b] = gk + step_gather_offsets_[b] * row;
    history_.v[b] = gv + step_gather_offsets_[b] * row;
  }
  history_.pos_stride = row;
  history_.head_stride = head_dim_;
  return history_;
}

void PagedKVCache::paged_attention(int layer, const Tensor& q, const Tensor& k, const Tensor& v, int n_rep,
                                   float scale, Tensor& out) {
  NS_CHECK(fused_read_) << "paged_attention() on a paged cache built without the fused read";
  NS_CHECK_EQ(static_cast<int64_t>(n_rep), n_heads_ / n_kv_heads_);
  write(layer, k, v);
  const int64_t q_numel = step_tokens_ * n_heads_ * head_dim_;
  NS_CHECK(q.dtype() == DType::kF32 && q.is_contiguous() && q.numel() == q_numel &&
           out.dtype() == DType::kF32 && out.is_contiguous() && out.numel() == q_numel)
      << "q " << q.shape_string() << " out " << out.shape_string() << ": expected [" << step_tokens_ << ", "
      << n_heads_ << ", " << head_dim_ << "] f32";
  PagedAttentionArgs a;
  a.q = q.data_as<const float>();
  a.k_pool = k_pools_[layer].data_as<const float>();
  a.v_pool = v_pools_[layer].data_as<const float>();
  a.block_tables = step_tables_.data();
  a.context_lens = step_context_lens_.data();
  a.seq_starts = step_seq_starts_.data();
  a.positions = step_positions_.data();
  a.out = out.data_as<float>();
  a.num_tokens = step_tokens_;
  a.num_seqs = step_seqs_;
  a.num_blocks = num_blocks();
  a.block_size = block_size_;
  a.max_blocks_per_seq = max_blocks_per_seq_;
  a.n_heads = static_cast<int32_t>(n_heads_);
  a.n_kv_heads = static_cast<int32_t>(n_kv_heads_);
  a.head_dim = static_cast<int32_t>(head_dim_);
  a.scale = scale;
  paged_attention_cpu(a, *pool_, scores_.data(), scores_stride_);
}

std::span<const int32_t> PagedKVCache::slot_mapping() const {
  NS_CHECK(in_step_) << "slot_mapping outside a step";
  return {step_slots_.data(), static_cast<size_t>(step_tokens_)};
}

std::span<const int32_t> PagedKVCache::step_block_tables() const {
  NS_CHECK(in_step_) << "step_block_tables outside a step";
  return {step_tables_.data(), static_cast<size_t>(step_seqs_) * max_blocks_per_seq_};
}

void PagedKVCache::fill_batch_tables(ForwardBatch& batch) const {
  const auto tables = step_block_tables();
  const auto slots = slot_mapping();
  batch.max_blocks_per_seq = max_blocks_per_seq_;
  batch.block_tables.assign(tables.begin(), tables.end());
  batch.slot_mapping.assign(slots.begin(), slots.end());
}

}  // namespace nanoserve
