// The engine's own host time a decode step: scheduling, the batch's metadata
// (positions, block tables, slots), the commit and each row's output, with a
// runner that costs nothing (its greedy tokens are ready, its logits never
// read). On a GPU runner part of this time sits between the device's steps:
// the share of a decode step that no kernel can win back.
//
//   build/engine_step_bench [--input-len 1000] [--steps 200] [--text MODEL.gguf]
//
// For each batch size and both scheduling modes (one step at a time, and
// asynchronous: docs/engine.md): B greedy requests of random prompts,
// prefilled first (cheaply: the runner does nothing), then `steps` decode
// steps timed one by one. The runner acts as an overlapping one (launch()
// returns, wait() ends the step), so the bench also times what a device would
// sit idle for: from each wait()'s return to the next launch(). Prints the
// median and mean step, the time per row and that idle time. --text gives
// each request the model's tokenizer as its text (the incremental detokenizer
// and a stop string that never matches, as a server's requests have).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/tokenizer_text.h"
#include "io/gguf.h"
#include "model/model_runner.h"
#include "engine/rng.h"
#include "model/model_shapes.h"
#include "tokenizer/tokenizer.h"

namespace nanoserve {
namespace {

constexpr int32_t kVocab = 128256;      // llama-3-8b's (model_shape)
constexpr int32_t kTextVocab = 49152;   // prompts' ids with --text (the default model's tokenizer)

// Greedy token t of row r: 1000 + r (never an EOS; requests ignore it anyway).
class NullRunner final : public ModelRunner {
 public:
  explicit NullRunner(int32_t max_rows)
      : config_(model_shape("llama-3-8b").value()), logits_(Tensor::zeros(DType::kF32, {max_rows, kVocab})) {
    greedy_.resize(static_cast<size_t>(max_rows));
    for (int32_t r = 0; r < max_rows; ++r) greedy_[static_cast<size_t>(r)] = 1000 + r;
  }
  const ModelConfig& config() const override { return config_; }
  int64_t kv_bytes_per_block(int32_t block_size) const override { return int64_t{block_size} * 131072; }
  Status init_kv_cache(int32_t num_blocks, int32_t block_size) override {
    limits_.vocab_size = config_.vocab_size;
    limits_.max_tokens = 8192;
    limits_.max_seqs = limits_.max_logits_rows = static_cast<int32_t>(logits_.dim(0));
    limits_.num_blocks = num_blocks;
    limits_.block_size = block_size;
    limits_.max_context = int64_t{num_blocks} * block_size;
    limits_.max_blocks_per_seq = num_blocks;
    return Status();
  }
  StepLimits step_limits() const override { return limits_; }
  StatusOr<Tensor> forward(const ForwardBatch& batch) override {
    rows_ = static_cast<int64_t>(batch.logits_rows.size());
    // Zeros: no plain greedy row reads its logits.
    return logits_.slice_rows(0, rows_);
  }
  std::span<const int32_t> greedy_tokens() const override {
    return {greedy_.data(), static_cast<size_t>(rows_)};
  }
  // As a device runner: launch() queues, wait() ends the step. The idle time
  // of each step after the first: its launch less the last wait's return.
  bool overlaps_steps() const override { return true; }
  Status launch(const ForwardBatch& batch) override {
    const auto now = std::chrono::steady_clock::now();
    if (waited_ != std::chrono::steady_clock::time_point{})
      idle_us.push_back(std::chrono::duration<double, std::micro>(now - waited_).count());
    return ModelRunner::launch(batch);
  }
  StatusOr<Tensor> wait() override {
    StatusOr<Tensor> r = ModelRunner::wait();
    waited_ = std::chrono::steady_clock::now();
    return r;
  }
  std::vector<double> idle_us;

 private:
  ModelConfig config_;
  Tensor logits_;
  std::vector<int32_t> greedy_;
  int64_t rows_ = 0;
  StepLimits limits_;
  std::chrono::steady_clock::time_point waited_{};
};

double median_of(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

int run(int32_t B, int32_t input_len, int32_t steps, bool async, const TextStreamFactory* text) {
  EngineConfig c;
  c.async_scheduling = async;
  c.max_num_seqs = B;
  c.max_num_batched_tokens = 8192;
  c.block_size = 16;
  c.max_model_len = 8192;
  // The first rows decode while the last prefill: enough tokens that none ends before the timed steps do.
  const int32_t max_tokens = steps + B * input_len / c.max_num_batched_tokens + 8;
  c.num_blocks = B * ((input_len + max_tokens + 15) / 16 + 1);
  c.enable_prefix_caching = true;
  auto owned = std::make_unique<NullRunner>(B);
  NullRunner& runner = *owned;
  StatusOr<std::unique_ptr<Engine>> made = Engine::create(c, std::move(owned), text);
  if (!made.ok()) {
    std::fprintf(stderr, "engine: %s\n", made.status().to_string().c_str());
    return 1;
  }
  Engine& e = **made;
  Rng rng(static_cast<uint64_t>(B));
  for (int32_t i = 0; i < B; ++i) {
    std::vector<int32_t> prompt(static_cast<size_t>(input_len));
    const int32_t vocab = text != nullptr ? kTextVocab : kVocab;
    for (int32_t& t : prompt) t = static_cast<int32_t>(rng.next_u64() % vocab);
    SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    if (text != nullptr) p.stop = {"\x01never"};
    if (StatusOr<RequestId> id = e.add_request(std::move(prompt), p); !id.ok()) {
      std::fprintf(stderr, "add_request: %s\n", id.status().to_string().c_str());
      return 1;
    }
  }
  std::vector<RequestOutput> outputs;
  // Prefill, then one decode step (the first steps' one-time costs) untimed.
  while (e.stats().decode_steps < 1) {
    if (Status s = e.step(outputs); !s.ok()) {
      std::fprintf(stderr, "step: %s\n", s.to_string().c_str());
      return 1;
    }
  }
  const int64_t before = e.stats().generation_tokens;
  runner.idle_us.clear();
  std::vector<double> us;
  for (int32_t i = 0; i < steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    if (Status s = e.step(outputs); !s.ok()) {
      std::fprintf(stderr, "step: %s\n", s.to_string().c_str());
      return 1;
    }
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  // Asynchronous, the timed calls completed the steps launched one call before.
  const int64_t made_tokens = e.stats().generation_tokens - before;
  if (made_tokens != int64_t{B} * steps) {  // every timed step a decode of all B rows
    std::fprintf(stderr, "batch %d: %lld tokens in %d steps, expected %lld\n", B,
                 static_cast<long long>(made_tokens), steps, static_cast<long long>(int64_t{B} * steps));
    return 1;
  }
  double mean = 0.0;
  for (double x : us) mean += x / static_cast<double>(us.size());
  const double median = median_of(us);
  std::printf("%-5s batch %4d  context ~%d  step median %8.1f us  mean %8.1f us  %6.2f us a row  "
              "device idle %8.1f us\n",
              async ? "async" : "sync", B, input_len + steps / 2, median, mean, median / B,
              median_of(runner.idle_us));
  return 0;
}

}  // namespace
}  // namespace nanoserve

int main(int argc, char** argv) {
  int32_t input_len = 1000, steps = 200;
  const char* text_model = nullptr;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (std::strcmp(argv[i], "--text") == 0 && has_value) {
      text_model = argv[++i];
    } else if (std::strcmp(argv[i], "--input-len") == 0 && has_value) {
      input_len = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--steps") == 0 && has_value) {
      steps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--input-len N] [--steps N] [--text MODEL.gguf]\n", argv[0]);
      return 2;
    }
  }
  if (input_len < 1 || input_len > 6000 || steps < 1 || steps > 2000) {
    std::fprintf(stderr, "--input-len in [1, 6000], --steps in [1, 2000]\n");
    return 2;
  }
  std::shared_ptr<const nanoserve::GgufFile> gguf;
  std::unique_ptr<nanoserve::Tokenizer> tokenizer;
  std::unique_ptr<nanoserve::TokenizerText> text;
  if (text_model != nullptr) {
    auto file = nanoserve::GgufFile::open(text_model);
    if (!file.ok()) {
      std::fprintf(stderr, "--text: %s\n", file.status().to_string().c_str());
      return 1;
    }
    gguf = std::move(file).value();
    auto tok = nanoserve::Tokenizer::from_gguf(*gguf);
    if (!tok.ok()) {
      std::fprintf(stderr, "--text: %s\n", tok.status().to_string().c_str());
      return 1;
    }
    tokenizer = std::move(tok).value();
    if (tokenizer->n_vocab() < nanoserve::kTextVocab) {
      std::fprintf(stderr, "--text: the tokenizer has %d ids, fewer than the prompts' %d\n",
                   static_cast<int>(tokenizer->n_vocab()), nanoserve::kTextVocab);
      return 1;
    }
    text = std::make_unique<nanoserve::TokenizerText>(*tokenizer);
  }
  for (int32_t B : {1, 8, 64, 256}) {
    for (bool async : {false, true}) {
      if (nanoserve::run(B, input_len, steps, async, text.get()) != 0) return 1;
    }
  }
  return 0;
}
