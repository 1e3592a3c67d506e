// The frozen reference for paged attention: one query head at a time, the
// block table walked position by position, f64 softmax and accumulation.
// Slow and obviously right; every fast kernel is held against it.

#include <cmath>
#include <string>
#include <vector>

#include "core/check.h"
#include "ops/paged_attention/paged_attention.h"

namespace nanoserve {

Status validate_paged_attention_args(const PagedAttentionArgs& a) {
  if (a.num_tokens < 0 || a.num_seqs < 0)
    return invalid_argument("paged_attention: negative num_tokens/num_seqs");
  if (a.block_size <= 0) return invalid_argument("paged_attention: block_size must be > 0");
  if (a.num_blocks <= 0) return invalid_argument("paged_attention: num_blocks must be > 0");
  if (a.max_blocks_per_seq <= 0) return invalid_argument("paged_attention: max_blocks_per_seq must be > 0");
  if (a.head_dim <= 0) return invalid_argument("paged_attention: head_dim must be > 0");
  if (a.n_kv_heads <= 0 || a.n_heads <= 0 || a.n_heads % a.n_kv_heads != 0) {
    return invalid_argument("paged_attention: n_heads (" + std::to_string(a.n_heads) +
                            ") must be a positive multiple of n_kv_heads (" + std::to_string(a.n_kv_heads) +
                            ")");
  }
  if (a.num_tokens == 0) return Status();
  if (!a.q || !a.k_pool || !a.v_pool || !a.block_tables || !a.context_lens || !a.seq_starts || !a.positions ||
      !a.out) {
    return invalid_argument("paged_attention: null pointer argument");
  }
  if (a.seq_starts[0] != 0) return invalid_argument("paged_attention: seq_starts[0] != 0");
  if (a.window < 0) return invalid_argument("paged_attention: window " + std::to_string(a.window) + " < 0");
  if (!(a.softcap >= 0.0f && std::isfinite(a.softcap)))
    return invalid_argument("paged_attention: softcap " + std::to_string(a.softcap) +
                            " is not finite and >= 0");
  if (a.seq_starts[a.num_seqs] != a.num_tokens) {
    return invalid_argument(
        "paged_attention: seq_starts[num_seqs] = " + std::to_string(a.seq_starts[a.num_seqs]) +
        " != num_tokens = " + std::to_string(a.num_tokens));
  }
  const int64_t max_ctx = static_cast<int64_t>(a.max_blocks_per_seq) * a.block_size;
  for (int32_t b = 0; b < a.num_seqs; ++b) {
    const std::string seq = "paged_attention: sequence " + std::to_string(b) + ": ";
    if (a.seq_starts[b + 1] < a.seq_starts[b]) return invalid_argument(seq + "seq_starts not monotone");
    const int32_t ctx = a.context_lens[b];
    if (ctx < 0 || ctx > max_ctx) {
      return invalid_argument(seq + "context_len " + std::to_string(ctx) + " outside [0, " +
                              std::to_string(max_ctx) + "]");
    }
    for (int32_t t = a.seq_starts[b]; t < a.seq_starts[b + 1]; ++t) {
      if (a.positions[t] < 0 || a.positions[t] >= ctx) {
        return invalid_argument(seq + "token " + std::to_string(t) + " position " +
                                std::to_string(a.positions[t]) + " outside its context of " +
                                std::to_string(ctx));
      }
    }
    const int32_t n_blk = (ctx + a.block_size - 1) / a.block_size;
    for (int32_t i = 0; i < n_blk; ++i) {
      const int32_t blk = a.block_tables[static_cast<int64_t>(b) * a.max_blocks_per_seq + i];
      if (blk < 0 || blk >= a.num_blocks) {
        return invalid_argument(seq + "block table entry " + std::to_string(i) + " = " + std::to_string(blk) +
                                " outside the pool of " + std::to_string(a.num_blocks));
      }
    }
  }
  return Status();
}

void paged_attention_reference(const PagedAttentionArgs& a) {
  const Status st = validate_paged_attention_args(a);
  NS_CHECK(st.ok()) << st.to_string();
  const int64_t hd = a.head_dim;
  const int64_t n_rep = a.n_heads / a.n_kv_heads;
  std::vector<double> scores;
  std::vector<double> acc(hd);
  for (int32_t b = 0; b < a.num_seqs; ++b) {
    const int32_t* table = a.block_tables + static_cast<int64_t>(b) * a.max_blocks_per_seq;
    for (int32_t t = a.seq_starts[b]; t < a.seq_starts[b + 1]; ++t) {
      const int64_t n_ctx = static_cast<int64_t>(a.positions[t]) + 1;
      scores.assign(n_ctx, 0.0);
      for (int64_t qh = 0; qh < a.n_heads; ++qh) {
        const int64_t kvh = qh / n_rep;
        const float* q = a.q + (static_cast<int64_t>(t) * a.n_heads + qh) * hd;
        // The physical row of position p.
        auto row = [&](const float* pool, int64_t p) {
          const int64_t slot =
              static_cast<int64_t>(table[p / a.block_size]) * a.block_size + p % a.block_size;
          return pool + (slot * a.n_kv_heads + kvh) * hd;
        };
        // Positions before a sliding window's first weigh nothing.
        const int64_t first = a.window > 0 && n_ctx > a.window ? n_ctx - a.window : 0;
        double max_score = -INFINITY;
        for (int64_t p = 0; p < n_ctx; ++p) {
          if (p < first) {
            scores[p] = -INFINITY;
            continue;
          }
          const float* k = row(a.k_pool, p);
          double dot = 0.0;
          for (int64_t d = 0; d < hd; ++d) dot += static_cast<double>(q[d]) * static_cast<double>(k[d]);
          scores[p] = dot * static_cast<double>(a.scale);
          if (a.softcap > 0.0f) scores[p] = a.softcap * std::tanh(scores[p] / a.softcap);
          if (scores[p] > max_score) max_score = scores[p];
        }
        const double sink = a.sinks != nullptr ? static_cast<double>(a.sinks[qh]) : -INFINITY;
        if (sink > max_score) max_score = sink;
        double sum = 0.0;
        for (int64_t p = 0; p < n_ctx; ++p) {
          scores[p] = std::exp(scores[p] - max_score);
          sum += scores[p];
        }
        if (a.sinks != nullptr) sum += std::exp(sink - max_score);  // the denominator only
        for (int64_t d = 0; d < hd; ++d) acc[d] = 0.0;
        for (int64_t p = 0; p < n_ctx; ++p) {
          const float* v = row(a.v_pool, p);
          for (int64_t d = 0; d < hd; ++d) acc[d] += scores[p] * static_cast<double>(v[d]);
        }
        float* out = a.out + (static_cast<int64_t>(t) * a.n_heads + qh) * hd;
        for (int64_t d = 0; d < hd; ++d) out[d] = static_cast<float>(acc[d] / sum);
      }
    }
  }
}

}  // namespace nanoserve
