// Where one batch-1 decode step's time goes, phase by phase, through the real
// Engine (scheduler, paged KV cache, sampler) and the real model.
//
//   build/decode_profile_bench [--model PATH] [--threads 2] [--prompt-tokens 511] [--new-tokens 128]
//                              [--speculative-config JSON] [--repeat N] [--verify-rows N] [--temperature T]
//
// With --speculative-config (engine/speculative.h) each decode step is a
// verification step of 1 + j rows; --repeat N makes the prompt N copies of
// one random block, so that an n-gram proposer finds what follows. The
// acceptance and the rows per step are printed with the phases.
// --verify-rows N: every decode step verifies N - 1 proposed tokens that are
// never kept (a fixed proposal), so each step costs an N-row verification:
// the cost of the rows alone, whatever the acceptance.
//
// Prefills one prompt of random token ids, then decodes greedily, timing each
// Engine::step and, inside it, each phase of the forward (Workspace::profile).
// Prints per phase the mean time per step, its share, and for the matmuls the
// weight bandwidth reached; "engine + sampler" is the step minus the forward.
// Also times the sampler alone and an empty parallel_for (the pool hand-off).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine/load_engine.h"
#include "engine/sampler.h"
#include "io/gguf.h"
#include "model/model_cpu.h"

namespace nanoserve {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

int fail(const std::string& msg) {
  std::fprintf(stderr, "decode_profile_bench: %s\n", msg.c_str());
  return 1;
}

// Proposes k[i] copies of token 0 (a verification step's rows at no proposer cost).
class FixedProposer final : public Proposer {
 public:
  bool cheap() const override { return false; }
  Status propose(std::span<Request* const> reqs, std::span<const int32_t> k) override {
    for (size_t i = 0; i < reqs.size(); ++i) reqs[i]->draft.assign(static_cast<size_t>(k[i]), 0);
    return Status();
  }
};

// Weight bytes one decode step streams per matmul phase.
struct PhaseBytes {
  int64_t qkv = 0, o = 0, gate_up = 0, down = 0, lm_head = 0;
};

PhaseBytes phase_bytes(const ModelWeights& w) {
  PhaseBytes b;
  for (const LayerWeights& L : w.layers) {
    b.qkv += L.wq.nbytes() + L.wk.nbytes() + L.wv.nbytes();
    b.o += L.wo.nbytes();
    b.gate_up += L.w_gate.nbytes() + L.w_up.nbytes();
    b.down += L.w_down.nbytes();
  }
  b.lm_head = w.lm_head.nbytes();
  return b;
}

int run(int argc, char** argv) {
  std::string model_path = NS_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  int threads = 2, prompt_tokens = 511, new_tokens = 128, repeat = 1, verify_rows = 1;
  float temperature = 0.0f;
  std::string spec_json;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) std::exit(fail(a + " needs a value"));
      return argv[++i];
    };
    if (a == "--model")
      model_path = next();
    else if (a == "--threads")
      threads = std::atoi(next());
    else if (a == "--prompt-tokens")
      prompt_tokens = std::atoi(next());
    else if (a == "--new-tokens")
      new_tokens = std::atoi(next());
    else if (a == "--speculative-config")
      spec_json = next();
    else if (a == "--repeat")
      repeat = std::atoi(next());
    else if (a == "--temperature")
      temperature = static_cast<float>(std::atof(next()));
    else if (a == "--verify-rows")
      verify_rows = std::atoi(next());
    else
      return fail("unknown flag " + a);
  }
  if (threads < 1 || prompt_tokens < 1 || prompt_tokens > 4096 || new_tokens < 2 || repeat < 1 ||
      verify_rows < 1 || verify_rows > 17 || repeat > prompt_tokens)
    return fail("bad sizes");
  StatusOr<SpeculativeConfig> spec = parse_speculative_config(spec_json);
  if (!spec.ok()) return fail(spec.status().to_string());
  std::unique_ptr<Proposer> proposer;
  if (verify_rows > 1) {
    if (spec->enabled()) return fail("--verify-rows replaces --speculative-config");
    spec->method = SpecMethod::kDraftModel;
    spec->model = "(fixed proposal)";
    spec->num_speculative_tokens = verify_rows - 1;
    spec->adaptive = false;
    proposer = std::make_unique<FixedProposer>();
  }

  ThreadPool pool(threads);
  StatusOr<std::shared_ptr<const GgufFile>> file = GgufFile::open(model_path);
  if (!file.ok()) return fail(file.status().to_string());
  StatusOr<std::unique_ptr<CpuModel>> model = CpuModel::load(*file, pool);
  if (!model.ok()) return fail(model.status().to_string());
  const ModelConfig mc = (*model)->config();
  const PhaseBytes bytes = phase_bytes((*model)->weights());
  EngineConfig ec;
  ec.max_model_len = prompt_tokens + new_tokens + 16;
  CpuRunnerOptions ro;
  ro.max_tokens = ec.max_num_batched_tokens;
  ro.max_num_seqs = ec.max_num_seqs;
  ro.max_context = ec.max_model_len;
  ec.speculative = *spec;
  if (spec->enabled()) {
    ro.max_logits_rows = static_cast<int64_t>(ec.max_num_seqs) * (1 + spec->num_speculative_tokens);
    if (ec.speculative.step_overhead_tokens < 0) ec.speculative.step_overhead_tokens = 0.25;
  }
  auto runner_owned = std::make_unique<CpuRunner>(std::move(model).value(), ro, pool);
  CpuRunner* runner = runner_owned.get();
  StatusOr<std::unique_ptr<Engine>> engine =
      Engine::create(ec, std::move(runner_owned), nullptr, std::move(proposer));
  if (!engine.ok()) return fail(engine.status().to_string());

  std::mt19937 rng(7);
  std::vector<int32_t> prompt(static_cast<size_t>(prompt_tokens));
  const size_t period = (prompt.size() + static_cast<size_t>(repeat) - 1) / static_cast<size_t>(repeat);
  for (size_t i = 0; i < prompt.size(); ++i)
    prompt[i] =
        i < period ? static_cast<int32_t>(rng() % static_cast<uint32_t>(mc.vocab_size)) : prompt[i - period];
  SamplingParams params;
  params.temperature = temperature;
  params.seed = 11;
  params.max_tokens = new_tokens;
  params.ignore_eos = true;
  if (StatusOr<RequestId> id = (*engine)->add_request(prompt, params); !id.ok())
    return fail(id.status().to_string());

  std::vector<RequestOutput> outs;
  ForwardProfile prefill_prof;
  runner->set_profile(&prefill_prof);
  const auto t_prefill = Clock::now();
  if (Status st = (*engine)->step(outs); !st.ok()) return fail(st.to_string());
  const double prefill_ms = ms_since(t_prefill);
  runner->set_profile(nullptr);

  ForwardProfile prof;
  runner->set_profile(&prof);
  double step_ms = 0.0;
  std::vector<double> per_step;
  while ((*engine)->has_unfinished()) {
    const auto t0 = Clock::now();
    if (Status st = (*engine)->step(outs); !st.ok()) return fail(st.to_string());
    per_step.push_back(ms_since(t0));
    step_ms += per_step.back();
  }
  runner->set_profile(nullptr);
  const double steps = static_cast<double>(per_step.size());
  const EngineStats es = (*engine)->stats();
  std::sort(per_step.begin(), per_step.end());

  // The sampler alone on a logits-like row, greedy.
  Sampler sampler(static_cast<int32_t>(mc.vocab_size));
  std::vector<float> logits(static_cast<size_t>(mc.vocab_size));
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (float& l : logits) l = nd(rng);
  Rng srng(1);
  std::vector<int32_t> hist(prompt.begin(), prompt.end());
  const int sampler_reps = 200;
  const auto t_s = Clock::now();
  int32_t sink = 0;
  for (int i = 0; i < sampler_reps; ++i) sink += sampler.sample(logits, params, hist, {}, srng);
  const double sampler_us = ms_since(t_s) * 1000.0 / sampler_reps;

  // The pool hand-off: an empty parallel_for over every thread.
  const int pool_reps = 20000;
  const auto t_p = Clock::now();
  for (int i = 0; i < pool_reps; ++i) pool.parallel_for(threads, [](int64_t, int64_t, int) {});
  const double pool_us = ms_since(t_p) * 1000.0 / pool_reps;

  double fwd_ms = 0.0;
  for (int64_t ns : prof.ns) fwd_ms += static_cast<double>(ns) / 1e6;
  std::printf("decode profile: %s, %d threads, prompt %d tokens (prefill %.1f ms), %d decode steps\n",
              model_path.c_str(), threads, prompt_tokens, prefill_ms, static_cast<int>(steps));
  const double out_tokens = static_cast<double>(new_tokens - 1);  // the prefill step sampled the first
  std::printf("step: mean %.3f ms (%.1f tok/s), median %.3f ms, min %.3f ms\n", step_ms / steps,
              1000.0 * out_tokens / step_ms, per_step[per_step.size() / 2], per_step.front());
  if (spec->enabled()) {
    std::printf(
        "speculative: %lld drafts, %lld proposed, %lld accepted (acceptance %.1f%%); %.2f tokens and %.2f "
        "rows "
        "per step\n",
        static_cast<long long>(es.spec_num_drafts), static_cast<long long>(es.spec_num_draft_tokens),
        static_cast<long long>(es.spec_num_accepted_tokens),
        100.0 * static_cast<double>(es.spec_num_accepted_tokens) /
            static_cast<double>(std::max<int64_t>(1, es.spec_num_draft_tokens)),
        out_tokens / steps, (steps + static_cast<double>(es.spec_num_draft_tokens)) / steps);
  }
  std::printf("%-24s %9s %7s %10s\n", "phase", "ms/step", "share", "weight GB/s");
  for (int p = 0; p < static_cast<int>(ForwardPhase::kCount); ++p) {
    const double ms = static_cast<double>(prof.ns[p]) / 1e6 / steps;
    int64_t b = 0;
    switch (static_cast<ForwardPhase>(p)) {
      case ForwardPhase::kQkv: b = bytes.qkv; break;
      case ForwardPhase::kOProj: b = bytes.o; break;
      case ForwardPhase::kGateUp: b = bytes.gate_up; break;
      case ForwardPhase::kDown: b = bytes.down; break;
      case ForwardPhase::kLmHead: b = bytes.lm_head; break;
      default: break;
    }
    std::printf("%-24s %9.3f %6.1f%%", forward_phase_name(static_cast<ForwardPhase>(p)), ms,
                100.0 * ms / (step_ms / steps));
    if (b > 0) std::printf(" %10.2f", static_cast<double>(b) / (ms * 1e6));
    std::printf("\n");
  }
  // The prefill step (one forward of the whole prompt), phase by phase.
  std::printf("prefill %.1f ms (%.1f tok/s):", prefill_ms, 1000.0 * prompt_tokens / prefill_ms);
  for (int p = 0; p < static_cast<int>(ForwardPhase::kCount); ++p) {
    const double ms = static_cast<double>(prefill_prof.ns[p]) / 1e6;
    if (ms >= 0.05 * prefill_ms / 100.0)
      std::printf(" %s %.1f", forward_phase_name(static_cast<ForwardPhase>(p)), ms);
  }
  std::printf(" (ms)\n");
  const double rest = (step_ms - fwd_ms) / steps;
  std::printf("%-24s %9.3f %6.1f%%\n", "engine + sampler", rest, 100.0 * rest / (step_ms / steps));
  const int64_t all = bytes.qkv + bytes.o + bytes.gate_up + bytes.down + bytes.lm_head;
  std::printf("weights per step %.1f MB: %.2f GB/s over the whole step\n", static_cast<double>(all) / 1e6,
              static_cast<double>(all) / (step_ms / steps * 1e6));
  std::printf("sampler alone (greedy, vocab %lld): %.1f us; empty parallel_for: %.2f us (%d)\n",
              static_cast<long long>(mc.vocab_size), sampler_us, pool_us, sink & 1);
  return 0;
}

}  // namespace
}  // namespace nanoserve

int main(int argc, char** argv) {
  return nanoserve::run(argc, argv);
}
