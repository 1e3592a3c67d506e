#pragma once
// A two-sample chi-square test of homogeneity: are two samples of the same
// size drawn from one distribution over categories? For the statistical
// tests of speculative decoding's rejection sampling.

#include <cmath>
#include <cstdint>
#include <vector>

namespace nanoserve::testing {

struct ChiSquare {
  double statistic = 0.0;
  int dof = 0;
  double critical = 0.0;    // the statistic's (1 - 1e-4) quantile under the null
  bool consistent = false;  // statistic <= critical
};

// a[i], b[i]: counts of category i in two samples of equal size. Categories
// with fewer than 20 observations in both together are pooled into one, so
// every cell is large enough for the chi-square approximation. The
// threshold is the 1 - 1e-4 quantile (Wilson-Hilferty), so a correct
// sampler fails one run in ten thousand, and the seeds are fixed.
inline ChiSquare chi_square_same_distribution(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  ChiSquare r;
  double pooled_a = 0, pooled_b = 0;
  int bins = 0;
  auto add = [&](double x, double y) {
    if (x + y == 0) return;
    r.statistic += (x - y) * (x - y) / (x + y);
    ++bins;
  };
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] + b[i] < 20) {
      pooled_a += static_cast<double>(a[i]);
      pooled_b += static_cast<double>(b[i]);
    } else {
      add(static_cast<double>(a[i]), static_cast<double>(b[i]));
    }
  }
  add(pooled_a, pooled_b);
  r.dof = bins - 1;
  if (r.dof < 1) {
    r.consistent = true;
    return r;
  }
  const double k = r.dof, z = 3.719;  // z: the standard normal's 1 - 1e-4 quantile
  const double c = 1.0 - 2.0 / (9.0 * k) + z * std::sqrt(2.0 / (9.0 * k));
  r.critical = k * c * c * c;
  r.consistent = r.statistic <= r.critical;
  return r;
}

}  // namespace nanoserve::testing
