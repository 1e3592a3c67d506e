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
      mx = std::fmax(mx, p[static_cast<size_t>(e)]);
    }
    for (double& v : p) sum += (v = std::exp(v - mx));
    for (double& v : p) v /= sum;
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
    if (params.normalize) {
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
        const double g = dot_row(gate, f, xt, row), u = dot_row(up, f, xt, row);
        h[static_cast<size_t>(f)] = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
      }
      for (int64_t d = 0; d < D; ++d)
        out[static_cast<size_t>(d)] += w[static_cast<size_t>(j)] * dot_row(down, d, h.data(), row);
    }
    for (int64_t d = 0; d < D; ++d)
      y.data_as<float>()[t * D + d] = static_cast<float>(out[static_cast<size_t>(d)]);
  }
}

}  // namespace nanoserve
