// The mixture-of-experts op (ops/moe/moe.h): the routing rule on known
// logits, the CPU path against the double reference on F32, Q8_0 and Q4_0
// experts (views into one stacked [E, rows, cols] tensor, as a GGUF holds
// them), batch invariance, and that only the routed experts' weights are read.

#include "ops/moe/moe.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ops/matmul/matmul.h"
#include "ops/random_weights.h"

namespace nanoserve {
namespace {

using testing::encode;
using testing::f32_tensor;
using testing::nan_tensor;
using testing::random_floats;

// The experts of one layer, stacked [E, F, D] / [E, D, F] in `dtype` and
// seen through per-expert views.
struct Layer {
  Tensor router;  // [E, D] f32
  Tensor gate3, up3, down3;
  std::vector<Tensor> gate, up, down;
  MoeExperts experts() const { return {gate, up, down}; }
};

Layer make_layer(int64_t E, int64_t D, int64_t F, DType dtype, uint32_t seed, float router_scale = 1.0f) {
  Layer L;
  L.router = f32_tensor(random_floats(E * D, seed, router_scale / std::sqrt(static_cast<float>(D))), {E, D});
  L.gate3 =
      encode(random_floats(E * F * D, seed + 1, 1.0f / std::sqrt(static_cast<float>(D))), E * F, D, dtype)
          .reshape({E, F, D});
  L.up3 = encode(random_floats(E * F * D, seed + 2, 1.0f / std::sqrt(static_cast<float>(D))), E * F, D, dtype)
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

struct MoeRun {
  MoeWorkspace ws;
  std::vector<std::byte> scratch;
  MoeRun(int64_t T, int64_t E, int64_t k, int64_t D, int64_t F)
      : ws(make_moe_workspace(T, E, k, D, F)),
        scratch(static_cast<size_t>(moe_matmul_scratch_bytes(T, k, D, F))) {}
};

Tensor run_fast(const Layer& L, const Tensor& x, const MoeParams& p, ThreadPool& pool, MoeRun& run) {
  Tensor y = nan_tensor({x.dim(0), x.dim(1)});
  moe_ffn(x, L.router, L.experts(), p, run.ws, y, pool, run.scratch);
  return y;
}

TEST(Moe, RouteKnownLogits) {
  // Two tokens over 4 experts; token 1 has a tie between experts 1 and 3.
  const Tensor logits = f32_tensor({0.5f, 2.0f, -1.0f, 1.0f, /**/ 0.0f, 3.0f, -2.0f, 3.0f}, {2, 4});
  MoeWorkspace ws = make_moe_workspace(2, 4, 2, 8, 8);
  for (const bool normalize : {false, true}) {
    moe_route(logits, MoeParams{2, normalize}, ws.routing);
    const MoeRouting& r = ws.routing;
    EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 3, 1, 3}));  // highest first; the tie to the lower id
    const double s0 = std::exp(0.5) + std::exp(2.0) + std::exp(-1.0) + std::exp(1.0);
    const double p01 = std::exp(2.0) / s0, p03 = std::exp(1.0) / s0;
    const double w00 = normalize ? p01 / (p01 + p03) : p01, w01 = normalize ? p03 / (p01 + p03) : p03;
    EXPECT_NEAR(r.weights[0], w00, 1e-6);
    EXPECT_NEAR(r.weights[1], w01, 1e-6);
    EXPECT_NEAR(r.weights[2], r.weights[3], 1e-7);
    if (normalize) {
      EXPECT_NEAR(r.weights[2], 0.5, 1e-6);
    }
    // Grouped: expert 1 holds slots 0 and 2 (tokens 0, 1), expert 3 slots 1 and 3.
    EXPECT_EQ(r.offsets, (std::vector<int32_t>{0, 0, 2, 2, 4}));
    EXPECT_EQ(r.row_token, (std::vector<int32_t>{0, 1, 0, 1}));
    EXPECT_EQ(r.row_of_slot, (std::vector<int32_t>{0, 2, 1, 3}));
  }
}

TEST(Moe, RoutingGroupsEverySlotOnce) {
  const int64_t T = 37, E = 16, k = 4;
  const Tensor logits = f32_tensor(random_floats(T * E, 5, 2.0f), {T, E});
  MoeWorkspace ws = make_moe_workspace(T, E, k, 8, 8);
  moe_route(logits, MoeParams{static_cast<int32_t>(k), true}, ws.routing);
  const MoeRouting& r = ws.routing;
  ASSERT_EQ(r.offsets[E], T * k);
  for (int64_t s = 0; s < T * k; ++s) {
    const int32_t row = r.row_of_slot[s], e = r.ids[s];
    EXPECT_EQ(r.row_token[row], s / k);
    EXPECT_GE(row, r.offsets[e]);
    EXPECT_LT(row, r.offsets[e + 1]);
  }
  for (int64_t t = 0; t < T; ++t) {
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) {
      sum += r.weights[t * k + j];
      if (j > 0) {
        EXPECT_GE(r.weights[t * k + j - 1], r.weights[t * k + j]);  // ranks by weight
      }
      for (int64_t i = 0; i < j; ++i) {
        EXPECT_NE(r.ids[t * k + i], r.ids[t * k + j]);
      }
    }
    EXPECT_NEAR(sum, 1.0f, 1e-6f);
  }
}

// The CPU path against the reference. f32 experts agree to f32 rounding;
// quantized ones are dotted against 8-bit activations (ops/matmul), which
// the reference does not quantize: a few percent of the output's scale.
TEST(Moe, FastMatchesReference) {
  ThreadPool pool(3);
  const int64_t E = 8, D = 64, F = 96;
  struct Case {
    DType dtype;
    float tol;
  };
  for (const Case c : {Case{DType::kF32, 2e-5f}, Case{DType::kQ8_0, 2e-2f}, Case{DType::kQ4_0, 6e-2f}}) {
    const Layer L = make_layer(E, D, F, c.dtype, 100, 4.0f);
    for (const int64_t T : {1, 5, 17}) {
      for (const int32_t k : {1, 2, 3, 8}) {
        for (const bool normalize : {false, true}) {
          SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " T " + std::to_string(T) + " k " +
                       std::to_string(k) + (normalize ? " normalized" : ""));
          const Tensor x = f32_tensor(random_floats(T * D, 7 + static_cast<uint32_t>(T)), {T, D});
          const MoeParams p{k, normalize};
          MoeRun run(T, E, k, D, F);
          const Tensor fast = run_fast(L, x, p, pool, run);
          Tensor ref = nan_tensor({T, D});
          moe_ffn_ref(x, L.router, L.experts(), p, ref);
          double scale = 0;
          for (int64_t i = 0; i < T * D; ++i) scale = std::fmax(scale, std::fabs(ref.data_as<float>()[i]));
          for (int64_t i = 0; i < T * D; ++i) {
            ASSERT_NEAR(fast.data_as<float>()[i], ref.data_as<float>()[i], c.tol * scale) << "element " << i;
          }
        }
      }
    }
  }
}

// A planted error the comparison sees: the reference with top_k one less,
// or without the normalisation, is far from the fast path.
TEST(Moe, ReferenceSeesTopKAndNormalisation) {
  ThreadPool pool(2);
  const int64_t E = 8, D = 64, F = 64, T = 6;
  const Layer L = make_layer(E, D, F, DType::kF32, 300, 4.0f);
  const Tensor x = f32_tensor(random_floats(T * D, 9), {T, D});
  MoeRun run(T, E, 3, D, F);
  const Tensor fast = run_fast(L, x, MoeParams{3, true}, pool, run);
  for (const MoeParams wrong : {MoeParams{2, true}, MoeParams{4, true}, MoeParams{3, false}}) {
    Tensor ref = nan_tensor({T, D});
    moe_ffn_ref(x, L.router, L.experts(), wrong, ref);
    double worst = 0;
    for (int64_t i = 0; i < T * D; ++i)
      worst = std::fmax(worst, std::fabs(fast.data_as<float>()[i] - ref.data_as<float>()[i]));
    EXPECT_GT(worst, 1e-2) << "top_k " << wrong.top_k << (wrong.normalize ? " normalized" : "");
  }
}

// A token's output, bit for bit, alone and in batches whose other rows pick
// the same experts (copies of it) or others (random rows), at 1 and 3 threads.
TEST(Moe, RowDoesNotDependOnTheBatch) {
  const int64_t E = 8, D = 64, F = 96;
  for (const DType dtype : {DType::kF32, DType::kQ8_0, DType::kQ4_0}) {
    const Layer L = make_layer(E, D, F, dtype, 400, 4.0f);
    for (const bool prepared : {false, true}) {
      if (prepared) {
        for (const Tensor& t : L.gate) matmul_prepare(t);
        for (const Tensor& t : L.up) matmul_prepare(t);
        for (const Tensor& t : L.down) matmul_prepare(t);
      }
      const std::vector<float> x0 = random_floats(D, 11);
      ThreadPool one(1);
      MoeRun alone_run(1, E, 2, D, F);
      const Tensor alone = run_fast(L, f32_tensor(x0, {1, D}), MoeParams{2, true}, one, alone_run);
      const int32_t e0 = alone_run.ws.routing.ids[0];
      const int32_t e1 = alone_run.ws.routing.ids[1];
      for (const int threads : {1, 3}) {
        ThreadPool pool(threads);
        for (const bool same : {true, false}) {
          const int64_t T = 23, at = 13;
          std::vector<float> xs = random_floats(T * D, 12);
          for (int64_t t = 0; t < T; ++t) {
            if (same || t == at) std::copy(x0.begin(), x0.end(), xs.begin() + t * D);
          }
          MoeRun run(T, E, 2, D, F);
          const Tensor y = run_fast(L, f32_tensor(xs, {T, D}), MoeParams{2, true}, pool, run);
          EXPECT_EQ(run.ws.routing.ids[at * 2], e0);
          EXPECT_EQ(run.ws.routing.ids[at * 2 + 1], e1);
          if (!same) {  // the other rows do route elsewhere too
            int elsewhere = 0;
            for (int64_t s = 0; s < T * 2; ++s)
              elsewhere += run.ws.routing.ids[s] != e0 && run.ws.routing.ids[s] != e1;
            EXPECT_GT(elsewhere, 0);
          }
          EXPECT_EQ(std::memcmp(y.data_as<float>() + at * D, alone.data(), D * sizeof(float)), 0)
              << dtype_name(dtype) << (prepared ? " prepared" : "") << ", " << threads << " threads, "
              << (same ? "same experts" : "other experts");
        }
      }
    }
  }
}

// Each expert's f32 weights on pages of their own; the experts no token
// routes to are made unreadable (PROT_NONE) before the call, so reading
// them would fault. MoeRun in a child process (a death-test harness) so that a
// fault fails this test alone.
TEST(Moe, ReadsOnlyTheRoutedExperts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const int64_t E = 8, D = 64, F = 64, T = 2, k = 2;
  const Layer L = make_layer(E, D, F, DType::kF32, 500, 4.0f);
  const Tensor x = f32_tensor(random_floats(T * D, 13), {T, D});
  ThreadPool pool0(1);
  MoeRun first(T, E, k, D, F);
  const Tensor want = run_fast(L, x, MoeParams{k, true}, pool0, first);
  std::vector<bool> routed(E, false);
  for (int32_t e : first.ws.routing.ids) routed[static_cast<size_t>(e)] = true;
  int unrouted = 0;
  for (bool r : routed) unrouted += !r;
  ASSERT_GE(unrouted, 4);

  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t bytes = static_cast<size_t>(F * D) * sizeof(float);
  const size_t span = (bytes + page - 1) / page * page;
  auto child = [&]() {
    std::vector<Tensor> gate, up, down;
    std::vector<void*> maps;
    for (int64_t e = 0; e < E; ++e) {
      for (auto [src, dst] : {std::pair{&L.gate, &gate}, std::pair{&L.up, &up}, std::pair{&L.down, &down}}) {
        void* m = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) std::exit(3);
        std::memcpy(m, (*src)[static_cast<size_t>(e)].data(), bytes);
        if (!routed[static_cast<size_t>(e)] && mprotect(m, span, PROT_NONE) != 0) std::exit(4);
        dst->push_back(Tensor::view(m, DType::kF32, (*src)[static_cast<size_t>(e)].shape(), nullptr));
      }
    }
    ThreadPool pool(2);
    MoeRun run(T, E, k, D, F);
    Tensor y = nan_tensor({T, D});
    moe_ffn(x, L.router, MoeExperts{gate, up, down}, MoeParams{k, true}, run.ws, y, pool, run.scratch);
    std::exit(std::memcmp(y.data(), want.data(), static_cast<size_t>(T * D) * sizeof(float)) == 0 ? 0 : 5);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace nanoserve
