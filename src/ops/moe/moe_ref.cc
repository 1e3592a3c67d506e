// The plain mixture of experts: one token at a time, every weight row
// dequantized and dotted in double. Frozen once trusted: moe_ffn is checked
// against it.

#include <cmath>
#include <vector>

#include "core/check.h"
#include "ops/dequantize/dequantize.h"
#include "ops/moe/moe.h"

namespace nanoserve {

namespace {

// w [N, K] row n · x[0..K), in double.
double dot_row(const Tensor& w, int64_t n, const float* x, std::vector<float>& row) {
  const int64_t K = w.dim(1);
  row.resize(static_cast<size_t>(K));
  dequantize_row(w.dtype(), static_cast<const char*>(w.data()) + dtype_bytes(w.dtype(), n * K), row.data(),
                 K);
  double s = 0.0;
  for (int64_t i = 0; i < K; ++i) s += static_cast<double>(row[static_cast<size_t>(i)]) * x[i];
  return s;
}

}  // namespace

void moe_ffn_ref(const Tensor& x, const Tensor& router, const MoeExperts& experts, const MoeParams& params,
                 Tensor& y) {
  const int64_t T = x.dim(0), D = x.dim(1), E = router.dim(0), k = params.top_k;
  NS_CHECK(k >= 1 && k <= E && static_cast<int64_t>(experts.gate.size()) == E) << "moe_ffn_ref: top_k " << k;
  std::vector<float> row;
  std::vector<double> p(static_cast<size_t>(E));
  std::vector<float> h;
  std::vector<double> out(static_cast<size_t>(D));
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x.data_as<const float>() + t * D;
    double mx = -INFINITY, sum = 0.0;
    for (int64_t e = 0; e < E; ++e) {
      p[static_cast<size_t>(e)] = dot_row(router, e, xt, row);
      if (experts.router_bias != nullptr)
        p[static_cast<size_t>(e)] += experts.router_bias->data_as<const float>()[e];
      mx = std::fmax(mx, p[static_cast<size_t>(e)]);
    }
    // Softmax over all E first (the default), or over the k selected logits
    // after the top-k (gpt-oss): the top-k order is the same either way.
    const bool topk_first = params.gating == MoeGating::kTopKThenSoftmax;
    if (!topk_first) {
      for (double& v : p) sum += (v = std::exp(v - mx));
      for (double& v : p) v /= sum;
    }
    // Top-k: repeatedly the highest not yet taken, the lower id on a tie.
    std::vector<int64_t> ids;
    std::vector<double> w;
    std::vector<bool> taken(static_cast<size_t>(E), false);
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < E; ++e) {
        if (!taken[static_cast<size_t>(e)] &&
            (best < 0 || p[static_cast<size_t>(e)] > p[static_cast<size_t>(best)]))
          best = e;
      }
      taken[static_cast<size_t>(best)] = true;
      ids.push_back(best);
      w.push_back(p[static_cast<size_t>(best)]);
    }
    if (topk_first) {
      const double top = w[0];  // the largest selected logit
      double s = 0.0;
      for (double& v : w) s += (v = std::exp(v - top));
      for (double& v : w) v /= s;
    } else if (params.normalize) {
      double s = 0.0;
      for (double v : w) s += v;
      for (double& v : w) v /= s;
    }
    std::fill(out.begin(), out.end(), 0.0);
    for (int64_t j = 0; j < k; ++j) {
      const auto e = static_cast<size_t>(ids[static_cast<size_t>(j)]);
      const Tensor& gate = experts.gate[e];
      const Tensor& up = experts.up[e];
      const Tensor& down = experts.down[e];
      const int64_t F = gate.dim(0);
      h.resize(static_cast<size_t>(F));
      for (int64_t f = 0; f < F; ++f) {
        double g = dot_row(gate, f, xt, row), u = dot_row(up, f, xt, row);
        if (experts.gate_bias != nullptr)
          g += experts.gate_bias->data_as<const float>()[static_cast<int64_t>(e) * F + f];
        if (experts.up_bias != nullptr)
          u += experts.up_bias->data_as<const float>()[static_cast<int64_t>(e) * F + f];
        if (params.activation == MoeActivation::kClampedSwiglu) {
          const double L = params.swiglu_limit;
          g = std::fmin(g, L);
          u = std::fmax(-L, std::fmin(u, L));
          h[static_cast<size_t>(f)] =
              static_cast<float>((u + 1.0) * g / (1.0 + std::exp(-params.swiglu_alpha * g)));
        } else {
          h[static_cast<size_t>(f)] = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
        }
      }
      for (int64_t d = 0; d < D; ++d) {
        double o = dot_row(down, d, h.data(), row);
        if (experts.down_bias != nullptr)
          o += experts.down_bias->data_as<const float>()[static_cast<int64_t>(e) * D + d];
        out[static_cast<size_t>(d)] += w[static_cast<size_t>(j)] * o;
      }
    }
    for (int64_t d = 0; d < D; ++d)
      y.data_as<float>()[t * D + d] = static_cast<float>(out[static_cast<size_t>(d)]);
  }
}

}  // namespace nanoserve
