// gelu_tanh_mul_cuda against gelu_tanh_mul_ref (f64) over f32 copies of
// random bf16 gate/up halves: T = 1, 3, 17, 97; F = 9216 (gemma-2-2b), 15360
// (gemma-3-12b) and 6912 (gemma-3-1b) on the 16-byte path, 100 and 7 (one
// element a thread), and 6912 through a misaligned gate_up (the scalar path).
// Gates run to +-12 (tanh saturates both ways) and a few to +-100. The bf16
// output is held to the bf16 tolerance (cuda_op_check.h), NaN-filled first;
// SiLU in its place (the planted error) must fail.

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ops/cuda_op_check.h"
#include "ops/gelu_mul/gelu_mul.h"
#include "ops/gelu_mul/gelu_mul_cuda.cuh"
#include "ops/silu_mul/silu_mul_cuda.cuh"

namespace nanoserve {
namespace {

using namespace nanoserve::testing;

struct GeluCase {
  std::vector<float> out, ref;
  std::string what;
};

// Runs the kernel (or, planted, silu_mul_cuda) on one random case.
GeluCase run_gelu_mul(int64_t T, int64_t F, bool misaligned, bool plant_silu = false,
                      uint64_t seed = fresh_seed()) {
  GeluCase c;
  c.what = "T " + std::to_string(T) + " F " + std::to_string(F) +
           (misaligned ? " (gate_up misaligned)" : "") + ", seed " + std::to_string(seed);
  std::vector<float> gu = uniform_floats(T * 2 * F, seed, 12.0f);
  for (int64_t t = 0; t < T; ++t) {  // saturated gates, both signs
    gu[static_cast<size_t>(t * 2 * F)] = -100.0f;
    if (F > 1) gu[static_cast<size_t>(t * 2 * F + 1)] = 100.0f;
  }
  const std::vector<uint16_t> gu16 = to_bf16(gu);
  const std::vector<float> guf = from_bf16(gu16);
  std::vector<float> gate(static_cast<size_t>(T * F)), up(gate.size());
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t f = 0; f < F; ++f) {
      gate[static_cast<size_t>(t * F + f)] = guf[static_cast<size_t>(t * 2 * F + f)];
      up[static_cast<size_t>(t * F + f)] = guf[static_cast<size_t>(t * 2 * F + F + f)];
    }
  }
  Tensor ref = Tensor::empty(DType::kF32, {T, F});
  gelu_tanh_mul_ref(Tensor::view(gate.data(), DType::kF32, {T, F}, nullptr),
                    Tensor::view(up.data(), DType::kF32, {T, F}, nullptr), ref);
  c.ref.assign(ref.data_as<float>(), ref.data_as<float>() + T * F);

  const Tensor buf = cuda::empty(DType::kBF16, {T * 2 * F + 2});
  const Tensor gate_up = Tensor::view(buf.data_as<uint16_t>() + (misaligned ? 2 : 0), DType::kBF16,
                                      {T, 2 * F}, buf.owner(), Device::kCUDA);
  cuda::copy_to_device(Tensor::view(const_cast<uint16_t*>(gu16.data()), DType::kBF16, {T, 2 * F}, nullptr),
                       gate_up);
  const Tensor out = poisoned(DType::kBF16, {T, F});
  if (plant_silu) {
    silu_mul_cuda(gate_up, out, nullptr);
  } else {
    gelu_tanh_mul_cuda(gate_up, out, nullptr);
  }
  cuda::synchronize();
  c.out = download_f32(out);
  return c;
}

void check_gelu_mul(int64_t T, int64_t F, bool misaligned) {
  GeluCase c = run_gelu_mul(T, F, misaligned);
  SCOPED_TRACE(c.what);
  // tanhf's few ulps and the f32 cancellation of 1 + tanh near -1 (the
  // CPU's arithmetic too) stay far below bf16's rounding; the same 2e-4 bias
  // allowance as silu_mul_cuda's.
  expect_close_bf16(c.out, c.ref, 1e-6 * rms(c.ref), c.what, 2e-4);
}

TEST(GeluMulCuda, MatchesReference) {
  NS_SKIP_WITHOUT_GPU();
  for (int64_t T : {1, 3, 17, 97}) {
    for (int64_t F : {9216, 15360, 6912, 100, 7}) check_gelu_mul(T, F, false);
    check_gelu_mul(T, 6912, true);
  }
}

// The planted error: SiLU where GeLU belongs lands far from the reference,
// against the kernel on the same input. Over these gates (mostly past +-3,
// where the two agree to a few percent, and +-100 rows that dominate the
// norm) bf16 rounding alone gives NMSE 2.7e-6 and SiLU 2.5e-4 (f64 with bf16
// rounding, numpy): 95x. The H100 run (2026-12-05) measured the plant at
// 2.5e-4, below the absolute 1e-3 this test first asked for.
TEST(GeluMulCuda, SiluInItsPlaceFails) {
  NS_SKIP_WITHOUT_GPU();
  const uint64_t seed = fresh_seed();
  const GeluCase good = run_gelu_mul(17, 9216, false, false, seed);
  const GeluCase bad = run_gelu_mul(17, 9216, false, /*plant_silu=*/true, seed);
  auto nmse_of = [](const GeluCase& c) {
    double err = 0.0, norm = 0.0;
    for (size_t i = 0; i < c.ref.size(); ++i) {
      err += (c.out[i] - static_cast<double>(c.ref[i])) * (c.out[i] - static_cast<double>(c.ref[i]));
      norm += static_cast<double>(c.ref[i]) * c.ref[i];
    }
    return err / norm;
  };
  EXPECT_GT(nmse_of(bad), 20 * nmse_of(good)) << bad.what;
}

}  // namespace
}  // namespace nanoserve
