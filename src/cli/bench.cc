// nanoserve bench: offline throughput (docs/benchmarks.md, "Offline throughput").
// `nanoserve bench serve` (bench_serve.cc) loads a running server instead.
//
// N requests of random token ids from a fixed seed, EOS ignored, all handed
// to the engine at once; throughput = tokens / wall time, prefill included.
// Lengths: --input-len L alone is fixed; with --range-ratio R they are
// uniform in [L(1-R), L(1+R)] (vLLM's random dataset); with --min-input-len M
// uniform in [M, L] (nano-vllm's bench). The same for output.
// --compare-serial runs the same requests one at a time in the same process.
// --shared-prefix-len P puts one random prefix of P tokens (a system prompt)
// before every prompt; --compare-prefix-cache then runs the same requests on a
// second engine with the prefix cache off, in the same process, and reports
// the prefill tokens each computed and whether the outputs are identical.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/bench_dataset.h"
#include "cli/bench_serve.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/model_arg.h"
#include "core/logging.h"
#include "engine/generate.h"
#include "engine/load_engine.h"
#include "engine/rng.h"

namespace nanoserve::cli {

namespace {

struct BenchArgs {
  ModelArg model_arg;
  std::string model;  // resolved from model_arg
  EngineFlags engine;
  int num_prompts = 64;
  int input_len = 256;
  int output_len = 256;
  int min_input_len = 0;
  int min_output_len = 0;
  double range_ratio = 0.0;
  uint64_t seed = 0;
  bool compare_serial = false;
  float temperature = 1.0f;  // 0: greedy
  int32_t top_k = -1;        // -1: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  int shared_prefix_len = 0;
  bool compare_prefix_cache = false;
  int num_warmups = 0;
  std::string dataset_name = "random";
  DatasetFlags dataset;    // sharegpt, custom: cli/bench_dataset.h
  bool ignore_eos = true;  // --ignore-eos: what the bench always does
  bool compare_speculative = false;
  int rounds = 1;
};

int32_t draw_len(Rng& rng, int len, int min_len, double ratio) {
  int lo = len, hi = len;
  if (min_len > 0) {
    lo = min_len;
  } else if (ratio > 0) {
    lo = static_cast<int>(std::floor(len * (1.0 - ratio)));
    hi = static_cast<int>(std::ceil(len * (1.0 + ratio)));
  }
  lo = std::max(lo, 1);
  hi = std::max(hi, lo);
  return lo + static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(hi - lo + 1));
}

struct RunFigures {
  double wall_s = 0, output_tps = 0, total_tps = 0;
};

RunFigures report(const char* label, const std::vector<Completion>& done, double wall_s,
                  int64_t prompt_tokens, const Engine* engine = nullptr,
                  const EngineStats* before = nullptr) {
  int64_t out = 0;
  std::vector<double> ttft, tpot;
  int64_t preemptions = 0;
  for (const Completion& c : done) {
    out += static_cast<int64_t>(c.tokens.size());
    ttft.push_back(c.ttft_s * 1e3);
    if (c.tokens.size() > 1) tpot.push_back(c.tpot_s() * 1e3);
    preemptions += c.num_preemptions;
  }
  RunFigures f;
  f.wall_s = wall_s;
  f.output_tps = static_cast<double>(out) / wall_s;
  f.total_tps = static_cast<double>(out + prompt_tokens) / wall_s;
  std::printf(
      "%-8s wall %.2f s | output %.1f tok/s | total %.1f tok/s | TTFT median %.1f ms p99 %.1f ms | "
      "TPOT median %.2f ms p99 %.2f ms | preemptions %lld\n",
      label, wall_s, f.output_tps, f.total_tps, percentile_of(ttft, 50), percentile_of(ttft, 99),
      percentile_of(tpot, 50), percentile_of(tpot, 99), static_cast<long long>(preemptions));
  if (engine != nullptr) {
    // Every request's first token comes from its prefill; the rest from decode steps of one token each.
    const EngineStats st = engine->stats();
    const int64_t computed = st.num_computed_tokens - (before ? before->num_computed_tokens : 0);
    const int64_t decodes = out - static_cast<int64_t>(done.size());
    const int64_t hits = st.prefix_cache_hits - (before ? before->prefix_cache_hits : 0);
    const int64_t queries = st.prefix_cache_queries - (before ? before->prefix_cache_queries : 0);
    std::printf(
        "%-8s prefill tokens computed %lld of %lld prompt tokens | prefix cache hits %lld of %lld (%.1f%%)\n",
        label, static_cast<long long>(computed - decodes), static_cast<long long>(prompt_tokens),
        static_cast<long long>(hits), static_cast<long long>(queries),
        queries > 0 ? 100.0 * static_cast<double>(hits) / static_cast<double>(queries) : 0.0);
  }
  if (engine != nullptr && preemptions > 0) {
    // Preemptions by kind: swapped out (blocks moved to the host area and back) or recomputed.
    const EngineStats st = engine->stats();
    auto since = [&](int64_t now, int64_t EngineStats::*field) {
      return now - (before ? before->*field : 0);
    };
    const int64_t swaps = since(st.num_swap_preemptions, &EngineStats::num_swap_preemptions);
    const int64_t all = since(st.num_preemptions, &EngineStats::num_preemptions);
    std::printf(
        "%-8s preemptions %lld: %lld swapped out (%lld blocks out, %lld in), %lld recomputed (%lld tokens "
        "recomputed)\n",
        label, static_cast<long long>(all), static_cast<long long>(swaps),
        static_cast<long long>(since(st.swapped_out_blocks, &EngineStats::swapped_out_blocks)),
        static_cast<long long>(since(st.swapped_in_blocks, &EngineStats::swapped_in_blocks)),
        static_cast<long long>(all - swaps),
        static_cast<long long>(since(st.recomputed_tokens, &EngineStats::recomputed_tokens)));
  }
  if (engine != nullptr) {
    // Speculative decoding: vLLM's acceptance rate (accepted / proposed tokens)
    // and mean acceptance length (tokens per decode that carried proposals,
    // the target's own token included).
    const EngineStats st = engine->stats();
    const int64_t drafts = st.spec_num_drafts - (before ? before->spec_num_drafts : 0);
    const int64_t proposed = st.spec_num_draft_tokens - (before ? before->spec_num_draft_tokens : 0);
    const int64_t accepted = st.spec_num_accepted_tokens - (before ? before->spec_num_accepted_tokens : 0);
    // The sizing's view of a step: its fixed part in token rows (measured unless configured).
    if (drafts > 0) {
      std::printf(
          "%-8s speculative: %lld drafts, %lld proposed tokens, %lld accepted | acceptance rate %.1f%% | "
          "mean acceptance length %.2f | step overhead %.2f rows\n",
          label, static_cast<long long>(drafts), static_cast<long long>(proposed),
          static_cast<long long>(accepted),
          100.0 * static_cast<double>(accepted) / static_cast<double>(proposed),
          1.0 + static_cast<double>(accepted) / static_cast<double>(drafts), st.spec_step_overhead_rows);
    } else if (engine->proposer() != nullptr) {
      std::printf(
          "%-8s speculative: no proposals sent (sized to none or none found) | step overhead %.2f rows\n",
          label, st.spec_step_overhead_rows);
    }
  }
  if (engine != nullptr) {
    const EngineStats st = engine->stats();
    const int64_t steps = st.decode_steps - (before ? before->decode_steps : 0);
    const int64_t rows = st.decode_step_rows - (before ? before->decode_step_rows : 0);
    const double secs = st.decode_step_seconds - (before ? before->decode_step_seconds : 0.0);
    if (steps > 0) {
      std::printf("%-8s decode-only steps %lld | mean batch %.1f | mean step %.2f ms\n", label,
                  static_cast<long long>(steps), static_cast<double>(rows) / static_cast<double>(steps),
                  secs * 1e3 / static_cast<double>(steps));
    }
  }
  std::fflush(stdout);
  return f;
}

int run_bench(const BenchArgs& a) {
  if (a.dataset_name == "random" && !a.dataset.path.empty()) {
    std::fprintf(stderr, "nanoserve bench: --dataset-path needs --dataset-name sharegpt or custom\n");
    return 2;
  }
  if (a.compare_speculative && a.engine.speculative_config.empty()) {
    std::fprintf(stderr, "nanoserve bench: --compare-speculative needs --speculative-config\n");
    return 2;
  }
  if (a.rounds < 1) {
    std::fprintf(stderr, "nanoserve bench: --rounds must be >= 1\n");
    return 2;
  }
  if (a.num_prompts < 1 || a.input_len < 1 || a.output_len < 1 || a.range_ratio < 0 || a.range_ratio >= 1 ||
      a.min_input_len < 0 || a.min_input_len > a.input_len || a.min_output_len < 0 ||
      a.min_output_len > a.output_len) {
    std::fprintf(
        stderr,
        "nanoserve bench: need --num-prompts, --input-len, --output-len >= 1, 0 <= --range-ratio < 1, "
        "and 0 <= --min-*-len <= the matching --*-len\n");
    return 2;
  }
  StatusOr<EngineConfig> config = engine_config_from_flags(a.engine);
  if (!config.ok()) {
    std::fprintf(stderr, "nanoserve bench: %s\n", config.status().to_string().c_str());
    return 2;
  }
  const std::string path = a.model.empty() ? default_model_path() : a.model;
  StatusOr<ModelSpec> spec = model_spec_from_flags(a.engine, a.model);
  if (spec.ok()) {
    if (Status st = check_flags_against_model(a.engine, *spec); !st.ok()) {
      std::fprintf(stderr, "nanoserve bench: %s\n", st.to_string().c_str());
      return 2;
    }
  }
  ThreadPool pool(a.engine.threads);
  StatusOr<LoadedEngine> le =
      spec.ok() ? load_engine(*spec, *config, pool) : StatusOr<LoadedEngine>(spec.status());
  if (!le.ok()) {
    std::fprintf(stderr, "nanoserve bench: %s: %s\n", path.c_str(), le.status().to_string().c_str());
    return 1;
  }
  Engine& engine = *le->engine;
  std::printf("%s\n", engine.capacity_line().c_str());

  Rng rng(a.seed);
  const int32_t vocab = static_cast<int32_t>(engine.model_config().vocab_size);
  std::vector<int32_t> prefix(static_cast<size_t>(std::max(0, a.shared_prefix_len)));
  for (int32_t& t : prefix) t = static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(vocab));
  std::vector<std::vector<int32_t>> prompts(a.num_prompts);
  std::vector<SamplingParams> params(a.num_prompts);
  auto sampling = [&a](SamplingParams& p) {
    p.ignore_eos = true;
    p.temperature = a.temperature;
    p.top_k = a.top_k;
    p.top_p = a.top_p;
    p.min_p = a.min_p;
  };
  int64_t prompt_tokens = 0, output_tokens = 0;
  std::vector<DatasetPrompt> from_file;
  if (a.dataset_name != "random") {
    const Tokenizer& tok = *le->tokenizer;
    // As vLLM counts them: the tokenizer's special tokens included.
    auto count = [&tok](const std::string& text) -> StatusOr<int64_t> {
      return static_cast<int64_t>(tok.encode(text, /*add_special=*/true, /*parse_special=*/false).size());
    };
    StatusOr<std::vector<DatasetPrompt>> d =
        load_dataset(a.dataset_name, a.dataset, a.num_prompts, a.seed, count);
    if (!d.ok()) {
      std::fprintf(stderr, "nanoserve bench: %s\n", d.status().to_string().c_str());
      return 2;
    }
    from_file = std::move(*d);
  }
  for (int i = 0; i < a.num_prompts; ++i) {
    if (!from_file.empty()) {
      // The text as a request would carry it: the tokenizer's own special tokens (BOS) included.
      prompts[i] = le->tokenizer->encode(from_file[i].prompt, /*add_special=*/true, /*parse_special=*/false);
      params[i].max_tokens = from_file[i].output_len;
    } else {
      prompts[i].resize(draw_len(rng, a.input_len, a.min_input_len, a.range_ratio));
      for (int32_t& t : prompts[i]) t = static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(vocab));
      params[i].max_tokens = draw_len(rng, a.output_len, a.min_output_len, a.range_ratio);
    }
    prompts[i].insert(prompts[i].begin(), prefix.begin(), prefix.end());
    sampling(params[i]);
    params[i].seed = a.seed * 1000003 + static_cast<uint64_t>(i);
    prompt_tokens += static_cast<int64_t>(prompts[i].size());
    output_tokens += params[i].max_tokens;
  }
  std::printf(
      "%d requests: %lld prompt tokens, %lld output tokens; %d threads, max_num_seqs %d, "
      "max_num_batched_tokens %d\n",
      a.num_prompts, static_cast<long long>(prompt_tokens), static_cast<long long>(output_tokens),
      pool.num_threads(), config->max_num_seqs, config->max_num_batched_tokens);
  std::fflush(stdout);

  GenerateOptions opts;
  opts.progress = true;
  if (a.num_warmups > 0) {
    // Prompts of their own (so the prefix cache holds none of the measured
    // ones), the full input length, two tokens each: the first steps' one-time
    // costs (kernel loading, GEMM choices) land here, not in the figures.
    std::vector<std::vector<int32_t>> warm(static_cast<size_t>(a.num_warmups));
    std::vector<SamplingParams> warm_params(warm.size());
    for (size_t i = 0; i < warm.size(); ++i) {
      warm[i].resize(static_cast<size_t>(a.input_len) + prefix.size());
      for (int32_t& t : warm[i]) t = static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(vocab));
      warm_params[i].max_tokens = 2;
      sampling(warm_params[i]);
    }
    GenerateOptions quiet;
    StatusOr<std::vector<Completion>> w = generate(engine, warm, warm_params, quiet);
    if (!w.ok()) {
      std::fprintf(stderr, "nanoserve bench: warm-up: %s\n", w.status().to_string().c_str());
      return 1;
    }
  }
  const EngineStats before = engine.stats();
  Clock::time_point t0 = Clock::now();
  StatusOr<std::vector<Completion>> batched = generate(engine, prompts, params, opts);
  const double batched_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!batched.ok()) {
    std::fprintf(stderr, "nanoserve bench: %s\n", batched.status().to_string().c_str());
    return 1;
  }
  const RunFigures fb = report(config->enable_prefix_caching ? "cache" : "batched", *batched, batched_s,
                               prompt_tokens, &engine, &before);

  if (a.compare_prefix_cache) {
    EngineConfig off = *config;
    off.enable_prefix_caching = !config->enable_prefix_caching;
    StatusOr<LoadedEngine> le2 = load_engine(spec->path, off, pool);
    if (!le2.ok()) {
      std::fprintf(stderr, "nanoserve bench: %s\n", le2.status().to_string().c_str());
      return 1;
    }
    Clock::time_point t1 = Clock::now();
    StatusOr<std::vector<Completion>> other = generate(*le2->engine, prompts, params, opts);
    const double other_s = std::chrono::duration<double>(Clock::now() - t1).count();
    if (!other.ok()) {
      std::fprintf(stderr, "nanoserve bench: %s\n", other.status().to_string().c_str());
      return 1;
    }
    report(off.enable_prefix_caching ? "cache" : "no-cache", *other, other_s, prompt_tokens,
           le2->engine.get());
    int same = 0;
    for (int i = 0; i < a.num_prompts; ++i) same += (*other)[i].tokens == (*batched)[i].tokens ? 1 : 0;
    std::printf("outputs identical with and without the prefix cache: %s (%d of %d requests)\n",
                same == a.num_prompts ? "yes" : "NO", same, a.num_prompts);
    if (same != a.num_prompts) return 1;
  }

  if (a.compare_speculative) {
    // The same requests without proposals, alternating with runs with them,
    // best of --rounds each: the machine's load moves between runs.
    EngineConfig off = *config;
    off.speculative = SpeculativeConfig{};
    StatusOr<LoadedEngine> le2 = load_engine(*spec, off, pool);
    if (!le2.ok()) {
      std::fprintf(stderr, "nanoserve bench: %s\n", le2.status().to_string().c_str());
      return 1;
    }
    double best_spec = fb.output_tps, best_plain = 0.0;
    std::vector<double> ratios;  // per round: speculative / plain, run back to back
    double spec_tps = fb.output_tps;
    bool same = true;
    for (int round = 0; round < std::max(1, a.rounds); ++round) {
      if (round > 0) {
        const EngineStats b = engine.stats();
        Clock::time_point t2 = Clock::now();
        StatusOr<std::vector<Completion>> again = generate(engine, prompts, params, opts);
        const double again_s = std::chrono::duration<double>(Clock::now() - t2).count();
        if (!again.ok()) {
          std::fprintf(stderr, "nanoserve bench: %s\n", again.status().to_string().c_str());
          return 1;
        }
        spec_tps = report("spec", *again, again_s, prompt_tokens, &engine, &b).output_tps;
        best_spec = std::max(best_spec, spec_tps);
        for (int i = 0; i < a.num_prompts; ++i) same = same && (*again)[i].tokens == (*batched)[i].tokens;
      }
      const EngineStats b = le2->engine->stats();
      Clock::time_point t1 = Clock::now();
      StatusOr<std::vector<Completion>> plain = generate(*le2->engine, prompts, params, opts);
      const double plain_s = std::chrono::duration<double>(Clock::now() - t1).count();
      if (!plain.ok()) {
        std::fprintf(stderr, "nanoserve bench: %s\n", plain.status().to_string().c_str());
        return 1;
      }
      const double plain_tps =
          report("plain", *plain, plain_s, prompt_tokens, le2->engine.get(), &b).output_tps;
      best_plain = std::max(best_plain, plain_tps);
      ratios.push_back(spec_tps / plain_tps);
      for (int i = 0; i < a.num_prompts; ++i) same = same && (*plain)[i].tokens == (*batched)[i].tokens;
    }
    std::printf("best of %d: speculative %.1f tok/s, plain %.1f tok/s | speed-up %.2fx\n",
                std::max(1, a.rounds), best_spec, best_plain, best_spec / best_plain);
    // Each round's pair ran back to back, so its ratio saw about one load; the median of them
    // moves less than the ratio of bests when the machine is shared.
    std::printf("speed-up per round:");
    for (double r : ratios) std::printf(" %.2fx", r);
    std::sort(ratios.begin(), ratios.end());
    const size_t n = ratios.size();
    const double median = n % 2 == 1 ? ratios[n / 2] : 0.5 * (ratios[n / 2 - 1] + ratios[n / 2]);
    const EngineStats all = engine.stats();  // every speculative run of this command
    const double rate = all.spec_num_draft_tokens > 0
                            ? 100.0 * static_cast<double>(all.spec_num_accepted_tokens) /
                                  static_cast<double>(all.spec_num_draft_tokens)
                            : 0.0;
    std::printf(" | median %.2fx\n", median);
    std::printf(
        "speculative summary: max_num_seqs %d | acceptance %.1f%% of %lld proposed tokens | best %.2fx | "
        "median %.2fx\n",
        config->max_num_seqs, rate, static_cast<long long>(all.spec_num_draft_tokens), best_spec / best_plain,
        median);
    std::printf("outputs identical with and without speculative decoding: %s (%d requests)\n",
                same ? "yes" : "NO", a.num_prompts);
    if (!same) return 1;
  }

  if (a.compare_serial) {
    std::vector<Completion> serial;
    double serial_s = 0;
    for (int i = 0; i < a.num_prompts; ++i) {
      std::fprintf(stderr, "\rserial %d/%d", i + 1, a.num_prompts);
      Clock::time_point s0 = Clock::now();
      StatusOr<std::vector<Completion>> one =
          generate(engine, std::span(&prompts[i], 1), std::span(&params[i], 1));
      serial_s += std::chrono::duration<double>(Clock::now() - s0).count();
      if (!one.ok()) {
        std::fprintf(stderr, "\nnanoserve bench: %s\n", one.status().to_string().c_str());
        return 1;
      }
      // Seeded sampling: one at a time must give what the batch gave.
      if ((*one)[0].tokens != (*batched)[i].tokens) {
        std::fprintf(stderr, "\nnanoserve bench: request %d differs between serial and batched runs\n", i);
        return 1;
      }
      serial.push_back(std::move((*one)[0]));
    }
    std::fprintf(stderr, "\n");
    const RunFigures fs = report("serial", serial, serial_s, prompt_tokens);
    std::printf("speed-up (output tok/s, batched / serial): %.2fx\n", fb.output_tps / fs.output_tps);
    std::printf("outputs identical batched and serial: yes (%d requests)\n", a.num_prompts);
  }
  return 0;
}

}  // namespace

CommandRun add_bench_command(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* sub =
      app.add_subcommand("bench", "Offline throughput on random prompts (see docs/benchmarks.md)");
  add_model_arg(sub, args->model_arg,
                "GGUF file or Hugging Face folder (default: the bundled default model)");
  sub->add_option("--num-prompts", args->num_prompts, "Requests")->capture_default_str();
  // vLLM's random-dataset names are accepted beside ours.
  sub->add_option("--input-len,--random-input-len", args->input_len,
                  "Prompt length (max with --min-input-len)")
      ->capture_default_str();
  sub->add_option("--output-len,--random-output-len", args->output_len,
                  "Output length (max with --min-output-len)")
      ->capture_default_str();
  sub->add_option("--min-input-len", args->min_input_len, "Prompt lengths uniform in [this, --input-len]");
  sub->add_option("--min-output-len", args->min_output_len, "Output lengths uniform in [this, --output-len]");
  sub->add_option("--range-ratio,--random-range-ratio", args->range_ratio,
                  "Lengths uniform in [L(1-R), L(1+R)]")
      ->capture_default_str();
  sub->add_option("--dataset-name", args->dataset_name,
                  "Prompts: random token ids, sharegpt (a ShareGPT JSON file) or custom (JSON Lines of "
                  "{\"prompt\": ...}), as vLLM's benchmarks read them")
      ->check(CLI::IsMember({"random", "sharegpt", "custom"}))
      ->capture_default_str();
  add_dataset_flags(sub, args->dataset);
  sub->add_flag("--ignore-eos", args->ignore_eos,
                "Every request makes its output length (always the case here)");
  sub->add_option("--temperature", args->temperature, "Sampling temperature of every request (0: greedy)")
      ->check(CLI::Range(0.0f, 100.0f))
      ->capture_default_str();
  sub->add_option("--top-k", args->top_k, "Keep the k most likely tokens (-1: off)")
      ->check(CLI::Range(-1, 1 << 30))
      ->capture_default_str();
  sub->add_option("--top-p", args->top_p, "Keep the smallest set of tokens whose mass reaches p (1: off)")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  sub->add_option("--min-p", args->min_p, "Drop tokens below min_p times the most likely one's (0: off)")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  sub->add_option("--seed", args->seed, "Seed of the random prompts and of sampling")->capture_default_str();
  sub->add_flag("--compare-serial", args->compare_serial,
                "Also run the same requests one at a time and print the speed-up");
  sub->add_option("--shared-prefix-len", args->shared_prefix_len,
                  "A random prefix of this many tokens shared by every prompt (a system prompt)")
      ->check(CLI::Range(0, 1 << 20));
  sub->add_flag("--compare-prefix-cache", args->compare_prefix_cache,
                "Also run the same requests with the prefix cache flipped, in the same process");
  sub->add_flag("--compare-speculative", args->compare_speculative,
                "Run the same requests without --speculative-config too, alternating, and print the speed-up "
                "and whether the outputs are identical (they must be)");
  sub->add_option("--rounds", args->rounds, "With --compare-speculative: runs of each, best taken")
      ->capture_default_str();
  sub->add_option("--num-warmups", args->num_warmups,
                  "Requests of their own run first and not measured (one-time costs of the first steps)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  add_engine_flags(sub, args->engine);
  CommandRun serve = add_bench_serve_command(*sub);
  CLI::App* serve_sub = sub->get_subcommand("serve");
  return [args, serve, serve_sub] {
    if (serve_sub->parsed()) return serve();
    StatusOr<std::string> model = resolve_model_arg(args->model_arg);
    if (!model.ok()) {
      std::fprintf(stderr, "nanoserve bench: %s\n", model.status().message().c_str());
      return 2;
    }
    args->model = *model;
    return run_bench(*args);
  };
}

}  // namespace nanoserve::cli
