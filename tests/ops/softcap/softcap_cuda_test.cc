// softcap_cuda against cap * tanh(x / cap) in double, over logits spread to
// +-200 (past the cap 30 of Gemma 2, so tanh saturates) and an awkward count
// (R 3 x V 1000 + 7 elements, every block's tail). f32 output: tanhf's few
// ulps, relative 1e-6; the input left uncapped (the planted error) fails.

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ops/cuda_op_check.h"
#include "ops/softcap/softcap_cuda.cuh"

namespace nanoserve {
namespace {

using namespace nanoserve::testing;

TEST(SoftcapCuda, MatchesCapTimesTanh) {
  NS_SKIP_WITHOUT_GPU();
  for (const int64_t V : {1000, 1007, 262208}) {
    const uint64_t seed = fresh_seed();
    const std::string what = "V " + std::to_string(V) + ", seed " + std::to_string(seed);
    const int64_t R = 3;
    const float cap = 30.0f;
    const std::vector<float> in = uniform_floats(R * V, seed, 200.0f);
    std::vector<float> ref(in.size());
    for (size_t i = 0; i < in.size(); ++i) ref[i] = static_cast<float>(cap * std::tanh(double{in[i]} / cap));
    const Tensor x = upload(in, DType::kF32, {R, V});
    softcap_cuda(x, cap, nullptr);
    cuda::synchronize();
    const std::vector<float> out = download_f32(x);
    expect_close(out, ref, kNmseF32, 1e-6, 1e-6, what);
    // Uncapped logits are not within any such bound of these.
    double err = 0.0, norm = 0.0;
    for (size_t i = 0; i < in.size(); ++i) {
      err += (in[i] - double{ref[i]}) * (in[i] - double{ref[i]});
      norm += double{ref[i]} * ref[i];
    }
    EXPECT_GT(err / norm, 1e-2) << what << ": the uncapped input would pass";
  }
}

}  // namespace
}  // namespace nanoserve
