#include "kvcache/paged_kv_storage.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "core/check.h"
#include "core/half.h"
#include "ops/paged_attention/paged_attention.h"

namespace nanoserve {

namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// n f32 values into the pool dtype at dst.
void store_row(DType dt, const float* src, void* dst, int64_t n) {
  if (dt == DType::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  } else if (dt == DType::kF16) {
    uint16_t* d = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_fp16(src[i]);
  } else {
    uint16_t* d = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
  }
}

// n pool-dtype values at src widened to f32 (exact).
void load_row(DType dt, const void* src, float* dst, int64_t n) {
  if (dt == DType::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  } else if (dt == DType::kF16) {
    const uint16_t* s = static_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(s[i]);
  } else {
    const uint16_t* s = static_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
  }
}

}  // namespace

int64_t PagedKVStorage::bytes_per_block(const ModelConfig& c, int32_t block_size, DType dtype) {
  return c.n_layers * 2 * dtype_bytes(dtype, static_cast<int64_t>(block_size) * c.n_kv_heads * c.head_dim);
}

StatusOr<std::unique_ptr<PagedKVStorage>> PagedKVStorage::create(const ModelConfig& config,
                                                                 const PagedKVStorageOptions& o,
                                                                 ThreadPool* pool) {
  if (config.n_layers <= 0 || config.n_kv_heads <= 0 || config.head_dim <= 0 || config.n_heads <= 0 ||
      config.n_heads % config.n_kv_heads != 0) {
    return invalid_argument("paged kv storage: bad model shape (n_layers " + std::to_string(config.n_layers) +
                            ", n_heads " + std::to_string(config.n_heads) + ", n_kv_heads " +
                            std::to_string(config.n_kv_heads) + ", head_dim " +
                            std::to_string(config.head_dim) + ")");
  }
  if (o.num_blocks < 1) return invalid_argument("paged kv storage: num_blocks must be >= 1");
  if (o.block_size < 1 || o.block_size > 4096)
    return invalid_argument("paged kv storage: block_size " + std::to_string(o.block_size) +
                            " outside [1, 4096]");
  if (o.dtype != DType::kF32 && o.dtype != DType::kF16 && o.dtype != DType::kBF16)
    return invalid_argument(std::string("kv cache dtype: ") + dtype_name(o.dtype) + " (f32, f16 or bf16)");
  if (o.max_seq_len < 1) return invalid_argument("paged kv storage: max_seq_len must be >= 1");
  if (o.max_num_seqs < 1) return invalid_argument("paged kv storage: max_num_seqs must be >= 1");
  if (static_cast<int64_t>(o.num_blocks) * o.block_size > std::numeric_limits<int32_t>::max())
    return invalid_argument("paged kv storage: num_blocks * block_size exceeds 2^31 slots");

  auto s = std::unique_ptr<PagedKVStorage>(new PagedKVStorage());
  s->n_layers_ = config.n_layers;
  s->n_heads_ = config.n_heads;
  s->n_kv_heads_ = config.n_kv_heads;
  s->head_dim_ = config.head_dim;
  s->num_blocks_ = o.num_blocks;
  s->block_size_ = o.block_size;
  s->dtype_ = o.dtype;
  s->fused_read_ = o.fused_read;
  const int64_t capacity = static_cast<int64_t>(o.num_blocks) * o.block_size;
  s->max_seq_len_ = std::min(o.max_seq_len, capacity);
  if (pool == nullptr) {
    s->own_pool_ = std::make_unique<ThreadPool>(1);
    pool = s->own_pool_.get();
  }
  s->pool_ = pool;
  // Not zeroed: every slot a read reaches was written first (its sequence's
  // own tokens, or a cached block's), and zero-filling costs ~2 s per GiB.
  const std::vector<int64_t> pool_shape = {o.num_blocks, o.block_size, config.n_kv_heads, config.head_dim};
  for (int64_t l = 0; l < config.n_layers; ++l) {
    s->k_pools_.push_back(Tensor::empty(o.dtype, pool_shape));
    s->v_pools_.push_back(Tensor::empty(o.dtype, pool_shape));
  }
  s->gather_offsets_.reserve(o.max_num_seqs + 1);
  s->block_starts_.reserve(o.max_num_seqs + 1);
  if (o.fused_read) {
    s->scores_stride_ =
        paged_attention_cpu_scores_stride(config.n_heads / config.n_kv_heads, s->max_seq_len_);
    s->scores_.assign(static_cast<size_t>(pool->num_threads()) * s->scores_stride_, 0.0f);
  } else {
    s->gather_k_ = Tensor::empty(DType::kF32, {capacity, config.n_kv_heads, config.head_dim});
    s->gather_v_ = Tensor::empty(DType::kF32, {capacity, config.n_kv_heads, config.head_dim});
    s->history_.k.reserve(o.max_num_seqs);
    s->history_.v.reserve(o.max_num_seqs);
  }
  return s;
}

int64_t PagedKVStorage::pool_bytes() const {
  int64_t total = 0;
  for (size_t l = 0; l < k_pools_.size(); ++l) total += k_pools_[l].nbytes() + v_pools_[l].nbytes();
  return total;
}

Status PagedKVStorage::begin_step(const ForwardBatch& batch) {
  step_ = nullptr;
  const int32_t T = batch.num_tokens(), B = batch.num_seqs();
  const int64_t mb = batch.max_blocks_per_seq;
  if (static_cast<int32_t>(batch.positions.size()) != T ||
      static_cast<int32_t>(batch.seq_starts.size()) != B + 1 ||
      static_cast<int32_t>(batch.context_lens.size()) != B ||
      static_cast<int32_t>(batch.slot_mapping.size()) != T ||
      static_cast<int64_t>(batch.block_tables.size()) < B * mb || batch.seq_starts[0] != 0 ||
      batch.seq_starts[B] != T) {
    return invalid_argument(
        "paged kv storage: batch arrays disagree (tokens " + std::to_string(T) + ", positions " +
        std::to_string(batch.positions.size()) + ", seq_starts " + std::to_string(batch.seq_starts.size()) +
        ", seq_ids " + std::to_string(B) + ", context_lens " + std::to_string(batch.context_lens.size()) +
        ", slot_mapping " + std::to_string(batch.slot_mapping.size()) + ", block_tables " +
        std::to_string(batch.block_tables.size()) + " for max_blocks_per_seq " + std::to_string(mb) + ")");
  }
  // Every index a read or write follows is checked, so a bad batch is an error, never a stray access.
  const int64_t num_slots = static_cast<int64_t>(num_blocks_) * block_size_;
  int64_t total_ctx = 0;
  for (int32_t b = 0; b < B; ++b) {
    auto where = [&] { return "paged kv storage: batch sequence " + std::to_string(b) + ": "; };
    const int32_t begin = batch.seq_starts[b], end = batch.seq_starts[b + 1];
    if (end < begin) return invalid_argument(where() + "seq_starts not monotone");
    const int64_t ctx = batch.context_lens[b];
    if (ctx < end - begin || ctx > max_seq_len_ || ceil_div(ctx, block_size_) > mb) {
      return invalid_argument(where() + "context_len " + std::to_string(ctx) + " outside [" +
                              std::to_string(end - begin) + ", " +
                              std::to_string(std::min(max_seq_len_, mb * block_size_)) + "]");
    }
    const int32_t* table = batch.block_tables.data() + b * mb;
    for (int64_t i = 0; i < ceil_div(ctx, block_size_); ++i) {
      if (table[i] < 0 || table[i] >= num_blocks_)
        return invalid_argument(where() + "block_tables[" + std::to_string(i) +
                                "] = " + std::to_string(table[i]) + " outside the pool of " +
                                std::to_string(num_blocks_));
    }
    for (int32_t t = begin; t < end; ++t) {
      const int32_t p = batch.positions[t], slot = batch.slot_mapping[t];
      if (p < 0 || p >= ctx)
        return invalid_argument(where() + "token " + std::to_string(t) + " at position " + std::to_string(p) +
                                " outside its context of " + std::to_string(ctx));
      if (slot < 0 || slot >= num_slots)
        return invalid_argument(where() + "slot_mapping[" + std::to_string(t) +
                                "] = " + std::to_string(slot) + " outside the pool's " +
                                std::to_string(num_slots) + " slots");
    }
    total_ctx += ctx;
  }
  if (!fused_read_ && total_ctx > gather_k_.dim(0)) {
    // Only when several sequences share prefix blocks: the histories outgrow the pool.
    gather_k_ = Tensor::empty(DType::kF32, {total_ctx, n_kv_heads_, head_dim_});
    gather_v_ = Tensor::empty(DType::kF32, {total_ctx, n_kv_heads_, head_dim_});
  }
  gather_offsets_.resize(B + 1);
  block_starts_.resize(B + 1);
  gather_offsets_[0] = 0;
  block_starts_[0] = 0;
  for (int32_t b = 0; b < B; ++b) {
    const int32_t ctx = batch.context_lens[b];
    gather_offsets_[b + 1] = gather_offsets_[b] + ctx;
    block_starts_[b + 1] = block_starts_[b] + static_cast<int32_t>(ceil_div(ctx, block_size_));
  }
  step_ = &batch;
  return Status();
}

void PagedKVStorage::write(int layer, const Tensor& k, const Tensor& v) {
  NS_CHECK(step_ != nullptr) << "KV write outside a step (begin_step not called or failed)";
  NS_CHECK(layer >= 0 && layer < n_layers_) << "layer " << layer;
  const int64_t row = n_kv_heads_ * head_dim_;
  const int32_t T = step_->num_tokens();
  NS_CHECK(k.dtype() == DType::kF32 && v.dtype() == DType::kF32 && k.is_contiguous() && v.is_contiguous() &&
           k.numel() == T * row && v.numel() == T * row)
      << "k " << k.shape_string() << " v " << v.shape_string() << ": expected [" << T << ", " << n_kv_heads_
      << ", " << head_dim_ << "] f32";
  char* kp = static_cast<char*>(k_pools_[layer].data());
  char* vp = static_cast<char*>(v_pools_[layer].data());
  const int64_t row_bytes = dtype_bytes(dtype_, row);
  const float* ks = k.data_as<const float>();
  const float* vs = v.data_as<const float>();
  for (int32_t t = 0; t < T; ++t) {
    const int64_t slot = step_->slot_mapping[t];
    store_row(dtype_, ks + t * row, kp + slot * row_bytes, row);
    store_row(dtype_, vs + t * row, vp + slot * row_bytes, row);
  }
}

const KVHistory& PagedKVStorage::append(int layer, const Tensor& k, const Tensor& v) {
  NS_CHECK(gather_k_.defined())
      << "append() on a paged storage built for the fused read (no gather workspace)";
  write(layer, k, v);
  const ForwardBatch& batch = *step_;
  const int64_t row = n_kv_heads_ * head_dim_;
  const int64_t block_bytes = dtype_bytes(dtype_, static_cast<int64_t>(block_size_) * row);
  const char* kp = static_cast<const char*>(k_pools_[layer].data());
  const char* vp = static_cast<const char*>(v_pools_[layer].data());
  float* gk = gather_k_.data_as<float>();
  float* gv = gather_v_.data_as<float>();
  const int32_t* block_starts = block_starts_.data();
  const int32_t B = batch.num_seqs();
  const int64_t mb = batch.max_blocks_per_seq;
  // One work item per (sequence, logical block): a block's slots are contiguous
  // in the pool, so each item is one row run for K and one for V.
  pool_->parallel_for(block_starts[B], [&](int64_t begin, int64_t end, int) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = std::upper_bound(block_starts, block_starts + B + 1, item) - block_starts - 1;
      const int64_t i = item - block_starts[b];
      const int64_t ctx = batch.context_lens[b];
      const int64_t n = std::min<int64_t>(block_size_, ctx - i * block_size_);
      const int64_t src = batch.block_tables[b * mb + i] * block_bytes;
      const int64_t dst = (gather_offsets_[b] + i * block_size_) * row;
      load_row(dtype_, kp + src, gk + dst, n * row);
      load_row(dtype_, vp + src, gv + dst, n * row);
    }
  });
  history_.k.resize(B);
  history_.v.resize(B);
  for (int32_t b = 0; b < B; ++b) {
    history_.k[b] = gk + gather_offsets_[b] * row;
    history_.v[b] = gv + gather_offsets_[b] * row;
  }
  history_.pos_stride = row;
  history_.head_stride = head_dim_;
  return history_;
}

void PagedKVStorage::paged_attention(int layer, const Tensor& q, const Tensor& k, const Tensor& v, int n_rep,
                                     float scale, Tensor& out) {
  NS_CHECK(fused_read_) << "paged_attention() on a paged storage built without the fused read";
  NS_CHECK_EQ(static_cast<int64_t>(n_rep), n_heads_ / n_kv_heads_);
  write(layer, k, v);
  const ForwardBatch& batch = *step_;
  const int32_t T = batch.num_tokens();
  const int64_t q_numel = T * n_heads_ * head_dim_;
  NS_CHECK(q.dtype() == DType::kF32 && q.is_contiguous() && q.numel() == q_numel &&
           out.dtype() == DType::kF32 && out.is_contiguous() && out.numel() == q_numel)
      << "q " << q.shape_string() << " out " << out.shape_string() << ": expected [" << T << ", " << n_heads_
      << ", " << head_dim_ << "] f32";
  PagedAttentionArgs a;
  a.q = q.data_as<const float>();
  if (dtype_ == DType::kF32) {
    a.k_pool = k_pools_[layer].data_as<const float>();
    a.v_pool = v_pools_[layer].data_as<const float>();
  } else {
    a.kv_dtype = dtype_;
    a.k_pool16 = static_cast<const uint16_t*>(k_pools_[layer].data());
    a.v_pool16 = static_cast<const uint16_t*>(v_pools_[layer].data());
  }
  a.block_tables = batch.block_tables.data();
  a.context_lens = batch.context_lens.data();
  a.seq_starts = batch.seq_starts.data();
  a.positions = batch.positions.data();
  a.out = out.data_as<float>();
  a.num_tokens = T;
  a.num_seqs = batch.num_seqs();
  a.num_blocks = num_blocks_;
  a.block_size = block_size_;
  a.max_blocks_per_seq = batch.max_blocks_per_seq;
  a.n_heads = static_cast<int32_t>(n_heads_);
  a.n_kv_heads = static_cast<int32_t>(n_kv_heads_);
  a.head_dim = static_cast<int32_t>(head_dim_);
  a.scale = scale;
  paged_attention_cpu(a, *pool_, scores_.data(), scores_stride_);
}

}  // namespace nanoserve
