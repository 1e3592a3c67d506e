#pragma once
// Helpers for the CUDA op tests (tests/ops/*/*_cuda_test.cc): device upload and
// download of host vectors, bf16 encodings, fresh seeds, and the comparison
// against a CPU reference by normalized mean squared error (as ggml's
// test-backend-ops: NMSE = sum (out - ref)^2 / sum ref^2) plus a per-element
// bound, so that one wrong element in a large tensor fails too (it barely
// moves the NMSE). Without a CUDA device the tests report SKIPPED with the
// runtime's reason.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/cuda/device_memory.cuh"
#include "core/half.h"
#include "core/skip_without_gpu.h"
#include "core/tensor.h"

namespace nanoserve::testing {

// bf16 output: its rounding alone is up to 2^-8 relative per element (8
// significant bits), NMSE about 2^-16 / 6 = 2.5e-6 on smooth data; 1e-5 leaves
// 4x for the f32 math before the rounding, and a 3% scale error (NMSE 9e-4)
// or a swapped half (NMSE ~2) is far above it.
inline constexpr double kNmseBf16 = 1e-5;
// f32 output of a long f32 dot product (the GEMMs): accumulation-order error only.
inline constexpr double kNmseF32 = 1e-8;
inline constexpr double kBf16HalfUlp = 1.0 / 256.0;  // relative

inline uint64_t fresh_seed() {
  return (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
}

inline float quiet_nan() {
  return std::numeric_limits<float>::quiet_NaN();
}

// Uniform in [-scale, scale), from a seed.
inline std::vector<float> uniform_floats(int64_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = dist(rng);
  return v;
}

inline std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16(v[i]);
  return h;
}

inline std::vector<float> from_bf16(const std::vector<uint16_t>& h) {
  std::vector<float> v(h.size());
  for (size_t i = 0; i < h.size(); ++i) v[i] = bf16_to_f32(h[i]);
  return v;
}

// v rounded to bf16 and back: the values a bf16 tensor of v holds.
inline std::vector<float> bf16_round(const std::vector<float>& v) {
  return from_bf16(to_bf16(v));
}

template <typename T>
Tensor upload(const std::vector<T>& v, DType dt, std::vector<int64_t> shape) {
  Tensor host = Tensor::view(const_cast<T*>(v.data()), dt, std::move(shape), nullptr);
  return cuda::to_device(host);
}

// A device tensor with every byte 0xFF: NaN in f32, f16 and bf16, -1 in i32.
inline Tensor poisoned(DType dt, std::vector<int64_t> shape) {
  Tensor t = cuda::empty(dt, std::move(shape));
  cuda::fill_bytes(t, 0xFF);
  return t;
}

template <typename T>
std::vector<T> download(const Tensor& dev) {
  std::vector<T> h(static_cast<size_t>(dev.numel()));
  cuda::copy_to_host(dev, Tensor::view(h.data(), dev.dtype(), dev.shape(), nullptr));
  return h;
}

inline std::vector<float> download_f32(const Tensor& dev) {
  if (dev.dtype() == DType::kBF16) return from_bf16(download<uint16_t>(dev));
  return download<float>(dev);
}

struct Comparison {
  double nmse = 0.0;
  double bias = 0.0;         // sum (out - ref) ref / sum ref^2: a scale error, 0 for unbiased rounding
  double worst_ratio = 0.0;  // max over elements of |out - ref| / its bound
  int64_t worst_index = -1;
};

// Compares out with ref: no NaN (an unwritten, poisoned element), NMSE <=
// max_nmse (over at least 256 elements; below, rel^2), and |out - ref| <= rel * |ref| + abs_floor for every
// element. With rounding_rel > 0 (the relative error one output rounding may make, as a bound) it also checks
// the bias, the least-squares scale of the error: rounding to nearest is unbiased, so its bias is noise of
// standard deviation about sqrt(sum ref^4 * rounding_rel^2 / 3) / sum ref^2, and more than 8 of those is a
// scale error (a 0.1% one shows over 10^5 elements, where the NMSE and the per-element bound, at bf16's
// resolution, cannot see it). Prints the figures. `what` names the case in failures. bias_floor is added to
// that allowance (a kernel whose own math is biased below the rounding, as tensor-core sums may be, states
// how much).
inline Comparison expect_close(const std::vector<float>& out, const std::vector<float>& ref, double max_nmse,
                               double rel, double abs_floor, const std::string& what,
                               double rounding_rel = 0.0, double bias_floor = 1e-6) {
  Comparison c;
  EXPECT_EQ(out.size(), ref.size()) << what;
  if (out.size() != ref.size()) return c;
  double err = 0.0, norm = 0.0, cross = 0.0, norm4 = 0.0;
  int64_t bad = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (std::isnan(out[i]) || std::isnan(ref[i])) {
      if (bad++ == 0)
        ADD_FAILURE() << what << ": NaN at element " << i << " (out " << out[i] << ", ref " << ref[i] << ")";
      continue;
    }
    const double d = static_cast<double>(out[i]) - ref[i];
    const double r2 = static_cast<double>(ref[i]) * ref[i];
    err += d * d;
    norm += r2;
    cross += d * ref[i];
    norm4 += r2 * r2;
    const double bound = rel * std::fabs(ref[i]) + abs_floor;
    const double ratio = std::fabs(d) / bound;
    if (ratio > c.worst_ratio) {
      c.worst_ratio = ratio;
      c.worst_index = static_cast<int64_t>(i);
    }
  }
  EXPECT_EQ(bad, 0) << what << ": NaN elements";
  c.nmse = err / std::max(norm, 1e-300);
  // The NMSE is a statistic of the rounding errors: over many elements it
  // sits near its mean (bf16: ~2.7e-6) and max_nmse catches errors that are
  // systematically near their bound. Over a few elements it can reach rel^2
  // with every element inside its bound (seen: 1.3e-5 over 7 bf16 values),
  // and there the per-element bound is the check.
  const double nmse_limit = out.size() >= 256 ? max_nmse : std::max(max_nmse, rel * rel);
  EXPECT_LE(c.nmse, nmse_limit) << what;
  c.bias = cross / std::max(norm, 1e-300);
  if (rounding_rel > 0.0) {
    const double sigma = std::sqrt(norm4 * rounding_rel * rounding_rel / 3.0) / std::max(norm, 1e-300);
    EXPECT_LE(std::fabs(c.bias), 8.0 * sigma + bias_floor)
        << what << ": the output is scaled by " << 1.0 + c.bias << " (noise level " << sigma << ")";
  }
  if (c.worst_index >= 0) {
    EXPECT_LE(c.worst_ratio, 1.0) << what << ": element " << c.worst_index << " is " << out[c.worst_index]
                                  << ", the reference " << ref[c.worst_index] << " (bound " << rel
                                  << " * |ref| + " << abs_floor << ")";
  }
  std::printf("    %s: NMSE %.2e, bias %+.1e, worst error %.2f of its bound\n", what.c_str(), c.nmse, c.bias,
              c.worst_ratio);
  return c;
}

// The bf16 form: the reference rounded once to bf16 is within half an ulp, the
// kernel's f32 math adds a little (rel slack) and values near 0 after a
// cancellation get abs_floor.
inline Comparison expect_close_bf16(const std::vector<float>& out, const std::vector<float>& ref,
                                    double abs_floor, const std::string& what, double bias_floor = 1e-6) {
  return expect_close(out, ref, kNmseBf16, kBf16HalfUlp * 1.01, abs_floor, what, kBf16HalfUlp, bias_floor);
}

inline double rms(const std::vector<float>& v) {
  double s = 0.0;
  for (float x : v) s += static_cast<double>(x) * x;
  return v.empty() ? 0.0 : std::sqrt(s / static_cast<double>(v.size()));
}

}  // namespace nanoserve::testing
