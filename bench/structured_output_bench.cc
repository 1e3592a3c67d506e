// What structured output costs per decode step: 16 requests decoding at once
// on the default model, unconstrained, then constrained by a JSON schema with
// a cold mask cache, then warm. The mask work (apply + accept) is timed per
// token inside the engine's step and set against the step time.
//
//   build/structured_output_bench [model.gguf] [max_tokens]
// Prints plain lines; docs/structured_output.md quotes them.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/load_engine.h"
#include "structured/json_constraint.h"
#include "structured/schema_compiler.h"

namespace nanoserve {
namespace {

using Clock = std::chrono::steady_clock;
using structured::JsonConstraintFactory;

struct Timing {
  std::atomic<int64_t> ns{0};
  std::atomic<int64_t> tokens{0};
};

// Times the wrapped constraint's apply + accept.
class TimedConstraint final : public TokenConstraint {
 public:
  TimedConstraint(std::unique_ptr<TokenConstraint> inner, Timing* t) : inner_(std::move(inner)), t_(t) {}
  void apply(std::span<float> logits) override {
    const auto t0 = Clock::now();
    inner_->apply(logits);
    t_->ns += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
    ++t_->tokens;
  }
  bool allows(int32_t token) const override { return inner_->allows(token); }
  void accept(int32_t token) override {
    const auto t0 = Clock::now();
    inner_->accept(token);
    t_->ns += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
  }

 private:
  std::unique_ptr<TokenConstraint> inner_;
  Timing* t_;
};

class TimedFactory final : public TokenConstraintFactory {
 public:
  TimedFactory(std::shared_ptr<const TokenConstraintFactory> inner, Timing* t)
      : inner_(std::move(inner)), t_(t) {}
  std::unique_ptr<TokenConstraint> start() const override {
    return std::make_unique<TimedConstraint>(inner_->start(), t_);
  }

 private:
  std::shared_ptr<const TokenConstraintFactory> inner_;
  Timing* t_;
};

struct RunResult {
  double step_ms = 0;  // mean step time while all 16 decode
  int steps = 0;
  int64_t tokens = 0;
};

RunResult run(Engine& engine, const std::vector<int32_t>& prompt, int n, int max_tokens,
              std::shared_ptr<const TokenConstraintFactory> constraint) {
  for (int i = 0; i < n; ++i) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = 100 + i;
    p.max_tokens = max_tokens;
    p.constraint = constraint;
    p.ignore_eos = constraint == nullptr;  // unconstrained: keep all 16 decoding
    NS_CHECK(engine.add_request(prompt, p).ok());
  }
  std::vector<RequestOutput> outs;
  RunResult r;
  double total = 0;
  bool prefilled = false;
  while (engine.has_unfinished()) {
    const int32_t running = engine.stats().num_running;
    const auto t0 = Clock::now();
    NS_CHECK(engine.step(outs).ok());
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    for (const RequestOutput& o : outs) r.tokens += static_cast<int64_t>(o.new_tokens.size());
    // Decode steps with the whole batch: after the first step (prefill) and before any finished.
    if (prefilled && running == n && engine.stats().num_running == n) {
      total += ms;
      ++r.steps;
    }
    prefilled = true;
  }
  r.step_ms = r.steps > 0 ? total / r.steps : 0;
  return r;
}

int main_impl(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : NS_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  const int max_tokens = argc > 2 ? std::atoi(argv[2]) : 48;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  constexpr int kBatch = 16;
  ThreadPool pool(0);
  EngineConfig c;
  c.max_num_seqs = kBatch;
  c.max_num_batched_tokens = 1024;
  c.max_model_len = 512;
  StatusOr<LoadedEngine> le = load_engine(path, c, pool);
  NS_CHECK(le.ok()) << le.status().to_string();
  const Tokenizer& tok = *le->tokenizer;
  const std::vector<int32_t> prompt = tok.encode(
      "<|im_start|>user\nDescribe three cats as JSON.<|im_end|>\n<|im_start|>assistant\n", false, true);

  std::vector<std::string> pieces;
  std::vector<bool> special;
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    pieces.push_back(tok.token_to_piece(id));
    special.push_back(tok.is_special(id));
  }
  const auto t_vocab = Clock::now();
  auto vocab = std::make_shared<structured::TokenVocab>(std::move(pieces), special, tok.eos_ids());
  std::printf("vocabulary trie: %d tokens, %zu nodes, built in %.1f ms\n", vocab->size(),
              vocab->trie().size(),
              std::chrono::duration<double, std::milli>(Clock::now() - t_vocab).count());

  const nlohmann::json schema = nlohmann::json::parse(R"({"type":"array","maxItems":3,"items":{
    "type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":30},
    "color":{"enum":["black","white","orange","grey"]},"indoor":{"type":"boolean"},
    "weight":{"type":"number","minimum":0,"maximum":20}},
    "required":["name","age","color"],"additionalProperties":false}})");
  auto grammar = structured::compile_schema(schema);
  NS_CHECK(grammar.ok()) << grammar.status().to_string();
  auto factory = std::make_shared<JsonConstraintFactory>(std::move(*grammar), vocab);

  Engine& engine = *le->engine;
  run(engine, prompt, kBatch, 4, nullptr);  // warm up
  const RunResult plain = run(engine, prompt, kBatch, max_tokens, nullptr);
  std::printf("batch %d, unconstrained: %.2f ms per decode step (%d steps)\n", kBatch, plain.step_ms,
              plain.steps);

  for (const char* phase : {"cold cache", "warm cache"}) {
    Timing t;
    const int64_t misses0 = factory->mask_misses(), hits0 = factory->mask_hits();
    const RunResult cr = run(engine, prompt, kBatch, max_tokens, std::make_shared<TimedFactory>(factory, &t));
    const double per_token_us = t.tokens > 0 ? t.ns / 1e3 / static_cast<double>(t.tokens) : 0;
    const int64_t misses = factory->mask_misses() - misses0, hits = factory->mask_hits() - hits0;
    std::printf(
        "batch %d, json_schema, %s: %.2f ms per decode step (%d steps with all %d decoding), %lld tokens; "
        "mask "
        "%.1f us per token (%lld misses, %lld hits) = %.2f ms per step of %d = %.1f%% of the unconstrained "
        "step\n",
        kBatch, phase, cr.step_ms, cr.steps, kBatch, static_cast<long long>(cr.tokens), per_token_us,
        static_cast<long long>(misses), static_cast<long long>(hits), per_token_us * kBatch / 1e3, kBatch,
        100.0 * per_token_us * kBatch / 1e3 / plain.step_ms);
    if (cr.steps > 0)
      std::printf("  step time, constrained / unconstrained: %.3f\n", cr.step_ms / plain.step_ms);
  }

  // The whole step, constrained against unconstrained, in alternating rounds so that a
  // change in the machine's load hits both sides alike; the median ratio.
  std::vector<double> ratios;
  for (int round = 0; round < 3; ++round) {
    const RunResult p = run(engine, prompt, kBatch, max_tokens, nullptr);
    const RunResult q = run(engine, prompt, kBatch, max_tokens, factory);
    if (p.steps == 0 || q.steps == 0) continue;
    ratios.push_back(q.step_ms / p.step_ms);
    std::printf("round %d: unconstrained %.2f ms, json_schema (warm) %.2f ms per decode step: ratio %.3f\n", round,
                p.step_ms, q.step_ms, ratios.back());
  }
  if (!ratios.empty()) {
    std::sort(ratios.begin(), ratios.end());
    std::printf("median step ratio, constrained / unconstrained: %.3f\n", ratios[ratios.size() / 2]);
  }

  // A miss in the costliest state: inside a free string, where almost every token is allowed.
  structured::JsonState s(&factory->grammar());
  NS_CHECK(s.feed(R"([{"age": 3, "color": "grey", "name": "Tom)"));
  std::vector<structured::JsonState> scratch;
  structured::TokenMask m;
  const auto t0 = Clock::now();
  constexpr int kReps = 5;
  for (int i = 0; i < kReps; ++i) structured::compute_mask(*vocab, s, scratch, m);
  int64_t allowed = 0;
  for (uint64_t w : m) allowed += __builtin_popcountll(w);
  std::printf("one mask miss inside a string (trie walk): %.2f ms, %lld of %d tokens allowed\n",
              std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / kReps,
              static_cast<long long>(allowed), vocab->size());
  return 0;
}

}  // namespace
}  // namespace nanoserve

int main(int argc, char** argv) {
  return nanoserve::main_impl(argc, argv);
}
