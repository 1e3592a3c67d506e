// Matmul throughput on the default model's shapes.
//   build/matmul_bench --benchmark_filter=Q4_1
// Reports weight bytes streamed per second (the decode ceiling is memory
// bandwidth) and multiply-adds per second (prefill is compute-bound).
//
// The quant-type comparison (BM_Types/... at 2 threads, BM_Types1/... at one
// thread on CPU time): per shape and T, every weight type beside Q4_1 in the
// same run, in weight GB/s; the "_max" rows (best of the repetitions) are the
// ones to compare:
//   build/matmul_bench --benchmark_filter=BM_Types --benchmark_min_time=0.2
//     --benchmark_repetitions=3 --benchmark_report_aggregates_only=true   (one line)
// K-quant rows are whole super-blocks of 256, so those types skip K = 576.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "ops/matmul/matmul.h"
#include "ops/matmul/quant_blocks.h"

namespace nanoserve {
namespace {

// Byte offsets of a block's f16 scale fields.
std::vector<int> f16_fields(DType dt) {
  switch (dt) {
    case DType::kQ4_1:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K: return {0, 2};
    case DType::kQ2_K: return {80, 82};
    case DType::kQ3_K: return {108};
    case DType::kQ6_K: return {208};
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16: return {};
    default: return {0};
  }
}

// Random blocks: small f16 scales, random nibbles / bytes.
Tensor random_weight(DType dt, int64_t N, int64_t K) {
  Tensor w = Tensor::empty(dt, {N, K});
  std::mt19937 rng(1);
  auto* p = static_cast<uint8_t*>(w.data());
  for (int64_t i = 0; i < w.nbytes(); ++i) p[i] = static_cast<uint8_t>(rng());
  if (!dtype_info(dt).quantized) {
    // Finite values: the low byte random, the high byte of a small float.
    if (dt == DType::kF32) {
      for (int64_t i = 0; i < w.numel(); ++i) w.data_as<float>()[i] = static_cast<float>(rng() % 1000) * 1e-4f;
    } else {
      for (int64_t i = 0; i < w.numel(); ++i) p[2 * i + 1] = 0x3c;
    }
    return w;
  }
  const int64_t block_bytes = dtype_info(dt).block_bytes, blocks = w.nbytes() / block_bytes;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint16_t small_f16 = 0x2000;  // ~0.0078
    for (int off : f16_fields(dt)) std::memcpy(p + b * block_bytes + off, &small_f16, 2);
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
  matmul_prepare(w);  // as the model does at load
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
    matmul_prepare(ws.back());
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

// One case of the type comparison: T tokens, 2 threads. T = 1 at the large
// model's shapes reads W from DRAM (BM_MatmulDram's copies), as its decode
// step does; the small shapes and T = 8 read W from cache.
bool dram_case(int64_t N, int64_t K, int64_t T) { return T == 1 && N * K >= int64_t{4096} * 4096; }

void BM_Types(benchmark::State& state, DType dt, int64_t N, int64_t K, int64_t T) {
  if (dram_case(N, K, T)) {
    state.SetLabel("dram");
    BM_MatmulDram(state, dt);
    return;
  }
  BM_Matmul(state, dt);
}

void register_type_comparison() {
  const DType types[] = {DType::kQ4_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ5_0,
                         DType::kQ5_1, DType::kQ8_0, DType::kQ2_K, DType::kQ3_K};
  // {N, K}: SmolLM2-135M's q/o (576 x 576), gate/up (1536 x 576), down (576 x 1536), lm_head
  // (49152 x 576); a 7-8B model's square (4096 x 4096), down (4096 x 14336) and gate/up (14336 x 4096).
  const int64_t shapes[][2] = {{576, 576}, {1536, 576}, {576, 1536}, {49152, 576},
                               {4096, 4096}, {4096, 14336}, {14336, 4096}};
  // 2 threads against real time, as a decode step runs; and 1 thread against
  // its CPU time, which other load on the machine moves much less.
  for (int64_t threads : {2, 1}) {
    for (const auto& shape : shapes) {
      const int64_t N = shape[0], K = shape[1];
      for (int64_t T : {1, 8, 512}) {
        if (T == 512 && N * K > int64_t{1536} * 576) continue;  // the prefill GEMM: the small model's shapes
        for (DType dt : types) {
          if (K % dtype_info(dt).block_elems != 0) continue;
          const std::string name = std::string(threads == 2 ? "BM_Types/" : "BM_Types1/") + std::to_string(N) + "x" +
                                   std::to_string(K) + "/T" + std::to_string(T) + "/" + dtype_name(dt);
          auto* b =
              benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { BM_Types(s, dt, N, K, T); });
          if (dram_case(N, K, T)) {
            b->Args({N, K, threads});
          } else {
            b->Args({N, K, T, threads});
          }
          if (threads == 2) b->UseRealTime();
          // Best of the repetitions: on a shared machine the slow ones are other load.
          b->ComputeStatistics("max", [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); });
        }
      }
    }
  }
}

}  // namespace
}  // namespace nanoserve

int main(int argc, char** argv) {
  nanoserve::register_type_comparison();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
