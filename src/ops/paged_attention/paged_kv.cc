#include "ops/paged_attention/paged_kv.h"

#include <algorithm>
#include <cstring>
#include "core/check.h"
#include "core/half.h"

namespace nanoserve {

namespace {

// n f32 values into the pool dtype at dst.
void store_row(DType dt, const float* src, void* dst, int64_t n, float scale) {
  if (dt == DType::kF8E4M3) {
    uint8_t* d = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = kv_f8_quantize(bf16_to_f32(f32_to_bf16(src[i])), scale);
  } else if (dt == DType::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  } else if (dt == DType::kF16) {
    uint16_t* d = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_fp16(src[i]);
  } else {
    uint16_t* d = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
  }
}

// n pool-dtype values at src widened to f32 (exact; an fp8 pool's, times the scale).
void load_row(DType dt, const void* src, float* dst, int64_t n, float scale) {
  if (dt == DType::kF8E4M3) {
    const uint8_t* s = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = kv_f8_dequantize(s[i], scale);
  } else if (dt == DType::kF32) {
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

void paged_kv_write(const Tensor& k, const Tensor& v, const ForwardBatch& batch, const Tensor& k_pool,
                    const Tensor& v_pool, const KvScales& scales) {
  const int64_t row = k_pool.dim(2) * k_pool.dim(3);
  const int32_t T = batch.num_tokens();
  NS_CHECK(k.dtype() == DType::kF32 && v.dtype() == DType::kF32 && k.is_contiguous() && v.is_contiguous() &&
           k.numel() == T * row && v.numel() == T * row && k_pool.shape() == v_pool.shape() &&
           k_pool.dtype() == v_pool.dtype())
      << "paged_kv_write: k " << k.shape_string() << " v " << v.shape_string() << " into pools "
      << k_pool.shape_string();
  const DType dt = k_pool.dtype();
  const int64_t row_bytes = dtype_bytes(dt, row);
  char* kp = static_cast<char*>(k_pool.data());
  char* vp = static_cast<char*>(v_pool.data());
  const float* ks = k.data_as<const float>();
  const float* vs = v.data_as<const float>();
  for (int32_t t = 0; t < T; ++t) {
    const int64_t slot = batch.slot_mapping[t];
    store_row(dt, ks + t * row, kp + slot * row_bytes, row, scales.k);
    store_row(dt, vs + t * row, vp + slot * row_bytes, row, scales.v);
  }
}

void paged_kv_gather(const Tensor& k_pool, const Tensor& v_pool, const ForwardBatch& batch,
                     const Tensor& gather_k, const Tensor& gather_v, KVHistory& hist, ThreadPool& pool,
                     std::vector<int64_t>& scratch, const KvScales& scales) {
  const int32_t B = batch.num_seqs();
  const int64_t block_size = k_pool.dim(1), n_kv = k_pool.dim(2), head_dim = k_pool.dim(3);
  const int64_t row = n_kv * head_dim, mb = batch.max_blocks_per_seq;
  // Each sequence's offset in the buffers, and a prefix sum of its blocks.
  scratch.assign(2 * (static_cast<size_t>(B) + 1), 0);
  int64_t* offsets = scratch.data();
  int64_t* block_starts = scratch.data() + B + 1;
  for (int32_t b = 0; b < B; ++b) {
    offsets[b + 1] = offsets[b] + batch.context_lens[b];
    block_starts[b + 1] = block_starts[b] + (batch.context_lens[b] + block_size - 1) / block_size;
  }
  NS_CHECK(gather_k.dtype() == DType::kF32 && gather_v.dtype() == DType::kF32 &&
           gather_k.numel() >= offsets[B] * row && gather_v.numel() >= offsets[B] * row)
      << "paged_kv_gather: buffers " << gather_k.shape_string() << " for " << offsets[B] << " positions";
  const DType dt = k_pool.dtype();
  const int64_t block_bytes = dtype_bytes(dt, block_size * row);
  const char* kp = static_cast<const char*>(k_pool.data());
  const char* vp = static_cast<const char*>(v_pool.data());
  float* gk = gather_k.data_as<float>();
  float* gv = gather_v.data_as<float>();
  // One work item per (sequence, logical block): a block's slots are contiguous
  // in the pool, so each item is one row run for K and one for V.
  pool.parallel_for(block_starts[B], [&](int64_t begin, int64_t end, int) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = std::upper_bound(block_starts, block_starts + B + 1, item) - block_starts - 1;
      const int64_t i = item - block_starts[b];
      const int64_t n = std::min<int64_t>(block_size, batch.context_lens[b] - i * block_size);
      const int64_t src = batch.block_tables[b * mb + i] * block_bytes;
      const int64_t dst = (offsets[b] + i * block_size) * row;
      load_row(dt, kp + src, gk + dst, n * row, scales.k);
      load_row(dt, vp + src, gv + dst, n * row, scales.v);
    }
  });
  hist.k.resize(static_cast<size_t>(B));
  hist.v.resize(static_cast<size_t>(B));
  for (int32_t b = 0; b < B; ++b) {
    hist.k[b] = gk + offsets[b] * row;
    hist.v[b] = gv + offsets[b] * row;
  }
  hist.pos_stride = row;
  hist.head_stride = head_dim;
}

}  // namespace nanoserve
