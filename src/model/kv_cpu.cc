#include "model/kv_cpu.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include <unistd.h>

#include "core/check.h"
#include "ops/paged_attention/paged_attention.h"
#include "ops/paged_attention/paged_kv.h"

namespace nanoserve {

int64_t CpuKV::bytes_per_block(const ModelConfig& c, int32_t block_size, DType dtype) {
  return c.n_layers * 2 * dtype_bytes(dtype, static_cast<int64_t>(block_size) * c.n_kv_heads * c.head_dim);
}

CpuKV::CpuKV(const ModelConfig& c, const CpuKVOptions& o, ThreadPool& pool)
    : o_(o), n_heads_(c.n_heads), n_kv_heads_(c.n_kv_heads), head_dim_(c.head_dim), pool_(pool) {
  const bool paged = o.layout == CpuKVLayout::kPaged;
  const int64_t capacity = paged ? int64_t{o.num_blocks} * o.block_size : o.max_context;
  o_.max_context = std::min(o.max_context, capacity);
  const std::vector<int64_t> shape =
      paged ? std::vector<int64_t>{o.num_blocks, o.block_size, c.n_kv_heads, c.head_dim}
            : std::vector<int64_t>{o.max_num_seqs, c.n_kv_heads, o.max_context, c.head_dim};
  // Not zeroed: every slot a read reaches was written first (its sequence's
  // own tokens, or a cached block's), and zero-filling costs ~2 s per GiB.
  for (int64_t l = 0; l < c.n_layers; ++l) {
    k_.push_back(Tensor::empty(o_.dtype, shape));
    v_.push_back(Tensor::empty(o_.dtype, shape));
  }
  write_scales_.assign(static_cast<size_t>(c.n_layers), KvScales{});
  read_scales_ = write_scales_;
  const int64_t n_rep = c.n_heads / c.n_kv_heads;
  scores_.assign(static_cast<size_t>(
                     std::max(attention_scratch_floats(pool.num_threads(), o_.max_context),
                              pool.num_threads() * paged_attention_cpu_scores_stride(n_rep, o_.max_context))),
                 0.0f);
  if (paged && !o.fused_read) {
    gather_k_ = Tensor::empty(DType::kF32, {capacity, c.n_kv_heads, c.head_dim});
    gather_v_ = Tensor::empty(DType::kF32, {capacity, c.n_kv_heads, c.head_dim});
  }
  history_.k.reserve(static_cast<size_t>(o.max_num_seqs));
  history_.v.reserve(static_cast<size_t>(o.max_num_seqs));
  gather_scratch_.reserve(2 * (static_cast<size_t>(o.max_num_seqs) + 1));
}

StatusOr<std::unique_ptr<CpuKV>> CpuKV::create(const ModelConfig& c, const CpuKVOptions& o, ThreadPool& pool) {
  auto bad = [](const std::string& what) { return invalid_argument("kv cache: " + what); };
  if (c.n_layers <= 0 || c.n_kv_heads <= 0 || c.head_dim <= 0 || c.n_heads <= 0 ||
      c.n_heads % c.n_kv_heads != 0) {
    return bad("bad model shape (n_layers " + std::to_string(c.n_layers) + ", n_heads " +
               std::to_string(c.n_heads) + ", n_kv_heads " + std::to_string(c.n_kv_heads) + ", head_dim " +
               std::to_string(c.head_dim) + ")");
  }
  if (o.max_context < 1) return bad("max_context must be >= 1");
  if (o.max_num_seqs < 1) return bad("max_num_seqs must be >= 1");
  if (o.layout == CpuKVLayout::kPerSequence) {
    if (o.dtype != DType::kF32) return invalid_argument("kv cache dtype: the naive cache is f32 only");
  } else {
    if (o.num_blocks < 1) return bad("num_blocks must be >= 1");
    if (o.block_size < 1 || o.block_size > 4096)
      return bad("block_size " + std::to_string(o.block_size) + " outside [1, 4096]");
    if (o.dtype != DType::kF32 && o.dtype != DType::kF16 && o.dtype != DType::kBF16 &&
        o.dtype != DType::kF8E4M3)
      return invalid_argument(std::string("kv cache dtype: ") + dtype_name(o.dtype) +
                              " (f32, f16, bf16 or f8e4m3)");
    if (int64_t{o.num_blocks} * o.block_size > std::numeric_limits<int32_t>::max())
      return bad("num_blocks * block_size exceeds 2^31 slots");
  }
  return std::unique_ptr<CpuKV>(new CpuKV(c, o, pool));
}

CpuKV CpuKV::per_sequence(const ModelConfig& config, int32_t max_num_seqs, int64_t max_context,
                          ThreadPool& pool) {
  NS_CHECK(max_num_seqs >= 1 && max_context >= 1) << "per-sequence storage of " << max_num_seqs << " x "
                                                  << max_context;
  CpuKVOptions o;
  o.layout = CpuKVLayout::kPerSequence;
  o.max_num_seqs = max_num_seqs;
  o.max_context = max_context;
  return CpuKV(config, o, pool);
}

void CpuKV::fill_limits(StepLimits& lim) const {
  lim.max_context = o_.max_context;
  if (o_.layout == CpuKVLayout::kPaged) {
    lim.num_blocks = o_.num_blocks;
    lim.block_size = o_.block_size;
    lim.max_blocks_per_seq = (o_.max_context + o_.block_size - 1) / o_.block_size;
  } else {
    lim.num_blocks = 0;
    lim.max_seqs = std::min(lim.max_seqs, o_.max_num_seqs);  // seq_ids index the rows
  }
}

int64_t CpuKV::pool_bytes() const {
  int64_t total = 0;
  for (size_t l = 0; l < k_.size(); ++l) total += k_[l].nbytes() + v_[l].nbytes();
  return total;
}

Status CpuKV::init_swap(int32_t num_slots) {
  if (o_.layout != CpuKVLayout::kPaged)
    return failed_precondition("swap space: the per-sequence cache keeps no blocks to swap");
  if (num_swap_slots_ > 0) return failed_precondition("swap space: it exists already");
  if (num_slots < 1) return invalid_argument("swap space: num_slots must be >= 1");
  // More than the machine has would fail (or thrash) at the first swap-outs: refused up front.
  const int64_t bytes = 2 * static_cast<int64_t>(k_.size()) *
                        dtype_bytes(o_.dtype, int64_t{num_slots} * o_.block_size * n_kv_heads_ * head_dim_);
  const int64_t phys = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  if (phys > 0 && bytes > phys) {
    return invalid_argument("swap space: " + std::to_string(bytes >> 20) +
                            " MiB is more than this machine's " + std::to_string(phys >> 20) +
                            " MiB of memory");
  }
  const std::vector<int64_t> shape = {num_slots, o_.block_size, n_kv_heads_, head_dim_};
  // Not zeroed: a slot is read only after a swap-out wrote it.
  for (size_t l = 0; l < k_.size(); ++l) {
    k_swap_.push_back(Tensor::empty(o_.dtype, shape));
    v_swap_.push_back(Tensor::empty(o_.dtype, shape));
  }
  num_swap_slots_ = num_slots;
  return Status();
}

void CpuKV::swap_blocks(std::span<const BlockCopy> copies, bool out) {
  const size_t block_bytes =
      static_cast<size_t>(dtype_bytes(o_.dtype, int64_t{o_.block_size} * n_kv_heads_ * head_dim_));
  for (const BlockCopy& c : copies) {
    NS_CHECK(c.block >= 0 && c.block < o_.num_blocks && c.slot >= 0 && c.slot < num_swap_slots_)
        << "swap copy of block " << c.block << " / slot " << c.slot << " outside the pool (" << o_.num_blocks
        << ") or the area (" << num_swap_slots_ << ")";
  }
  // Layers in parallel: each copies its own K and V rows.
  pool_.parallel_for(static_cast<int64_t>(k_.size()), [&](int64_t l0, int64_t l1, int) {
    for (int64_t l = l0; l < l1; ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        auto* pool = static_cast<uint8_t*>((kv == 0 ? k_ : v_)[static_cast<size_t>(l)].data());
        auto* area = static_cast<uint8_t*>((kv == 0 ? k_swap_ : v_swap_)[static_cast<size_t>(l)].data());
        for (const BlockCopy& c : copies) {
          uint8_t* b = pool + static_cast<size_t>(c.block) * block_bytes;
          uint8_t* s = area + static_cast<size_t>(c.slot) * block_bytes;
          if (out) {
            std::memcpy(s, b, block_bytes);
          } else {
            std::memcpy(b, s, block_bytes);
          }
        }
      }
    }
  });
}

Status CpuKV::set_kv_scales(std::vector<KvScales> scales, std::vector<KvScales> read_scales) {
  if (read_scales.empty()) read_scales = scales;
  for (const auto* v : {&scales, &read_scales}) {
    if (v->size() != k_.size()) {
      return invalid_argument("KV scales: " + std::to_string(v->size()) + " for " +
                              std::to_string(k_.size()) + " layers");
    }
    for (size_t l = 0; l < v->size(); ++l) {
      if (!kv_scale_valid((*v)[l].k) || !kv_scale_valid((*v)[l].v)) {
        return invalid_argument("KV scales of layer " + std::to_string(l) + ": k " +
                                std::to_string((*v)[l].k) + ", v " + std::to_string((*v)[l].v) +
                                " (each must be finite and > 0)");
      }
    }
  }
  write_scales_ = std::move(scales);
  read_scales_ = std::move(read_scales);
  return Status::ok_status();
}

void CpuKV::write_per_sequence(int layer, const ForwardBatch& batch, const Tensor& k, const Tensor& v) {
  const int64_t max_ctx = k_[layer].dim(2), row_stride = n_kv_heads_ * max_ctx * head_dim_;
  float* kc = k_[layer].data_as<float>();
  float* vc = v_[layer].data_as<float>();
  const float* ks = k.data_as<const float>();
  const float* vs = v.data_as<const float>();
  const size_t row_bytes = static_cast<size_t>(head_dim_) * sizeof(float);
  history_.k.clear();
  history_.v.clear();
  for (int32_t b = 0; b < batch.num_seqs(); ++b) {
    const int64_t base = batch.seq_ids[b] * row_stride;
    for (int32_t t = batch.seq_starts[b]; t < batch.seq_starts[b + 1]; ++t) {
      for (int64_t h = 0; h < n_kv_heads_; ++h) {
        const int64_t dst = base + (h * max_ctx + batch.positions[t]) * head_dim_;
        const int64_t src = (t * n_kv_heads_ + h) * head_dim_;
        std::memcpy(kc + dst, ks + src, row_bytes);
        std::memcpy(vc + dst, vs + src, row_bytes);
      }
    }
    history_.k.push_back(kc + base);
    history_.v.push_back(vc + base);
  }
  history_.pos_stride = head_dim_;
  history_.head_stride = max_ctx * head_dim_;
}

void CpuKV::attend(int layer, const ForwardBatch& batch, const Tensor& q, const Tensor& k, const Tensor& v,
                   int n_rep, float scale, Tensor& out, int64_t window, float softcap, const float* sinks) {
  NS_CHECK(layer >= 0 && layer < static_cast<int>(k_.size())) << "layer " << layer;
  if (o_.layout == CpuKVLayout::kPerSequence) {
    write_per_sequence(layer, batch, k, v);
    ++counts_.writes;
    ++counts_.per_sequence_reads;
    attention(q, batch, history_, n_rep, scale, out, pool_, scores_, window, softcap, sinks);
    return;
  }
  const Tensor &kp = k_[static_cast<size_t>(layer)], &vp = v_[static_cast<size_t>(layer)];
  const KvScales& read = read_scales_[static_cast<size_t>(layer)];
  paged_kv_write(k, v, batch, kp, vp, write_scales_[static_cast<size_t>(layer)]);
  ++counts_.writes;
  if (!o_.fused_read) {
    int64_t total = 0;
    for (int32_t c : batch.context_lens) total += c;
    if (total > gather_k_.dim(0)) {
      // Only when several sequences share prefix blocks: the histories outgrow the pool.
      gather_k_ = Tensor::empty(DType::kF32, {total, n_kv_heads_, head_dim_});
      gather_v_ = Tensor::empty(DType::kF32, {total, n_kv_heads_, head_dim_});
    }
    paged_kv_gather(kp, vp, batch, gather_k_, gather_v_, history_, pool_, gather_scratch_, read);
    ++counts_.gathers;
    attention(q, batch, history_, n_rep, scale, out, pool_, scores_, window, softcap, sinks);
    return;
  }
  const int32_t T = batch.num_tokens();
  const int64_t q_numel = T * n_heads_ * head_dim_;
  NS_CHECK(q.dtype() == DType::kF32 && q.is_contiguous() && q.numel() == q_numel &&
           out.dtype() == DType::kF32 && out.is_contiguous() && out.numel() == q_numel)
      << "q " << q.shape_string() << " out " << out.shape_string();
  PagedAttentionArgs a;
  a.q = q.data_as<const float>();
  if (o_.dtype == DType::kF32) {
    a.k_pool = kp.data_as<const float>();
    a.v_pool = vp.data_as<const float>();
  } else if (o_.dtype == DType::kF8E4M3) {
    a.kv_dtype = o_.dtype;
    a.k_pool8 = static_cast<const uint8_t*>(kp.data());
    a.v_pool8 = static_cast<const uint8_t*>(vp.data());
    a.k_scale = read.k;
    a.v_scale = read.v;
  } else {
    a.kv_dtype = o_.dtype;
    a.k_pool16 = static_cast<const uint16_t*>(kp.data());
    a.v_pool16 = static_cast<const uint16_t*>(vp.data());
  }
  a.block_tables = batch.block_tables.data();
  a.context_lens = batch.context_lens.data();
  a.seq_starts = batch.seq_starts.data();
  a.positions = batch.positions.data();
  a.out = out.data_as<float>();
  a.num_tokens = T;
  a.num_seqs = batch.num_seqs();
  a.num_blocks = o_.num_blocks;
  a.block_size = o_.block_size;
  a.max_blocks_per_seq = batch.max_blocks_per_seq;
  a.n_heads = static_cast<int32_t>(n_heads_);
  a.n_kv_heads = static_cast<int32_t>(n_kv_heads_);
  a.head_dim = static_cast<int32_t>(head_dim_);
  a.scale = scale;
  a.window = static_cast<int32_t>(window);
  a.softcap = softcap;
  a.sinks = sinks;
  ++counts_.fused_reads;
  paged_attention_cpu(a, pool_, scores_.data(),
                      paged_attention_cpu_scores_stride(n_heads_ / n_kv_heads_, o_.max_context));
}

}  // namespace nanoserve
