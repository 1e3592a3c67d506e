#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "ops/attention/attention.h"

namespace nanoserve {

void attention_ref(const Tensor& q, const ForwardBatch& batch, const KVHistory& hist, int n_rep, float scale,
                   Tensor& out, int64_t window, float softcap, const float* sinks) {
  const int64_t n_heads = q.dim(1), head_dim = q.dim(2);
  const float* qs = q.data_as<const float>();
  float* os = out.data_as<float>();
  for (int32_t b = 0; b < batch.num_seqs(); ++b) {
    const int32_t begin = batch.seq_starts[b], end = batch.seq_starts[b + 1];
    for (int32_t t = begin; t < end; ++t) {
      const int64_t n_ctx = static_cast<int64_t>(batch.positions[t]) + 1;
      NS_CHECK(n_ctx >= 1 && n_ctx <= batch.context_lens[b]) << "token " << t << " at position " << batch.positions[t];
      for (int64_t h = 0; h < n_heads; ++h) {
        const int64_t kvh = h / n_rep;
        const float* qv = qs + (t * n_heads + h) * head_dim;
        // A sliding window masks what lies before its first position.
        const int64_t first = window > 0 ? std::max<int64_t>(0, n_ctx - window) : 0;
        std::vector<double> s(static_cast<size_t>(n_ctx));
        double mx = -INFINITY;
        for (int64_t p = 0; p < n_ctx; ++p) {
          if (p < first) {
            s[p] = -INFINITY;
            continue;
          }
          const float* k = hist.k[b] + p * hist.pos_stride + kvh * hist.head_stride;
          double d = 0;
          for (int64_t i = 0; i < head_dim; ++i) d += static_cast<double>(qv[i]) * k[i];
          s[p] = d * scale;
          if (softcap > 0.0f) s[p] = softcap * std::tanh(s[p] / softcap);
          mx = std::fmax(mx, s[p]);
        }
        if (sinks != nullptr) mx = std::fmax(mx, sinks[h]);
        double sum = 0;
        for (double& v : s) sum += (v = std::exp(v - mx));
        if (sinks != nullptr) sum += std::exp(static_cast<double>(sinks[h]) - mx);  // weighs no value
        for (int64_t i = 0; i < head_dim; ++i) {
          double acc = 0;
          for (int64_t p = 0; p < n_ctx; ++p) {
            acc += s[p] / sum * hist.v[b][p * hist.pos_stride + kvh * hist.head_stride + i];
          }
          os[(t * n_heads + h) * head_dim + i] = static_cast<float>(acc);
        }
      }
    }
  }
}

}  // namespace nanoserve
