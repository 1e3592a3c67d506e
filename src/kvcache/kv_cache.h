#pragma once
// What the forward pass sees of a KV cache. The attention layer knows no cache
// class: if has_fused_read(), it calls paged_attention() and takes the output
// back; otherwise it calls append() and runs attention over the history.

#include <cstdint>
#include <vector>

#include "core/check.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/forward_batch.h"

namespace nanoserve {

// Each sequence's K/V history for one layer, as the gather path returns it.
// K of sequence b, position p, kv head h starts at
//   k[b] + p * pos_stride + h * head_stride   (f32, head_dim contiguous)
// for p in [0, batch.context_lens[b]). The same for V.
struct KVHistory {
  std::vector<const float*> k;  // [B]
  std::vector<const float*> v;  // [B]
  int64_t pos_stride = 0;
  int64_t head_stride = 0;
};

class KVCache {
 public:
  virtual ~KVCache() = default;

  // Once per step, before layer 0: checks the batch against the cache and
  // makes room for this step's tokens.
  virtual Status begin_step(const ForwardBatch& batch) = 0;

  // Gather path. Writes this step's K/V for `layer`, then returns every
  // sequence's whole history (including this step's tokens).
  //   k, v: [T, n_kv_heads, head_dim] f32
  // The returned history is owned by the cache and valid until the next call.
  virtual const KVHistory& append(int layer, const Tensor& k, const Tensor& v) = 0;

  // Fused read. Writes this step's K/V, then attends through the cache's own
  // layout, causally within this step's tokens.
  //   q: [T, n_heads, head_dim] f32, out: [T, n_heads, head_dim] f32
  virtual bool has_fused_read() const { return false; }
  virtual void paged_attention(int /*layer*/, const Tensor& /*q*/, const Tensor& /*k*/, const Tensor& /*v*/,
                               int /*n_rep*/, float /*scale*/, Tensor& /*out*/) {
    NS_CHECK(false) << "paged_attention on a cache without a fused read";
  }
};

}  // namespace nanoserve
