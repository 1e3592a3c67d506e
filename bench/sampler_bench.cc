// Sampler cost per token on a 49152-token vocabulary (the default model's),
// for the common settings. Compare with a decode step's forward time: the
// sampler should be a small fraction of it.

#include <benchmark/benchmark.h>

#include <vector>

#include "engine/rng.h"
#include "engine/sampler.h"

namespace nanoserve {
namespace {

constexpr int32_t kVocab = 49152;

std::vector<float> model_like_logits() {
  // Roughly what a small LM gives: most mass on a few tokens, a long tail.
  Rng rng(1);
  std::vector<float> l(kVocab);
  for (float& x : l) x = static_cast<float>(-8.0 + 6.0 * rng.next_double());
  for (int i = 0; i < 20; ++i) l[rng.next_u64() % kVocab] = static_cast<float>(4.0 + 4.0 * rng.next_double());
  return l;
}

void run(benchmark::State& state, const SamplingParams& p) {
  Sampler s(kVocab);
  const std::vector<float> logits = model_like_logits();
  std::vector<int32_t> prompt(256, 7), output(128, 9);
  Rng rng(3);
  for (auto _ : state) benchmark::DoNotOptimize(s.sample(logits, p, prompt, output, rng));
  state.SetItemsProcessed(state.iterations());
}

void BM_Greedy(benchmark::State& state) {
  SamplingParams p;
  p.temperature = 0.0f;
  run(state, p);
}
void BM_Temperature(benchmark::State& state) {
  SamplingParams p;
  p.temperature = 0.8f;
  run(state, p);
}
void BM_TopK40TopP95MinP05(benchmark::State& state) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 40;
  p.top_p = 0.95f;
  p.min_p = 0.05f;
  run(state, p);
}
void BM_TopP90(benchmark::State& state) {
  SamplingParams p;
  p.top_p = 0.9f;
  run(state, p);
}
void BM_Penalties(benchmark::State& state) {
  SamplingParams p;
  p.repetition_penalty = 1.1f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.5f;
  run(state, p);
}
void BM_Logprobs20(benchmark::State& state) {
  Sampler s(kVocab);
  const std::vector<float> logits = model_like_logits();
  std::vector<TokenLogprob> top;
  for (auto _ : state) benchmark::DoNotOptimize(s.logprobs(logits, 5, 20, top));
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK(BM_Greedy);
BENCHMARK(BM_Temperature);
BENCHMARK(BM_TopK40TopP95MinP05);
BENCHMARK(BM_TopP90);
BENCHMARK(BM_Penalties);
BENCHMARK(BM_Logprobs20);

}  // namespace
}  // namespace nanoserve

BENCHMARK_MAIN();
