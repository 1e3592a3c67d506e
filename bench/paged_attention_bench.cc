// Prefill attention (a whole prompt as one chunk, the fused read), then
// decode attention over a long history: the fused paged read against the
// gather path (copy each history out of the blocks, then ordinary attention).
// One layer, B sequences each decoding one token at context L, blocks of 16
// scattered over the pool. Both paths include the step's K/V write.
//
// Bytes per call, f32 K+V history H = B * L * n_kv_heads * head_dim * 4 * 2:
//   fused:  reads H once                                  -> H
//   gather: reads H, writes the copy, attention reads it  -> 3H
// The counter "GB/s" is those bytes over the time; "hist_GB/s" is H over the
// time (the useful rate, the same work for both paths). "copy" is the ceiling
// beside them: one thread's memcpy of H bytes (2H moved).
//
//   build/paged_attention_bench --benchmark_counters_tabular=true --benchmark_repetitions=5
//     --benchmark_report_aggregates_only=true

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/thread_pool.h"
#include "kvcache/block_manager.h"
#include "model/kv_cpu.h"
#include "ops/attention/attention.h"

namespace nanoserve {
namespace {

struct Shape {
  const char* name;
  int64_t n_heads, n_kv_heads, head_dim;
};
constexpr Shape kShapes[] = {{"smollm2-135m", 9, 3, 64}, {"llama-3-8b", 32, 8, 128}};

// Values in [-1, 1) from a 64-bit LCG: fast enough for pools of hundreds of MB.
void fill_random(float* p, int64_t n, uint64_t& state) {
  for (int64_t i = 0; i < n; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = static_cast<float>(state >> 40) / static_cast<float>(1ull << 23) - 1.0f;
  }
}

// A one-layer cache holding B sequences of L-1 tokens of random K/V, with the
// decode step (position L-1 of each) begun. Blocks of the sequences interleave.
struct Setup {
  ModelConfig config;
  std::unique_ptr<BlockManager> blocks;
  std::unique_ptr<CpuKV> cache;
  ForwardBatch batch;
  Tensor q, k, v, out;

  // prefill: one sequence (B = 1) whose L tokens are all this step's (a
  // whole prompt as one chunk, causal within it) instead of B decode tokens.
  Setup(const Shape& s, int64_t L, int64_t B, bool fused, ThreadPool& pool, bool prefill = false) {
    config.arch = "llama";
    config.n_layers = 1;
    config.n_heads = s.n_heads;
    config.n_kv_heads = s.n_kv_heads;
    config.head_dim = s.head_dim;
    config.dim = s.n_heads * s.head_dim;
    config.context_length = L;
    const int32_t num_blocks = static_cast<int32_t>((B * L + 15) / 16 + B);
    BlockManagerConfig bc;
    bc.num_blocks = num_blocks;
    bc.block_size = 16;
    bc.max_num_seqs = static_cast<int32_t>(B);
    bc.max_seq_len = L;
    blocks = std::make_unique<BlockManager>(bc);
    CpuKVOptions o;
    o.num_blocks = num_blocks;
    o.block_size = 16;
    o.max_context = L;
    o.max_num_seqs = static_cast<int32_t>(B);
    o.fused_read = fused;
    cache = std::move(CpuKV::create(config, o, pool)).value();
    std::vector<int32_t> seqs;
    for (int64_t b = 0; b < B; ++b) seqs.push_back(*blocks->add_sequence());
    // Grow the sequences a block at a time, round robin, so tables interleave.
    for (int64_t n = 16; n < L + 16; n += 16) {
      for (int32_t seq : seqs) NS_CHECK(blocks->reserve(seq, std::min(n, L)).ok());
    }
    // The pools hold random data for the L-1 earlier positions of every sequence.
    uint64_t rng = 1;
    fill_random(cache->k_pool(0).data_as<float>(), cache->k_pool(0).numel(), rng);
    fill_random(cache->v_pool(0).data_as<float>(), cache->v_pool(0).numel(), rng);
    batch.seq_starts.push_back(0);
    for (int32_t seq : seqs) {
      for (int64_t p = prefill ? 0 : L - 1; p < L; ++p) {
        batch.tokens.push_back(0);
        batch.positions.push_back(static_cast<int32_t>(p));
      }
      batch.seq_starts.push_back(batch.num_tokens());
      batch.seq_ids.push_back(seq);
      batch.context_lens.push_back(static_cast<int32_t>(L));
      batch.logits_rows.push_back(batch.num_tokens() - 1);
    }
    blocks->fill_batch(batch);
    StepLimits lim;
    lim.vocab_size = 1;
    const int64_t T = batch.num_tokens();
    lim.max_tokens = static_cast<int32_t>(T);
    lim.max_seqs = lim.max_logits_rows = static_cast<int32_t>(B);
    cache->fill_limits(lim);
    NS_CHECK(batch.validate(lim).ok());
    q = Tensor::empty(DType::kF32, {T, s.n_heads, s.head_dim});
    k = Tensor::empty(DType::kF32, {T, s.n_kv_heads, s.head_dim});
    v = Tensor::empty(DType::kF32, {T, s.n_kv_heads, s.head_dim});
    out = Tensor::empty(DType::kF32, {T, s.n_heads, s.head_dim});
    fill_random(q.data_as<float>(), q.numel(), rng);
    fill_random(k.data_as<float>(), k.numel(), rng);
    fill_random(v.data_as<float>(), v.numel(), rng);
  }
};

void set_counters(benchmark::State& state, const Shape& s, int64_t L, int64_t B, double multiple) {
  const double hist = static_cast<double>(B * L * s.n_kv_heads * s.head_dim) * 4.0 * 2.0;
  state.counters["MB"] = multiple * hist / 1e6;
  state.counters["GB/s"] = benchmark::Counter(multiple * hist, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
  state.counters["hist_GB/s"] =
      benchmark::Counter(hist, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

}  // namespace

// Args: shape index, context L, batch B, threads.
void BM_FusedRead(benchmark::State& state) {
  const Shape& s = kShapes[state.range(0)];
  const int64_t L = state.range(1), B = state.range(2);
  ThreadPool pool(static_cast<int>(state.range(3)));
  Setup st(s, L, B, /*fused=*/true, pool);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  for (auto _ : state) {
    st.cache->attend(0, st.batch, st.q, st.k, st.v, static_cast<int>(s.n_heads / s.n_kv_heads), scale,
                     st.out);
    benchmark::DoNotOptimize(st.out.data());
  }
  set_counters(state, s, L, B, 1.0);
}

void BM_GatherRead(benchmark::State& state) {
  const Shape& s = kShapes[state.range(0)];
  const int64_t L = state.range(1), B = state.range(2);
  ThreadPool pool(static_cast<int>(state.range(3)));
  Setup st(s, L, B, /*fused=*/false, pool);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  for (auto _ : state) {
    st.cache->attend(0, st.batch, st.q, st.k, st.v, static_cast<int>(s.n_heads / s.n_kv_heads), scale,
                     st.out);
    benchmark::DoNotOptimize(st.out.data());
  }
  set_counters(state, s, L, B, 3.0);
}

// A whole prompt of L tokens as one chunk (causal), the fused read: the
// prefill's attention for one layer. "GMAC/s": the multiply-adds of QK^T and
// PV that the causal mask leaves, n_heads * head_dim * L (L + 1) (both
// products), over the time.
void BM_Prefill(benchmark::State& state) {
  const Shape& s = kShapes[state.range(0)];
  const int64_t L = state.range(1);
  ThreadPool pool(static_cast<int>(state.range(3)));
  Setup st(s, L, 1, /*fused=*/true, pool, /*prefill=*/true);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  for (auto _ : state) {
    st.cache->attend(0, st.batch, st.q, st.k, st.v, static_cast<int>(s.n_heads / s.n_kv_heads), scale,
                     st.out);
    benchmark::DoNotOptimize(st.out.data());
  }
  state.counters["GMAC/s"] =
      benchmark::Counter(static_cast<double>(s.n_heads * s.head_dim * L * (L + 1)),
                         benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

// The ceiling: one thread copying the same H bytes of history (read H + write
// H), as contiguous memcpy; "GB/s" counts both directions.
void BM_CopyCeiling(benchmark::State& state) {
  const Shape& s = kShapes[state.range(0)];
  const int64_t L = state.range(1), B = state.range(2);
  const int64_t n = B * L * s.n_kv_heads * s.head_dim * 2;  // floats of K+V
  std::vector<float> src(n), dst(n);
  uint64_t rng = 2;
  fill_random(src.data(), n, rng);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), n * sizeof(float));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  const double hist = static_cast<double>(n) * 4.0;
  state.counters["MB"] = 2.0 * hist / 1e6;
  state.counters["GB/s"] = benchmark::Counter(2.0 * hist, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}

}  // namespace nanoserve

// Fused and gather runs of one configuration are registered next to each
// other, so on a shared, noisy machine they see the same load.
int main(int argc, char** argv) {
  using nanoserve::kShapes;
  for (int64_t shape : {0, 1}) {
    for (int64_t L : {128, 512, 2048}) {
      for (int64_t threads : {1, 2}) {
        benchmark::RegisterBenchmark((std::string("prefill/") + kShapes[shape].name).c_str(),
                                     &nanoserve::BM_Prefill)
            ->Args({shape, L, 1, threads})
            ->ArgNames({"shape", "L", "B", "threads"})
            ->Unit(benchmark::kMillisecond)
            ->MeasureProcessCPUTime()  // the pool's threads too: on a shared machine, the figure to read
            ->UseRealTime();
      }
    }
  }
  for (int64_t shape : {0, 1}) {
    for (int64_t L : {128, 512, 2048, 8192}) {
      for (int64_t B : {1, 4}) {
        benchmark::RegisterBenchmark((std::string("copy/") + kShapes[shape].name).c_str(),
                                     &nanoserve::BM_CopyCeiling)
            ->Args({shape, L, B, 1})
            ->ArgNames({"shape", "L", "B", "threads"})
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
        for (int64_t threads : {1, 2}) {
          for (auto [name, fn] :
               {std::pair{"fused", &nanoserve::BM_FusedRead}, {"gather", &nanoserve::BM_GatherRead}}) {
            const std::string label = std::string(name) + "/" + kShapes[shape].name;
            benchmark::RegisterBenchmark(label.c_str(), fn)
                ->Args({shape, L, B, threads})
                ->ArgNames({"shape", "L", "B", "threads"})
                ->Unit(benchmark::kMicrosecond)
                ->UseRealTime();
          }
        }
      }
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
