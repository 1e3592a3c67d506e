// Matmul throughput on the default model's shapes.
//   build/matmul_bench --benchmark_filter=Q4_1
// Reports weight bytes streamed per second (the decode ceiling is memory
// bandwidth) and multiply-adds per second (prefill is compute-bound).

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "ops/matmul/matmul.h"
#include "ops/matmul/quant_blocks.h"

namespace nanoserve {
namespace {

// Random blocks: small f16 scales, random nibbles / bytes.
Tensor random_weight(DType dt, int64_t N, int64_t K) {
  Tensor w = Tensor::empty(dt, {N, K});
  std::mt19937 rng(1);
  auto* p = static_cast<uint8_t*>(w.data());
  for (int64_t i = 0; i < w.nbytes(); ++i) p[i] = static_cast<uint8_t>(rng());
  const int64_t block_bytes = dtype_info(dt).block_bytes, blocks = w.nbytes() / block_bytes;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint16_t small_f16 = 0x2000;  // ~0.0078
    std::memcpy(p + b * block_bytes, &small_f16, 2);
    if (dt == DType::kQ4_1) std::memcpy(p + b * block_bytes + 2, &small_f16, 2);
  }
  return w;
}

void BM_Matmul(benchmark::State& state, DType dt) {
  const int64_t N = state.range(0), K = state.range(1), T = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  ThreadPool pool(threads);
  const Tensor w = random_weight(dt, N, K);
  Tensor x = Tensor::empty(DType::kF32, {T, K});
  std::mt19937 rng(2);
  std::normal_distribution<float> dist;
  for (int64_t i = 0; i < T * K; ++i) x.data_as<float>()[i] = dist(rng);
  Tensor y = Tensor::empty(DType::kF32, {T, N});
  std::vector<std::byte> scratch(static_cast<size_t>(matmul_scratch_bytes(T, K)));
  for (auto _ : state) {
    matmul(w, x, y, pool, scratch);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["weight_GB/s"] =
      benchmark::Counter(static_cast<double>(w.nbytes()) * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.counters["GMAC/s"] =
      benchmark::Counter(static_cast<double>(N * K * T) * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// T = 1 with the weights in DRAM, as in a decode step (the model, 92 MiB, is
// larger than the 32 MiB L3): each iteration reads the next of enough copies
// of W to fill 256 MiB, so no copy is still cached when its turn comes again.
void BM_MatmulDram(benchmark::State& state, DType dt) {
  const int64_t N = state.range(0), K = state.range(1);
  const int threads = static_cast<int>(state.range(2));
  ThreadPool pool(threads);
  const Tensor w0 = random_weight(dt, N, K);
  const int64_t copies = std::max<int64_t>(2, (int64_t{256} << 20) / w0.nbytes());
  std::vector<Tensor> ws;
  for (int64_t c = 0; c < copies; ++c) {
    ws.push_back(Tensor::empty(dt, {N, K}));
    std::memcpy(ws.back().data(), w0.data(), static_cast<size_t>(w0.nbytes()));
  }
  Tensor x = Tensor::empty(DType::kF32, {1, K});
  std::mt19937 rng(2);
  std::normal_distribution<float> dist;
  for (int64_t i = 0; i < K; ++i) x.data_as<float>()[i] = dist(rng);
  Tensor y = Tensor::empty(DType::kF32, {1, N});
  std::vector<std::byte> scratch(static_cast<size_t>(matmul_scratch_bytes(1, K)));
  int64_t c = 0;
  for (auto _ : state) {
    matmul(ws[static_cast<size_t>(c)], x, y, pool, scratch);
    benchmark::DoNotOptimize(y.data());
    c = c + 1 == copies ? 0 : c + 1;
  }
  state.counters["weight_GB/s"] =
      benchmark::Counter(static_cast<double>(w0.nbytes()) * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// {N, K, threads}: gate+up as one (3072 x 576), down (576 x 1536), q (576 x 576), lm_head (49152 x 576).
BENCHMARK_CAPTURE(BM_MatmulDram, Q4_1, DType::kQ4_1)
    ->Args({3072, 576, 2})->Args({576, 1536, 2})->Args({576, 576, 2})->Args({576, 576, 1})->Args({3072, 576, 1})
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_MatmulDram, Q8_0, DType::kQ8_0)->Args({49152, 576, 2})->UseRealTime();

// {N, K, T, threads}: ffn_up/gate (1536 x 576), ffn_down (576 x 1536), lm_head (49152 x 576).
BENCHMARK_CAPTURE(BM_Matmul, Q4_1, DType::kQ4_1)
    ->Args({1536, 576, 1, 1})->Args({1536, 576, 1, 2})->Args({576, 1536, 1, 2})->Args({576, 576, 1, 2})
    ->Args({1536, 576, 64, 2})->Args({1536, 576, 512, 2})->UseRealTime();
BENCHMARK_CAPTURE(BM_Matmul, Q8_0, DType::kQ8_0)->Args({49152, 576, 1, 2})->UseRealTime();
BENCHMARK_CAPTURE(BM_Matmul, F16, DType::kF16)->Args({1536, 576, 1, 2})->UseRealTime();

}  // namespace
}  // namespace nanoserve

BENCHMARK_MAIN();
