// silu_mul_cuda against silu_mul_ref (f64) over f32 copies of random bf16
// gate/up halves: T = 1, 3, 17, 97, 300; F = 1536 (SmolLM2), 14336 (Llama-3-8B)
// and 28672 (the 16-byte path), 100 and 7 (one element a thread), and 1536
// through a misaligned gate_up (the scalar path). Gates run to +-12 and a few
// to +-100 (exp overflows f32 there: silu must still be finite). The bf16
// output is held to the bf16 tolerance (cuda_op_check.h), NaN-filled first.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/cuda_op_check.h"
#include "ops/silu_mul/silu_mul.h"
#include "ops/silu_mul/silu_mul_cuda.cuh"

namespace nanoserve {
namespace {

using namespace nanoserve::testing;

void check_silu_mul(int64_t T, int64_t F, bool misaligned) {
  const uint64_t seed = fresh_seed();
  const std::string what = "T " + std::to_string(T) + " F " + std::to_string(F) +
                           (misaligned ? " (gate_up misaligned)" : "") + ", seed " + std::to_string(seed);
  SCOPED_TRACE(what);
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
  silu_mul_ref(Tensor::view(gate.data(), DType::kF32, {T, F}, nullptr),
               Tensor::view(up.data(), DType::kF32, {T, F}, nullptr), ref);
  const std::vector<float> ref_v(ref.data_as<float>(), ref.data_as<float>() + T * F);

  const Tensor buf = cuda::empty(DType::kBF16, {T * 2 * F + 2});
  const Tensor gate_up = Tensor::view(buf.data_as<uint16_t>() + (misaligned ? 2 : 0), DType::kBF16,
                                      {T, 2 * F}, buf.owner(), Device::kCUDA);
  cuda::copy_to_device(Tensor::view(const_cast<uint16_t*>(gu16.data()), DType::kBF16, {T, 2 * F}, nullptr),
                       gate_up);
  const Tensor out = poisoned(DType::kBF16, {T, F});
  silu_mul_cuda(gate_up, out, nullptr);
  cuda::synchronize();
  // The kernel's f32 expf and division are a little biased against the
  // double reference: 4.8e-5 (relative) was measured on the H200 at T 300,
  // F 14336, just past the pure-rounding allowance. 2e-4 allows that and still
  // fails a 0.1% scale error.
  expect_close_bf16(download_f32(out), ref_v, 1e-6 * rms(ref_v), what, 2e-4);
}

TEST(SiluMulCuda, MatchesReference) {
  NS_SKIP_WITHOUT_GPU();
  for (int64_t T : {1, 3, 17, 97, 300}) {
    for (int64_t F : {1536, 14336, 100, 7}) check_silu_mul(T, F, false);
    check_silu_mul(T, 1536, true);
  }
  check_silu_mul(3, 28672, false);
}

}  // namespace
}  // namespace nanoserve
