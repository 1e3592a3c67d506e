// Tokenizer throughput on the default model's vocab: encode (full, warm
// cache), pre-tokenizer alone, BPE alone without the cache, and decode, in
// MB/s of input text. The text is the tokenizer corpus (prose, code, CJK,
// emoji, digits, whitespace runs, special tokens) repeated to ~4 MB, the same
// text bench/tokenizer_hf_bench.py gives Hugging Face for the ratio.
//
// Usage: build/tokenizer_bench [--benchmark_filter=...]   (needs models/ and tests/fixtures/tokenizer/)

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <unordered_map>

#include "io/gguf.h"
#include "tokenizer/bpe.h"
#include "tokenizer/tokenizer.h"

#ifndef NS_SOURCE_DIR
#define NS_SOURCE_DIR "."
#endif

namespace nanoserve {
namespace {

constexpr size_t kTargetBytes = 4 << 20;

struct Fixture {
  std::unique_ptr<Tokenizer> tok;
  std::string text;
};

std::string source_path(const char* rel) {
  if (const char* root = std::getenv("NANOSERVE_SOURCE_DIR")) return std::string(root) + "/" + rel;
  return std::string(NS_SOURCE_DIR) + "/" + rel;
}

// The corpus strings (valid UTF-8 ones), joined by newlines, repeated with a
// section header until kTargetBytes. bench/tokenizer_hf_bench.py builds the same.
std::string bench_text() {
  std::ifstream f(source_path("tests/fixtures/tokenizer/corpus.json"));
  if (!f) {
    std::fprintf(stderr, "tokenizer_bench: cannot read tests/fixtures/tokenizer/corpus.json\n");
    std::exit(1);
  }
  std::stringstream ss;
  ss << f.rdbuf();
  std::string block;
  for (const auto& e : nlohmann::json::parse(ss.str())) {
    if (e.contains("text")) block += e["text"].get<std::string>() + "\n";
  }
  std::string text;
  for (int i = 0; text.size() < kTargetBytes; ++i) text += "Section " + std::to_string(i) + "\n" + block;
  return text;
}

const Fixture& fixture() {
  static Fixture fx = [] {
    Fixture f;
    std::string model = std::getenv("NANOSERVE_MODEL")
                            ? std::getenv("NANOSERVE_MODEL")
                            : source_path("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    auto gguf = GgufFile::open(model);
    if (!gguf.ok()) {
      std::fprintf(stderr, "tokenizer_bench: %s: %s\n", model.c_str(), gguf.status().to_string().c_str());
      std::exit(1);
    }
    auto tok = Tokenizer::from_gguf(**gguf);
    if (!tok.ok()) {
      std::fprintf(stderr, "tokenizer_bench: %s\n", tok.status().to_string().c_str());
      std::exit(1);
    }
    f.tok = std::move(tok).value();
    f.text = bench_text();
    return f;
  }();
  return fx;
}

void report(benchmark::State& state, size_t bytes, size_t tokens) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.counters["tokens"] = static_cast<double>(tokens);
  state.counters["MB/s"] =
      benchmark::Counter(static_cast<double>(bytes) / 1e6, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Encode(benchmark::State& state) {
  const Fixture& fx = fixture();
  size_t n = 0;
  for (auto _ : state) {
    auto ids = fx.tok->encode(fx.text, false, true);
    n = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  report(state, fx.text.size(), n);
}
BENCHMARK(BM_Encode)->Unit(benchmark::kMillisecond)->MinTime(2.0);

void BM_PreTokenize(benchmark::State& state) {
  const Fixture& fx = fixture();
  std::vector<std::string_view> pieces;
  for (auto _ : state) {
    pieces.clear();
    fx.tok->pre_tokenizer().split(fx.text, pieces);
    benchmark::DoNotOptimize(pieces.data());
  }
  report(state, fx.text.size(), pieces.size());
}
BENCHMARK(BM_PreTokenize)->Unit(benchmark::kMillisecond)->MinTime(2.0);

// BPE on every pre-token with no cache: the cost the cache saves.
void BM_BpeNoCache(benchmark::State& state) {
  const Fixture& fx = fixture();
  const VocabData& v = fx.tok->vocab();
  std::unordered_map<std::string, int32_t> ids;
  for (size_t i = 0; i < v.tokens.size(); ++i) ids.try_emplace(v.tokens[i], static_cast<int32_t>(i));
  auto bpe = BpeModel::create(v.tokens, ids, v.merges, v.unk_id);
  if (!bpe.ok()) {
    state.SkipWithError(bpe.status().to_string().c_str());
    return;
  }
  // Pre-tokenize the text without special-token splitting (specials are a tiny share).
  std::vector<std::string_view> pieces;
  fx.tok->pre_tokenizer().split(fx.text, pieces);
  std::vector<int32_t> out;
  for (auto _ : state) {
    out.clear();
    for (std::string_view p : pieces) bpe->encode_word(p, out);
    benchmark::DoNotOptimize(out.data());
  }
  report(state, fx.text.size(), out.size());
}
BENCHMARK(BM_BpeNoCache)->Unit(benchmark::kMillisecond)->MinTime(2.0);

void BM_Decode(benchmark::State& state) {
  const Fixture& fx = fixture();
  auto ids = fx.tok->encode(fx.text, false, true);
  std::string out;
  for (auto _ : state) {
    out = fx.tok->decode(ids);
    benchmark::DoNotOptimize(out.data());
  }
  report(state, fx.text.size(), ids.size());
}
BENCHMARK(BM_Decode)->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace
}  // namespace nanoserve

BENCHMARK_MAIN();
