// GemmCuda (cuBLASLt) against matmul_ref (f64 dot products) over f32 copies of
// the bf16 inputs, for the linear shapes of SmolLM2-135M and Llama-3-8B, the
// lm_heads (f32 logits), and shapes that are not multiples of 8; M = 1, 3, 17,
// 97, 300. Weights are filled on the device (fill_uniform_cuda) and the
// reference recomputes the sampled rows on the host (fill_uniform_value), so
// a 1 GB lm_head costs no host memory; large N are checked on 160 sampled
// output columns (the first, the last and random others), every output element
// for NaN (y is NaN-filled first).
//
// Tolerances. bf16 y: as every bf16 output (cuda_op_check.h), with an
// absolute floor of 1e-3 of the output's RMS for sums that cancel. f32 y: NMSE
// 1e-6 and 1e-3 relative per element (plus 1e-3 of the RMS): tensor cores add
// in f32 but need not round like a sequential f32 sum, so only the order of
// 1e-5 relative is claimed; a 3% (NMSE 9e-4) or a 0.3% (1e-5) scale error still
// fails. For the same reason the bf16 bias check allows 2e-4 (check_gemm).
//
// Batch invariance is reported, and asserted for GemmPolicy::kBatchInvariant.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "ops/cuda_op_check.h"
#include "ops/fill/fill.h"
#include "ops/fill/fill_cuda.cuh"
#include "ops/matmul/linear_cuda.cuh"
#include "ops/matmul/matmul.h"
#include "ops/matmul/matmul_cuda.cuh"
#include "ops/rmsnorm/rmsnorm_cuda.cuh"
#include "ops/silu_mul/silu_mul_cuda.cuh"

namespace nanoserve {
namespace {

using namespace nanoserve::testing;

constexpr double kNmseGemmF32 = 1e-6;

struct Weight {
  Tensor dev;  // [N, K] bf16
  uint64_t seed;
  int64_t N, K;
  // Row n as the f32 values the bf16 tensor holds.
  std::vector<float> row(int64_t n) const {
    std::vector<float> r(static_cast<size_t>(K));
    for (int64_t k = 0; k < K; ++k) {
      r[k] = bf16_to_f32(f32_to_bf16(fill_uniform_value(seed, static_cast<uint64_t>(n * K + k), 1.0f)));
    }
    return r;
  }
};

Weight make_weight(int64_t N, int64_t K) {
  Weight w{cuda::empty(DType::kBF16, {N, K}), fresh_seed(), N, K};
  fill_uniform_cuda(w.dev, w.seed, 1.0f, nullptr);
  return w;
}

// The output columns checked against the reference.
std::vector<int64_t> sample_columns(int64_t N, std::mt19937_64& rng) {
  std::vector<int64_t> cols;
  if (N <= 256) {
    for (int64_t n = 0; n < N; ++n) cols.push_back(n);
    return cols;
  }
  cols = {0, 1, N - 2, N - 1};
  std::uniform_int_distribution<int64_t> pick(0, N - 1);
  while (cols.size() < 160) cols.push_back(pick(rng));
  std::sort(cols.begin(), cols.end());
  cols.erase(std::unique(cols.begin(), cols.end()), cols.end());
  return cols;
}

// y = x . w^T by `mm` (a GemmCuda or linear_cuda) against the reference.
template <typename Matmul>
void check_matmul(Matmul&& mm, const Weight& w, int64_t M, DType y_dtype) {
  const int64_t N = w.N, K = w.K;
  const uint64_t seed = fresh_seed();
  const std::string what = "y[" + std::to_string(M) + ", " + std::to_string(N) + "] " + dtype_name(y_dtype) +
                           " K " + std::to_string(K) + ", seeds " + std::to_string(seed) + "/" +
                           std::to_string(w.seed);
  SCOPED_TRACE(what);
  std::mt19937_64 rng(seed);
  const std::vector<uint16_t> x16 = to_bf16(uniform_floats(M * K, seed, 1.0f));
  const Tensor x = upload(x16, DType::kBF16, {M, K});
  const Tensor y = poisoned(y_dtype, {M, N});
  mm(x, w.dev, y);
  cuda::synchronize();
  const std::vector<float> got = download_f32(y);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_FALSE(std::isnan(got[i])) << "y[" << i / N << ", " << i % N << "] is NaN (unwritten?)";
  }

  const std::vector<int64_t> cols = sample_columns(N, rng);
  const int64_t C = static_cast<int64_t>(cols.size());
  std::vector<float> w_rows;
  for (int64_t n : cols) {
    const std::vector<float> r = w.row(n);
    w_rows.insert(w_rows.end(), r.begin(), r.end());
  }
  std::vector<float> xf = from_bf16(x16);
  Tensor ref = Tensor::empty(DType::kF32, {M, C});
  matmul_ref(Tensor::view(w_rows.data(), DType::kF32, {C, K}, nullptr),
             Tensor::view(xf.data(), DType::kF32, {M, K}, nullptr), ref);
  std::vector<float> ref_v(ref.data_as<float>(), ref.data_as<float>() + M * C), got_v;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n : cols) got_v.push_back(got[static_cast<size_t>(m * N + n)]);
  }
  const double floor = 1e-3 * rms(ref_v);
  if (y_dtype == DType::kBF16) {
    // Bias allowance 2e-4: tensor cores may truncate their running f32 sum
    // once per k-step (toward zero), about -0.5 ulp a step: -4e-5 over 14336.
    expect_close_bf16(got_v, ref_v, floor, what, 2e-4);
  } else {
    expect_close(got_v, ref_v, kNmseGemmF32, 1e-3, floor, what);
  }
}

void check_gemm(GemmCuda& gemm, const Weight& w, int64_t M, DType y_dtype) {
  check_matmul([&](const Tensor& x, const Tensor& wt, const Tensor& y) { gemm.matmul(x, wt, y, nullptr); }, w,
               M, y_dtype);
}

void check_linear(const Weight& w, int64_t M, DType y_dtype) {
  check_matmul([](const Tensor& x, const Tensor& wt, const Tensor& y) { linear_cuda(x, wt, y, nullptr); }, w,
               M, y_dtype);
}

struct GemmShape {
  const char* name;
  int64_t N, K;
  DType y_dtype;
};

const GemmShape kSmolShapes[] = {
    {"smol qkv", 960, 576, DType::kBF16},      {"smol o", 576, 576, DType::kBF16},
    {"smol gate_up", 3072, 576, DType::kBF16}, {"smol down", 576, 1536, DType::kBF16},
    {"smol lm_head", 49152, 576, DType::kF32},
};
const GemmShape kLlamaShapes[] = {
    {"llama qkv", 6144, 4096, DType::kBF16},      {"llama o", 4096, 4096, DType::kBF16},
    {"llama gate_up", 28672, 4096, DType::kBF16}, {"llama down", 4096, 14336, DType::kBF16},
    {"llama lm_head", 128256, 4096, DType::kF32},
};

TEST(GemmCuda, SmolLm2ShapesMatchReference) {
  NS_SKIP_WITHOUT_GPU();
  GemmCuda gemm;
  for (const GemmShape& s : kSmolShapes) {
    SCOPED_TRACE(s.name);
    const Weight w = make_weight(s.N, s.K);
    for (int64_t M : {1, 3, 17, 97, 300}) {
      check_gemm(gemm, w, M, s.y_dtype);
      check_gemm(gemm, w, M, s.y_dtype == DType::kF32 ? DType::kBF16 : DType::kF32);  // the other y dtype
    }
  }
}

TEST(GemmCuda, Llama3ShapesMatchReference) {
  NS_SKIP_WITHOUT_GPU();
  GemmCuda gemm;
  for (const GemmShape& s : kLlamaShapes) {
    SCOPED_TRACE(s.name);
    const Weight w = make_weight(s.N, s.K);
    for (int64_t M : {1, 17, 300}) check_gemm(gemm, w, M, s.y_dtype);
  }
}

TEST(GemmCuda, ShapesNotMultiplesOfEightMatchReference) {
  NS_SKIP_WITHOUT_GPU();
  GemmCuda gemm;
  for (auto [N, K] : {std::pair<int64_t, int64_t>{49, 100}, {37, 36}, {1001, 576}, {576, 1003}}) {
    const Weight w = make_weight(N, K);
    for (int64_t M : {1, 3, 17, 97, 300}) {
      check_gemm(gemm, w, M, DType::kBF16);
      check_gemm(gemm, w, M, DType::kF32);
    }
  }
}

// A repeated step is served from the table; past its capacity, replaced
// entries still give right answers.
TEST(GemmCuda, AlgorithmTableHitsAndReplaces) {
  NS_SKIP_WITHOUT_GPU();
  GemmCuda gemm;
  const Weight a = make_weight(576, 576), b = make_weight(64, 48);
  for (int64_t M : {1, 8}) check_gemm(gemm, a, M, DType::kBF16);
  const int64_t misses = gemm.cache_misses();
  EXPECT_EQ(misses, 2);
  for (int round = 0; round < 3; ++round) {
    for (int64_t M : {1, 8}) check_gemm(gemm, a, M, DType::kBF16);
  }
  EXPECT_EQ(gemm.cache_misses(), misses) << "a repeated step looked the heuristic up again";
  // More distinct problems than the table holds, then the first ones again.
  for (int64_t M = 1; M <= GemmCuda::kCacheCapacity + 44; ++M) {
    const Tensor x = upload(to_bf16(uniform_floats(M * 48, static_cast<uint64_t>(M))), DType::kBF16, {M, 48});
    const Tensor y = poisoned(DType::kF32, {M, 64});
    gemm.matmul(x, b.dev, y, nullptr);
  }
  cuda::synchronize();
  EXPECT_GE(gemm.cache_misses(), misses + GemmCuda::kCacheCapacity + 44);
  for (int64_t M : {1, 2, 3, 150, 300}) check_gemm(gemm, b, M, DType::kF32);
}

// Rows 0..M-1 of a batch of M against the same rows of a batch of 300, bitwise,
// for each M; prints what cuBLASLt chose per M. Returns the Ms whose rows differ.
std::vector<int64_t> rows_that_depend_on_m(GemmCuda& gemm, int64_t N, int64_t K) {
  const Weight w = make_weight(N, K);
  const int64_t max_m = 300;
  const Tensor x = upload(to_bf16(uniform_floats(max_m * K, fresh_seed())), DType::kBF16, {max_m, K});
  const Tensor y_all = poisoned(DType::kBF16, {max_m, N});
  gemm.matmul(x, w.dev, y_all, nullptr);
  cuda::synchronize();
  const std::vector<uint16_t> all = download<uint16_t>(y_all);
  std::vector<int64_t> differ;
  for (int64_t M : {1, 2, 3, 8, 17, 32, 64, 97, 128, 255, 300}) {
    const Tensor y = poisoned(DType::kBF16, {M, N});
    gemm.matmul(x.slice_rows(0, M), w.dev, y, nullptr);
    cuda::synchronize();
    const std::vector<uint16_t> got = download<uint16_t>(y);
    const bool same = std::equal(got.begin(), got.end(), all.begin());
    if (!same) differ.push_back(M);
    const GemmAlgoInfo a = gemm.algo_info(M, N, K, DType::kBF16);
    std::printf(
        "    N %lld K %lld M %3lld: algo %d tile %u stages %u splitK %d reduction %u cluster %u "
        "workspace %lld: rows %s the M = 300 rows\n",
        static_cast<long long>(N), static_cast<long long>(K), static_cast<long long>(M), a.algo_id, a.tile_id,
        a.stages_id, a.splitk, a.reduction_scheme, static_cast<unsigned>(a.cluster_shape_id),
        static_cast<long long>(a.workspace_bytes), same ? "bitwise equal to" : "DIFFER from");
  }
  return differ;
}

TEST(GemmCuda, ReportsWhetherRowsDependOnBatchSize) {
  NS_SKIP_WITHOUT_GPU();
  GemmCuda gemm;  // kPerShape: whatever the heuristic picks per M
  for (auto [N, K] : {std::pair<int64_t, int64_t>{4096, 4096}, {4096, 14336}}) {
    const std::vector<int64_t> differ = rows_that_depend_on_m(gemm, N, K);
    std::string ms;
    for (int64_t m : differ) {
      ms += ' ';
      ms += std::to_string(m);
    }
    ::testing::Test::RecordProperty("per_shape_batch_dependent_m_" + std::to_string(K), ms);
    std::printf("    kPerShape, N %lld K %lld: rows depend on M for M =%s\n", static_cast<long long>(N),
                static_cast<long long>(K), differ.empty() ? " (none)" : ms.c_str());
  }
  // What is asserted here: the report ran and the table answered every M.
  EXPECT_GT(gemm.cache_misses(), 0);
}

TEST(GemmCuda, BatchInvariantPolicyRowsDoNotDependOnBatchSize) {
  NS_SKIP_WITHOUT_GPU();
  GemmCuda gemm(32 << 20, GemmPolicy::kBatchInvariant);
  for (auto [N, K] : {std::pair<int64_t, int64_t>{4096, 4096}, {4096, 14336}}) {
    const std::vector<int64_t> differ = rows_that_depend_on_m(gemm, N, K);
    std::string ms;
    for (int64_t m : differ) {
      ms += ' ';
      ms += std::to_string(m);
    }
    EXPECT_TRUE(differ.empty()) << "N " << N << " K " << K << ": rows depend on M for M =" << ms;
    GemmAlgoInfo anchor = gemm.algo_info(GemmCuda::kInvariantAnchorM, N, K, DType::kBF16);
    GemmAlgoInfo one = gemm.algo_info(1, N, K, DType::kBF16);
    anchor.workspace_bytes = one.workspace_bytes = 0;  // the same kernel may need less scratch at M = 1
    EXPECT_EQ(one, anchor) << "M = 1 runs another kernel than the anchor";
    EXPECT_LE(anchor.splitk, 1);
  }
  EXPECT_EQ(gemm.invariance_fallbacks(), 0);
  // And it is still right.
  const Weight w = make_weight(4096, 4096);
  for (int64_t M : {1, 17, 300}) check_gemm(gemm, w, M, DType::kBF16);
}

// ---- linear_cuda: our own kernel ---------------------------------------------------

TEST(LinearCuda, SmolLm2ShapesMatchReference) {
  NS_SKIP_WITHOUT_GPU();
  for (const GemmShape& s : kSmolShapes) {
    SCOPED_TRACE(s.name);
    const Weight w = make_weight(s.N, s.K);
    for (int64_t M : {1, 3, 8, 9, 17, 33, 64, 65, 97, 300}) {
      check_linear(w, M, s.y_dtype);
      check_linear(w, M, s.y_dtype == DType::kF32 ? DType::kBF16 : DType::kF32);
    }
  }
}

TEST(LinearCuda, Llama3ShapesMatchReference) {
  NS_SKIP_WITHOUT_GPU();
  for (const GemmShape& s : kLlamaShapes) {
    SCOPED_TRACE(s.name);
    const Weight w = make_weight(s.N, s.K);
    for (int64_t M : {1, 8, 17, 64, 300}) check_linear(w, M, s.y_dtype);
  }
}

// Rows 0..M-1 of a batch of M against the same rows of a batch of 1,030,
// bitwise, for M on both sides of every tile and group boundary, both y dtypes
// and both row tilings (N % 32 == 0 and N % 32 == 16).
TEST(LinearCuda, RowsDoNotDependOnBatchSize) {
  NS_SKIP_WITHOUT_GPU();
  for (auto [N, K] : {std::pair<int64_t, int64_t>{4096, 4096}, {4096, 14336}, {976, 576}}) {
    const Weight w = make_weight(N, K);
    const int64_t max_m = 1030;
    const Tensor x = upload(to_bf16(uniform_floats(max_m * K, fresh_seed())), DType::kBF16, {max_m, K});
    for (DType yd : {DType::kBF16, DType::kF32}) {
      const Tensor y_all = poisoned(yd, {max_m, N});
      linear_cuda(x, w.dev, y_all, nullptr);
      cuda::synchronize();
      const std::vector<float> all = download_f32(y_all);  // bf16 widens exactly
      for (int64_t M : {1, 2, 7, 8, 9, 16, 17, 32, 33, 63, 64, 65, 128, 129, 257, 300, 1029}) {
        const Tensor y = poisoned(yd, {M, N});
        linear_cuda(x.slice_rows(0, M), w.dev, y, nullptr);
        cuda::synchronize();
        const std::vector<float> got = download_f32(y);
        EXPECT_EQ(std::memcmp(got.data(), all.data(), got.size() * sizeof(float)), 0)
            << "N " << N << " K " << K << " " << dtype_name(yd) << ": rows of M = " << M
            << " differ from the same rows of M = " << max_m;
      }
    }
  }
}

// Forced onto the streaming and onto the tiled kernel, the same problem gives
// the same bits (the kernels compute every element with the same operations).
void expect_kernels_agree(int64_t N, int64_t K, std::initializer_list<int64_t> Ms) {
  const Weight w = make_weight(N, K);
  for (int64_t M : Ms) {
    const Tensor x = upload(to_bf16(uniform_floats(M * K, fresh_seed())), DType::kBF16, {M, K});
    for (DType yd : {DType::kBF16, DType::kF32}) {
      std::vector<float> first;
      for (LinearPath p :
           {LinearPath::kStream, LinearPath::kTile128x64, LinearPath::kTile128x128, LinearPath::kTile128x256,
            LinearPath::kTile256x128, LinearPath::kTile128x128WholeK, LinearPath::kTile128x64WholeK}) {
        const Tensor y = poisoned(yd, {M, N});
        linear_cuda(x, w.dev, y, nullptr, p);
        cuda::synchronize();
        const std::vector<float> got = download_f32(y);
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_FALSE(std::isnan(got[i]))
              << "path " << static_cast<int>(p) << ": y[" << i / N << ", " << i % N << "] unwritten";
        }
        if (first.empty()) {
          first = got;
          continue;
        }
        size_t diff = 0;
        for (size_t i = 0; i < got.size(); ++i) diff += std::memcmp(&got[i], &first[i], sizeof(float)) != 0;
        EXPECT_EQ(diff, 0u) << "N " << N << " K " << K << " M " << M << " " << dtype_name(yd) << ": path "
                            << static_cast<int>(p) << " differs from the streaming kernel in " << diff
                            << " of " << got.size() << " elements";
      }
    }
  }
}

// M on both sides of the tiles, N not a multiple of the 128-row tile, K of 9
// chunks (slices of 2, 2, 2 and 3).
TEST(LinearCuda, KernelsAgreeBitForBit) {
  NS_SKIP_WITHOUT_GPU();
  expect_kernels_agree(6144, 4096, {1, 5, 16, 40, 64, 65, 130, 257});
  expect_kernels_agree(976, 576, {1, 5, 16, 40, 64, 65, 130, 257});
  expect_kernels_agree(4096, 14336, {1, 33, 64, 130});
}

// The same on a problem small enough for compute-sanitizer's racecheck.
TEST(LinearCuda, KernelsAgreeOnASmallProblem) {
  NS_SKIP_WITHOUT_GPU();
  expect_kernels_agree(272, 576, {40, 70, 140});
}

// The SwiGLU read as the linear's input gives the bits of silu_mul_cuda then
// linear_cuda, on the streaming kernel and the tiles, with gates up to +-4 so
// that silu is far from linear.
TEST(LinearCuda, SwiGLUInputEqualsSiluMulThenLinear) {
  NS_SKIP_WITHOUT_GPU();
  for (auto [N, K] : {std::pair<int64_t, int64_t>{976, 576}, {4096, 14336}}) {
    const Weight w = make_weight(N, K);
    for (int64_t M : {1, 5, 16, 33, 64, 130}) {
      std::vector<float> gu = uniform_floats(M * 2 * K, fresh_seed());
      for (float& v : gu) v *= 4.0f;
      const Tensor gate_up = upload(to_bf16(gu), DType::kBF16, {M, 2 * K});
      const Tensor act = cuda::empty(DType::kBF16, {M, K});
      silu_mul_cuda(gate_up, act, nullptr);
      for (LinearPath p :
           {LinearPath::kAuto, LinearPath::kStream, LinearPath::kTile128x64, LinearPath::kTile256x128,
            LinearPath::kTile128x128WholeK, LinearPath::kTile128x64WholeK}) {
        const Tensor want = poisoned(DType::kBF16, {M, N}), got = poisoned(DType::kBF16, {M, N});
        linear_cuda(act, w.dev, want, nullptr, p);
        linear_swiglu_cuda(gate_up, w.dev, got, nullptr, p);
        cuda::synchronize();
        const std::vector<float> a = download_f32(want), b = download_f32(got);
        size_t diff = 0;
        for (size_t i = 0; i < a.size(); ++i) diff += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
        EXPECT_EQ(diff, 0u) << "N " << N << " K " << K << " M " << M << " path " << static_cast<int>(p)
                            << ": " << diff << " of " << a.size() << " elements differ";
      }
    }
  }
  const Tensor w = cuda::empty(DType::kBF16, {64, 128});
  EXPECT_TRUE(linear_swiglu_cuda_supports(cuda::empty(DType::kBF16, {3, 256}), w,
                                          cuda::empty(DType::kBF16, {3, 64})));
  EXPECT_FALSE(linear_swiglu_cuda_supports(cuda::empty(DType::kBF16, {3, 128}), w,
                                           cuda::empty(DType::kBF16, {3, 64})));  // gate_up is [M, 2K]
}

// A norm that writes the tiled kernel's k order, then linear_cuda_permuted
// (no permute pass), gives the bits of the natural norm through linear_cuda;
// and that output is the natural one with word 8 t + c of each 64-wide chunk
// moved to word 4 c + t (written out here, not through the kernels' helper);
// with and without the residual add, which must leave x the same.
TEST(LinearCuda, PermutedNormOutputEqualsNaturalThenLinear) {
  NS_SKIP_WITHOUT_GPU();
  for (auto [N, K] : {std::pair<int64_t, int64_t>{976, 576}, {6144, 4096}}) {
    const Weight w = make_weight(N, K);
    const Tensor g = upload(uniform_floats(K, fresh_seed()), DType::kF32, {K});
    for (int64_t M : {17, 33, 64, 300}) {
      const std::vector<float> x0 = uniform_floats(M * K, fresh_seed(), 3.0f);
      const Tensor delta = upload(to_bf16(uniform_floats(M * K, fresh_seed())), DType::kBF16, {M, K});
      for (const bool add : {false, true}) {
        const Tensor xa = upload(x0, DType::kF32, {M, K}), xb = upload(x0, DType::kF32, {M, K});
        const Tensor na = poisoned(DType::kBF16, {M, K}), nb = poisoned(DType::kBF16, {M, K});
        if (add) {
          add_rmsnorm_cuda(xa, delta, g, 1e-5f, na, nullptr);
          add_rmsnorm_cuda(xb, delta, g, 1e-5f, nb, nullptr, RmsNormOut::kLinearTiled);
        } else {
          rmsnorm_cuda(xa, g, 1e-5f, na, nullptr);
          rmsnorm_cuda(xb, g, 1e-5f, nb, nullptr, RmsNormOut::kLinearTiled);
        }
        const Tensor ya = poisoned(DType::kBF16, {M, N}), yb = poisoned(DType::kBF16, {M, N});
        linear_cuda(na, w.dev, ya, nullptr);
        linear_cuda_permuted(nb, w.dev, yb, nullptr);
        cuda::synchronize();
        const std::string what = "N " + std::to_string(N) + " K " + std::to_string(K) + " M " +
                                 std::to_string(M) + (add ? " with the add" : "");
        EXPECT_TRUE(download_f32(xa) == download_f32(xb)) << what << ": x after the norm";
        const std::vector<float> a = download_f32(na), b = download_f32(nb);
        size_t moved_wrong = 0;
        for (int64_t m = 0; m < M; ++m) {
          for (int64_t k = 0; k < K; ++k) {
            const int64_t chunk = k / 64, word = k % 64 / 2, t = word / 8, c = word % 8;
            const int64_t to = m * K + chunk * 64 + 2 * (4 * c + t) + k % 2;
            moved_wrong += std::memcmp(&a[m * K + k], &b[to], sizeof(float)) != 0;
          }
        }
        EXPECT_EQ(moved_wrong, 0u) << what << ": the permuted norm output is not the natural one moved";
        const std::vector<float> ra = download_f32(ya), rb = download_f32(yb);
        size_t diff = 0;
        for (size_t i = 0; i < ra.size(); ++i) {
          ASSERT_FALSE(std::isnan(rb[i])) << what << ": y[" << i / N << ", " << i % N << "] unwritten";
          diff += std::memcmp(&ra[i], &rb[i], sizeof(float)) != 0;
        }
        EXPECT_EQ(diff, 0u) << what << ": " << diff << " of " << ra.size() << " elements differ";
      }
    }
  }
  const LinearWeight bf16(cuda::empty(DType::kBF16, {64, 128}));
  const LinearWeight f8(cuda::empty(DType::kF8E4M3, {64, 128}), cuda::empty(DType::kF32, {64}));
  EXPECT_FALSE(linear_cuda_tiled(kStreamMaxTokens, bf16));
  EXPECT_TRUE(linear_cuda_tiled(kStreamMaxTokens + 1, bf16));
  EXPECT_FALSE(linear_cuda_tiled(1, f8));  // FP8 weights: their own kernel quantizes x
  EXPECT_FALSE(linear_cuda_tiled(1024, f8));
}

TEST(LinearCuda, RefusesWhatItCannotRun) {
  NS_SKIP_WITHOUT_GPU();
  const Tensor w = cuda::empty(DType::kBF16, {64, 128});
  EXPECT_TRUE(
      linear_cuda_supports(cuda::empty(DType::kBF16, {3, 128}), w, cuda::empty(DType::kF32, {3, 64})));
  EXPECT_FALSE(linear_cuda_supports(cuda::empty(DType::kBF16, {3, 100}), cuda::empty(DType::kBF16, {64, 100}),
                                    cuda::empty(DType::kF32, {3, 64})));  // K % 64
  EXPECT_FALSE(linear_cuda_supports(cuda::empty(DType::kBF16, {3, 128}), cuda::empty(DType::kBF16, {40, 128}),
                                    cuda::empty(DType::kF32, {3, 40})));  // N % 16
  EXPECT_FALSE(
      linear_cuda_supports(cuda::empty(DType::kF32, {3, 128}), w, cuda::empty(DType::kF32, {3, 64})));
  EXPECT_FALSE(
      linear_cuda_supports(cuda::empty(DType::kBF16, {3, 128}), w, cuda::empty(DType::kF32, {3, 32})));
}

}  // namespace
}  // namespace nanoserve
