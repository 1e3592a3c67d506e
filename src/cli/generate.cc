// nanoserve generate [-m MODEL] (-p PROMPT | --chat MESSAGE) [-n N] [--temperature T]
//   [--top-k K] [--top-p P] [--min-p P] [--seed S] [--stop STR]... [--ignore-eos]
//   [--kv-cache paged|naive] [--prefill-chunk N] [engine flags: --block-size, --threads, ...]
//
// Streams one request's text to stdout as each token is produced. Stops on an
// end token (eos, <|im_end|>), a stop string, or after N tokens. Timings go to
// stderr: load time, prompt tokens, prefill and decode tok/s.
//
// The request runs through the Engine (scheduler, chunked prefill, sampler,
// stop checker, detokenizer). --kv-cache picks the runner's KV storage:
// paged (default: blocks of a shared pool) or naive (one contiguous slot per
// sequence, the reference); the two must print the same text (tests/py checks it).

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/model_arg.h"
#include "core/thread_pool.h"
#include "engine/load_engine.h"
#include "template/chat_template.h"

namespace nanoserve::cli {

namespace {

struct GenerateArgs {
  ModelArg model_arg;
  std::string model;  // resolved from model_arg
  std::string prompt;
  std::string chat;
  int32_t n = 128;
  float temperature = 0.8f;
  int32_t top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  std::string kv_cache = "paged";
  EngineFlags engine;
  std::string chat_template;  // a file or the template text; empty: the model's
};

using Clock = std::chrono::steady_clock;
double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

int fail(const std::string& what) {
  std::fprintf(stderr, "nanoserve generate: %s\n", what.c_str());
  return 1;
}

void print_timings(double load_s, size_t n_prompt, double prefill_s, int32_t n_out, FinishReason finish,
                   double decode_s, int threads) {
  std::printf("\n");
  std::fflush(stdout);  // the text's last line before the stats on stderr
  std::fprintf(
      stderr,
      "load %.3f s | prompt %zu tokens, prefill %.1f tok/s | generated %d tokens (%s), decode %.1f tok/s "
      "| threads %d\n",
      load_s, n_prompt, static_cast<double>(n_prompt) / prefill_s, n_out, finish_reason_name(finish),
      n_out > 1 ? (n_out - 1) / decode_s : 0.0, threads);
}

// The Engine path: the request is one of the engine's, streamed from step().
int run_with_engine(Engine& engine, std::vector<int32_t> prompt, const SamplingParams& params, double load_s,
                    int threads) {
  const size_t n_prompt = prompt.size();
  StatusOr<RequestId> id = engine.add_request(std::move(prompt), params);
  if (!id.ok())
    return fail(id.status().to_string() + " (see --kv-cache-memory, --num-blocks, --max-model-len)");
  std::vector<RequestOutput> outs;
  RequestOutput last;
  while (engine.has_unfinished()) {
    if (Status st = engine.step(outs); !st.ok()) return fail(st.to_string());
    for (const RequestOutput& o : outs) {
      std::fwrite(o.text.data(), 1, o.text.size(), stdout);
      std::fflush(stdout);
      last = o;
    }
  }
  print_timings(load_s, n_prompt, seconds(last.first_token_time - last.arrival_time), last.num_output_tokens,
                last.finish_reason, seconds(last.finish_time - last.first_token_time), threads);
  return 0;
}

int run_generate(GenerateArgs a) {
  if (a.prompt.empty() == a.chat.empty()) {
    std::fprintf(stderr, "nanoserve generate: give exactly one of -p PROMPT or --chat MESSAGE\n");
    return 2;
  }
  // One request: a smaller pool than the server's unless asked otherwise
  // (the step's defaults, one sequence and 512-token chunks, are the flags' own).
  if (a.engine.config.num_blocks == 0 && a.engine.kv_cache_memory.empty()) a.engine.kv_cache_memory = "256M";
  StatusOr<EngineConfig> config = engine_config_from_flags(a.engine);
  if (!config.ok()) return fail(config.status().to_string());
  config->naive_kv_cache = a.kv_cache == "naive";

  const std::string path = a.model.empty() ? default_model_path() : a.model;
  StatusOr<ModelSpec> spec = model_spec_from_flags(a.engine, a.model);
  if (spec.ok()) {
    if (Status st = check_flags_against_model(a.engine, *spec); !st.ok()) return fail(st.to_string());
  }
  const auto t_load = Clock::now();
  ThreadPool pool(a.engine.threads);
  StatusOr<LoadedEngine> le =
      spec.ok() ? load_engine(*spec, *config, pool) : StatusOr<LoadedEngine>(spec.status());
  if (!le.ok()) return fail(path + ": " + le.status().to_string());
  const double load_s = seconds(Clock::now() - t_load);
  const Tokenizer& tok = *le->tokenizer;

  SamplingParams params;
  params.temperature = a.temperature;
  params.top_k = a.top_k;
  params.top_p = a.top_p;
  params.min_p = a.min_p;
  params.max_tokens = a.n;
  params.stop = a.stop;
  params.ignore_eos = a.ignore_eos;
  params.seed = a.seed ? *a.seed : std::random_device{}();
  if (Status st = params.validate(tok.n_vocab()); !st.ok()) return fail(st.to_string());

  std::vector<int32_t> prompt;
  if (!a.chat.empty()) {
    auto tmpl = ChatTemplate::of_model_or_override(tok, a.chat_template);
    if (!tmpl.ok()) return fail(tmpl.status().to_string());
    // The message is text: special-token text in it stays text.
    const ChatMessage msg{"user", a.chat};
    auto pieces = tmpl->render_pieces(std::span<const ChatMessage>(&msg, 1), true);
    if (!pieces.ok()) return fail(pieces.status().to_string());
    prompt = encode_prompt(tok, *pieces, /*add_special=*/false);
    // The template's own end of turn ends the reply, also when --chat-template
    // brought a template whose turn token is not among the model's end ids.
    if (auto end = tok.token_id(tmpl->end_of_turn())) params.stop_token_ids.push_back(*end);
  } else {
    prompt = tok.encode(a.prompt, true, true);
  }
  if (prompt.empty()) return fail("the prompt encodes to no tokens");

  std::fprintf(stderr, "%s\n", le->engine->capacity_line().c_str());
  return run_with_engine(*le->engine, std::move(prompt), params, load_s, pool.num_threads());
}

}  // namespace

CommandRun add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt, streaming to stdout");
  add_model_arg(cmd, args->model_arg,
                "GGUF file or Hugging Face folder (default: the bundled SmolLM2-135M-Instruct)");
  cmd->add_option("-p,--prompt", args->prompt, "Prompt text (special tokens like <|im_start|> are parsed)");
  cmd->add_option("--chat", args->chat, "A user message, rendered with the model's chat template");
  cmd->add_option("--chat-template", args->chat_template,
                  "Chat template for --chat instead of the model's: a Jinja file, or the template text");
  cmd->add_option("-n,--max-tokens", args->n, "Tokens to generate at most")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--temperature", args->temperature, "0 = greedy")->check(CLI::Range(0.0f, 100.0f));
  cmd->add_option("--top-k", args->top_k, "Keep the k most likely tokens (-1 or 0: off)");
  cmd->add_option("--top-p", args->top_p, "Nucleus mass to keep (1: off)");
  cmd->add_option("--min-p", args->min_p, "Drop tokens below min_p * the top probability (0: off)");
  cmd->add_option("--seed", args->seed, "Sampling seed (default: random)");
  cmd->add_option("--stop", args->stop, "Stop string (repeatable); not printed");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "Keep generating past end tokens (benchmarks)");
  cmd->add_option(
         "--kv-cache", args->kv_cache,
         "KV storage: paged (default, blocks of a pool) or naive (contiguous per sequence, a reference)")
      ->check(CLI::IsMember({"paged", "naive"}));
  // One request: one sequence a step and 512-token prefill chunks unless the
  // flags say otherwise (--prefill-chunk is the older name of the token budget).
  args->engine.max_num_seqs = 1;
  args->engine.max_num_batched_tokens = 512;
  CLI::Option* chunk = cmd->add_option("--prefill-chunk", args->engine.max_num_batched_tokens,
                                       "Prompt tokens per forward step (= --max-num-batched-tokens)")
                           ->check(CLI::Range(1, 1 << 16));
  add_engine_flags(cmd, args->engine);
  chunk->excludes(cmd->get_option("--max-num-batched-tokens"));
  return [args] {
    StatusOr<std::string> model = resolve_model_arg(args->model_arg);
    if (!model.ok()) {
      std::fprintf(stderr, "nanoserve generate: %s\n", model.status().message().c_str());
      return 2;
    }
    args->model = *model;
    return run_generate(*args);
  };
}

}  // namespace nanoserve::cli
