// gpt-oss's departures in the mixture-of-experts op (ops/moe/moe.h): the
// top-k of the router logits then a softmax over those k, the router and
// expert biases, the clamped SwiGLU. The CPU path against the double
// reference (f32 and bf16 experts, weights wide enough that the clamp bites),
// each departure seen by the comparison when left out, and batch invariance
// with all of them on.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ops/matmul/matmul.h"
#include "ops/moe/moe.h"
#include "ops/random_weights.h"

namespace nanoserve {
namespace {

using testing::encode;
using testing::f32_tensor;
using testing::nan_tensor;
using testing::random_floats;

// One layer's experts with gpt-oss's biases, stacked and seen per expert.
struct OssLayer {
  Tensor router, router_bias, gate_bias, up_bias, down_bias;
  Tensor gate3, up3, down3;
  std::vector<Tensor> gate, up, down;
  MoeExperts experts(bool biases = true) const {
    MoeExperts e{gate, up, down};
    if (biases) {
      e.router_bias = &router_bias;
      e.gate_bias = &gate_bias;
      e.up_bias = &up_bias;
      e.down_bias = &down_bias;
    }
    return e;
  }
};

// Gate and up pre-activations of std ~8: most of them beyond the limit of 7.
OssLayer make_layer(int64_t E, int64_t D, int64_t F, DType dtype, uint32_t seed) {
  OssLayer L;
  L.router = f32_tensor(random_floats(E * D, seed, 4.0f / std::sqrt(static_cast<float>(D))), {E, D});
  L.router_bias = f32_tensor(random_floats(E, seed + 5, 1.0f), {E});
  L.gate_bias = f32_tensor(random_floats(E * F, seed + 6, 1.0f), {E, F});
  L.up_bias = f32_tensor(random_floats(E * F, seed + 7, 1.0f), {E, F});
  L.down_bias = f32_tensor(random_floats(E * D, seed + 8, 1.0f), {E, D});
  L.gate3 =
      encode(random_floats(E * F * D, seed + 1, 8.0f / std::sqrt(static_cast<float>(D))), E * F, D, dtype)
          .reshape({E, F, D});
  L.up3 = encode(random_floats(E * F * D, seed + 2, 8.0f / std::sqrt(static_cast<float>(D))), E * F, D, dtype)
              .reshape({E, F, D});
  L.down3 =
      encode(random_floats(E * D * F, seed + 3, 1.0f / std::sqrt(static_cast<float>(F))), E * D, F, dtype)
          .reshape({E, D, F});
  for (int64_t e = 0; e < E; ++e) {
    L.gate.push_back(L.gate3.slice_rows(e, e + 1).reshape({F, D}));
    L.up.push_back(L.up3.slice_rows(e, e + 1).reshape({F, D}));
    L.down.push_back(L.down3.slice_rows(e, e + 1).reshape({D, F}));
  }
  return L;
}

MoeParams oss_params(int32_t k) {
  MoeParams p{k, false};
  p.gating = MoeGating::kTopKThenSoftmax;
  p.activation = MoeActivation::kClampedSwiglu;
  return p;
}

struct OssRun {
  MoeWorkspace ws;
  std::vector<std::byte> scratch;
  OssRun(int64_t T, int64_t E, int64_t k, int64_t D, int64_t F)
      : ws(make_moe_workspace(T, E, k, D, F)),
        scratch(static_cast<size_t>(moe_matmul_scratch_bytes(T, k, D, F))) {}
};

Tensor run_fast(const OssLayer& L, const Tensor& x, const MoeParams& p, ThreadPool& pool, OssRun& run) {
  Tensor y = nan_tensor({x.dim(0), x.dim(1)});
  moe_ffn(x, L.router, L.experts(), p, run.ws, y, pool, run.scratch);
  return y;
}

TEST(MoeOss, RouteTopKThenSoftmaxOverTheSelected) {
  const Tensor logits = f32_tensor({0.5f, 2.0f, -1.0f, 1.0f, /**/ 0.0f, 3.0f, -2.0f, 3.0f}, {2, 4});
  MoeWorkspace ws = make_moe_workspace(2, 4, 2, 8, 8);
  moe_route(logits, oss_params(2), ws.routing);
  EXPECT_EQ(ws.routing.ids, (std::vector<int32_t>{1, 3, 1, 3}));
  const double w0 = 1.0 / (1.0 + std::exp(1.0 - 2.0));
  EXPECT_NEAR(ws.routing.weights[0], w0, 1e-6);
  EXPECT_NEAR(ws.routing.weights[1], 1.0 - w0, 1e-6);
  EXPECT_NEAR(ws.routing.weights[2], 0.5, 1e-6);
  EXPECT_NEAR(ws.routing.weights[3], 0.5, 1e-6);
}

TEST(MoeOss, ClampedSwigluKnownValues) {
  // gate beyond the limit, below it, small; up beyond +limit and -limit.
  Tensor g = f32_tensor({9.0f, -9.0f, 0.5f, 3.0f}, {1, 4});
  const Tensor u = f32_tensor({8.0f, -8.0f, 0.25f, -7.5f}, {1, 4});
  clamped_swiglu(g, u, 1.702f, 7.0f);
  auto want = [](double gate, double up) {
    gate = std::fmin(gate, 7.0);
    up = std::fmax(-7.0, std::fmin(up, 7.0));
    return (up + 1.0) * gate / (1.0 + std::exp(-1.702 * gate));
  };
  const double expected[] = {want(9, 8), want(-9, -8), want(0.5, 0.25), want(3, -7.5)};
  for (int i = 0; i < 4; ++i)
    EXPECT_NEAR(g.data_as<float>()[i], expected[i], 1e-5 * (1 + std::fabs(expected[i])));
  EXPECT_NEAR(g.data_as<float>()[0], 8.0 * 7.0 / (1.0 + std::exp(-1.702 * 7.0)), 1e-4);  // both clamped
}

TEST(MoeOss, FastMatchesReference) {
  ThreadPool pool(3);
  const int64_t E = 8, D = 64, F = 96;
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    const OssLayer L = make_layer(E, D, F, dtype, 500);
    for (const int64_t T : {1, 5, 17}) {
      for (const int32_t k : {1, 2, 4}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " T " + std::to_string(T) + " k " + std::to_string(k));
        const Tensor x = f32_tensor(random_floats(T * D, 30 + static_cast<uint32_t>(T)), {T, D});
        OssRun run(T, E, k, D, F);
        const Tensor fast = run_fast(L, x, oss_params(k), pool, run);
        Tensor ref = nan_tensor({T, D});
        moe_ffn_ref(x, L.router, L.experts(), oss_params(k), ref);
        double scale = 0;
        for (int64_t i = 0; i < T * D; ++i) scale = std::fmax(scale, std::fabs(ref.data_as<float>()[i]));
        for (int64_t i = 0; i < T * D; ++i)
          ASSERT_NEAR(fast.data_as<float>()[i], ref.data_as<float>()[i], 2e-5 * scale) << "element " << i;
      }
    }
  }
}

// Each departure left out of the reference (or the limit moved) is far from the fast path.
TEST(MoeOss, ReferenceSeesEachDeparture) {
  ThreadPool pool(2);
  const int64_t E = 8, D = 64, F = 64, T = 6;
  const OssLayer L = make_layer(E, D, F, DType::kF32, 600);
  const Tensor x = f32_tensor(random_floats(T * D, 9), {T, D});
  OssRun run(T, E, 2, D, F);
  const Tensor fast = run_fast(L, x, oss_params(2), pool, run);
  struct Wrong {
    const char* what;
    MoeParams p;
    bool biases;
  };
  MoeParams silu = oss_params(2), limit = oss_params(2), unnormalized = oss_params(2);
  silu.activation = MoeActivation::kSilu;
  limit.swiglu_limit = 6.0f;
  unnormalized.gating = MoeGating::kSoftmaxThenTopK;  // softmax over all 8, not renormalised
  for (const Wrong& w :
       {Wrong{"top-k one short", oss_params(1), true}, Wrong{"top-k one over", oss_params(3), true},
        Wrong{"no biases", oss_params(2), false}, Wrong{"plain SwiGLU", silu, true},
        Wrong{"limit 6", limit, true}, Wrong{"softmax over all experts", unnormalized, true}}) {
    Tensor ref = nan_tensor({T, D});
    moe_ffn_ref(x, L.router, L.experts(w.biases), w.p, ref);
    double worst = 0;
    for (int64_t i = 0; i < T * D; ++i)
      worst = std::fmax(worst, std::fabs(fast.data_as<float>()[i] - ref.data_as<float>()[i]));
    EXPECT_GT(worst, 1e-1) << w.what;
  }
}

// A token's output, bit for bit, alone and in a batch of 23 whose other rows
// pick other experts, at 1 and 3 threads.
TEST(MoeOss, RowDoesNotDependOnTheBatch) {
  const int64_t E = 8, D = 64, F = 96, T = 23, at = 13;
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    const OssLayer L = make_layer(E, D, F, dtype, 700);
    const std::vector<float> x0 = random_floats(D, 11);
    ThreadPool one(1);
    OssRun alone_run(1, E, 4, D, F);
    const Tensor alone = run_fast(L, f32_tensor(x0, {1, D}), oss_params(4), one, alone_run);
    for (const int threads : {1, 3}) {
      ThreadPool pool(threads);
      std::vector<float> xs = random_floats(T * D, 12);
      std::copy(x0.begin(), x0.end(), xs.begin() + at * D);
      OssRun run(T, E, 4, D, F);
      const Tensor y = run_fast(L, f32_tensor(xs, {T, D}), oss_params(4), pool, run);
      EXPECT_EQ(std::memcmp(y.data_as<float>() + at * D, alone.data(), D * sizeof(float)), 0)
          << dtype_name(dtype) << ", " << threads << " threads";
    }
  }
}

}  // namespace
}  // namespace nanoserve
